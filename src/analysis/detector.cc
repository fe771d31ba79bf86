// laggard — the straggler analysis: the RFC rule per window (evaluate_window), the report's metric
// names (Report::metrics), and persistence over windows (Detector).
#include "laggard/detector.hpp"

#include "analysis/column_kernels.hpp"
#include "analysis/median.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace laggard {

// ---------------------------------------------------------------------------------------------
// Options

const char* to_string(Reference ref) noexcept {
  switch (ref) {
    case Reference::mean:
      return "mean";
    case Reference::median:
      return "median";
    case Reference::robust:
      return "robust";
  }
  return "mean";
}

Reference parse_reference(std::string_view text) {
  if (text == "mean") return Reference::mean;
  if (text == "median") return Reference::median;
  if (text == "robust") return Reference::robust;
  throw std::invalid_argument("unknown straggler reference '" + std::string(text) +
                              "': expected mean, median or robust");
}

namespace {

std::string number(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", value);
  return buf;
}

std::string fixed2(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", value);
  return buf;
}

[[noreturn]] void bad_option(const char* setting, const std::string& value, const char* rule) {
  throw std::invalid_argument(std::string("DetectorOptions.") + setting + " must be " + rule +
                              ", got " + value);
}

}  // namespace

const char* to_string(Method method) noexcept {
  return method == Method::threshold ? "threshold" : "sequential";
}

Method parse_method(std::string_view text) {
  if (text == "sequential") return Method::sequential;
  if (text == "threshold") return Method::threshold;
  throw std::invalid_argument("unknown detector method '" + std::string(text) +
                              "': expected sequential or threshold");
}

void DetectorOptions::validate() const {
  // Written as !(ok) so that NaN fails every check.
  if (!(std::isfinite(relative_threshold) && relative_threshold >= 1.0))
    bad_option("relative_threshold", number(relative_threshold), "finite and >= 1.0");
  if (!(absolute_ms_threshold >= 0.0))
    bad_option("absolute_ms_threshold", number(absolute_ms_threshold), ">= 0");
  if (!(std::isfinite(mad_z) && mad_z > 0.0)) bad_option("mad_z", number(mad_z), "finite and > 0");
  if (confirm_k < 1) bad_option("confirm_k", std::to_string(confirm_k), ">= 1");
  if (confirm_n > 32) bad_option("confirm_n", std::to_string(confirm_n), "<= 32");
  if (confirm_k > confirm_n)
    bad_option("confirm_k", std::to_string(confirm_k),
               ("<= confirm_n (" + std::to_string(confirm_n) + ")").c_str());
  if (!(std::isfinite(healthy_spread) && healthy_spread >= 1.0))
    bad_option("healthy_spread", number(healthy_spread), "finite and >= 1.0");
  if (!(min_cost_share >= 0.0 && min_cost_share < 1.0))
    bad_option("min_cost_share", number(min_cost_share), "in [0, 1)");
  if (method == Method::sequential) {
    if (!(relative_threshold > 1.0))
      bad_option("relative_threshold", number(relative_threshold),
                 "> 1.0 with the sequential method");
    if (!(std::isfinite(healthy_spread) && healthy_spread >= 1.0 &&
          healthy_spread < relative_threshold))
      bad_option("healthy_spread", number(healthy_spread),
                 (">= 1.0 and < relative_threshold (" + number(relative_threshold) + ")").c_str());
    if (!(pause_rate > 0.0 && pause_rate < 1.0))
      bad_option("pause_rate", number(pause_rate), "in (0, 1)");
    if (!(false_alarm_budget > 0.0 && false_alarm_budget < 1.0))
      bad_option("false_alarm_budget", number(false_alarm_budget), "in (0, 1)");
    if (!(std::isfinite(budget_windows) && budget_windows >= 1.0))
      bad_option("budget_windows", number(budget_windows), "finite and >= 1");
  }
}

DetectorOptions DetectorOptions::rfc() {
  DetectorOptions o;
  o.method = Method::threshold;
  o.ref = Reference::mean;
  o.relative_threshold = 1.2;
  o.absolute_ms_threshold = 5.0;
  o.confirm_k = 2;
  o.confirm_n = 3;
  return o;
}

DetectorOptions DetectorOptions::recommended(int) { return DetectorOptions{}; }

DetectorOptions DetectorOptions::preset(std::string_view name, int world_size) {
  if (name == "rfc") return rfc();
  if (name == "default" || name == "recommended") return recommended(world_size);
  throw std::invalid_argument("unknown detector preset '" + std::string(name) +
                              "': expected default, recommended or rfc");
}

std::string describe_rule(const DetectorOptions& o) {
  char buf[320];
  std::string flags = "ref " + std::string(to_string(o.ref)) + ", slow if t >= ref x " +
                      fixed2(o.relative_threshold);
  if (std::isfinite(o.absolute_ms_threshold)) {
    std::snprintf(buf, sizeof buf, " or t - ref >= %.1f ms", o.absolute_ms_threshold);
    flags += buf;
  } else {
    flags += " (no absolute rule)";
  }
  if (o.ref == Reference::robust) {
    std::snprintf(buf, sizeof buf, ", and MAD z >= %.1f", o.mad_z);
    flags += buf;
  }
  // The materiality gate, both methods.
  char gate[128];
  std::snprintf(gate, sizeof gate, "; a verdict also needs > %.2fx typical and >= %g%% of the step",
                o.healthy_spread, 100.0 * o.min_cost_share);
  if (o.method == Method::threshold) {
    std::snprintf(buf, sizeof buf, "; confirmed when slow in %d of the last %d windows",
                  o.confirm_k, o.confirm_n);
    return "threshold: " + flags + buf + gate;
  }
  std::snprintf(buf, sizeof buf,
                "sequential: confirmed on evidence over windows that a rank is %.2fx its "
                "cohort's median (healthy within %.2fx), at most %g%% false alarms per %g "
                "windows; window flags: ",
                o.relative_threshold, o.healthy_spread, 100.0 * o.false_alarm_budget,
                o.budget_windows);
  return buf + flags + gate;
}

double evidence_threshold(const DetectorOptions& options, double pairs) {
  const double watched = std::max(1.0, pairs) * options.budget_windows;
  return std::log(watched / options.false_alarm_budget);
}

// ---------------------------------------------------------------------------------------------
// One window

namespace {

// MAD × 1.4826 estimates the standard deviation of normally distributed times.
constexpr double kMadToSigma = 1.4826;

// One stage of one cohort: the times of the ranks that reported it, in sample order. While every
// member so far reported the stage the column is dense (entry i is member i) and keeps no member
// list; the first member that skips it makes it sparse.
struct Column {
  std::string_view name;
  StageKind kind = StageKind::compute;
  std::size_t count = 0;    // entries in use; ms (and member, once sparse) hold every member
  bool dense = true;
  std::vector<int> member;  // sparse only: position in Cohort::members of entry i
  std::vector<double> ms;

  int member_at(std::size_t i) const {
    return dense ? static_cast<int>(i) : member[i];
  }
};

struct Cohort {
  std::string_view name;
  std::vector<int> members;  // indices into Window::samples, in sample order
  std::vector<int> ranks;    // ranks[m] = samples[members[m]].rank
  bool ranks_ascending = true;  // ranks[m] <= ranks[m + 1]: columns are in rank order
  std::vector<Column> stages;  // the first `used` are this window's; the rest keep capacity
  std::size_t used = 0;
};

// What the rule found in one column, before it becomes StageFigures.
struct ColumnResult {
  double ref = 0.0, mean = 0.0, median = 0.0, min = 0.0, max = 0.0;
  int top = -1;              // position in the column of the largest time
  std::vector<int> flagged;  // positions in the column, ordered by rank
};

// Everything an evaluation needs besides its output, kept per thread between windows. A window
// of 16,384 ranks x 16 stages needs ~3 MB of it; allocated afresh for every window, its page
// faults were the largest item after the evaluator itself in a profile of
// bench/detector_bench.cc.
struct Workspace {
  std::vector<Cohort> cohorts;  // the first `cohorts_used` are this window's
  std::size_t cohorts_used = 0;
  std::vector<double> scratch;
  std::vector<double> own_work, capped_work;
  std::vector<double> untimed;
  std::vector<double> step;  // per member: its step time (step_of), for the cohort's median
  std::vector<int> host_of_member;
  std::vector<int> host_size;             // members per host
  std::vector<int> flagged_on, ranks_on;  // per host, for group_hosts
  std::vector<std::string_view> host_names;
  std::vector<ColumnResult> results;
  // The fast path's view of a cohort's columns: names and where their times go.
  std::vector<std::string_view> layout_names;
  std::vector<double*> layout_ms;
};

std::string cohort_label(std::string_view cohort) {
  return cohort.empty() ? std::string("default") : std::string(cohort);
}

// " of cohort 'x'" — left out for the default cohort, which most jobs only have.
std::string cohort_suffix(std::string_view cohort) {
  return cohort.empty() ? std::string() : " of cohort '" + std::string(cohort) + "'";
}

// "0,1,2", "0-63,70": runs of four or more become ranges; a long list ends in "and N more".
void append_ranks(std::string& out, const std::vector<int>& sorted) {
  constexpr int kMaxItems = 16;
  const std::size_t n = sorted.size();
  int items = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j + 1 < n && sorted[j + 1] == sorted[j] + 1) ++j;
    const std::size_t run = j - i + 1;
    if (run >= 4) {
      if (items == kMaxItems) {
        out += " and " + std::to_string(n - i) + " more";
        return;
      }
      if (items++) out += ',';
      out += std::to_string(sorted[i]) + '-' + std::to_string(sorted[j]);
    } else {
      for (std::size_t k = i; k <= j; ++k) {
        if (items == kMaxItems) {
          out += " and " + std::to_string(n - k) + " more";
          return;
        }
        if (items++) out += ',';
        out += std::to_string(sorted[k]);
      }
    }
    i = j + 1;
  }
}

// A finding's cost to the step (RankFinding::cost_ms, cost_share) from its times and the step
// time of its cohort in the window.
void set_cost(RankFinding& f, double step_ms) {
  f.cost_ms = std::max(0.0, f.ms - f.ref_ms);
  f.cost_share = step_ms > 0.0 ? std::min(1.0, f.cost_ms / step_ms) : 0.0;
}

std::string ranks_phrase(const std::vector<int>& sorted) {
  std::string out = sorted.size() == 1 ? "rank " : "ranks ";
  append_ranks(out, sorted);
  return out;
}

// Stage names are short: compare them inline, eight bytes at a time, instead of calling memcmp.
inline bool same_name(std::string_view a, std::string_view b) {
  const std::size_t n = a.size();
  if (n != b.size()) return false;
  const char* p = a.data();
  const char* q = b.data();
  auto same8 = [](const char* x, const char* y) {
    std::uint64_t u, v;
    std::memcpy(&u, x, 8);
    std::memcpy(&v, y, 8);
    return u == v;
  };
  auto same4 = [](const char* x, const char* y) {
    std::uint32_t u, v;
    std::memcpy(&u, x, 4);
    std::memcpy(&v, y, 4);
    return u == v;
  };
  if (n >= 8) {
    for (std::size_t i = 0; i + 8 < n; i += 8)
      if (!same8(p + i, q + i)) return false;
    return same8(p + n - 8, q + n - 8);  // the last 8 bytes, overlapping the loop's
  }
  if (n >= 4) return same4(p, q) & same4(p + n - 4, q + n - 4);  // two overlapping halves
  if (n == 0) return true;
  return (p[0] == q[0]) & (p[n / 2] == q[n / 2]) & (p[n - 1] == q[n - 1]);  // 1 to 3 bytes
}

constexpr std::size_t kPrefetchAhead = 4;  // samples: about the loads' latency at a sample's work

int find_stage(const Cohort& cohort, std::size_t pos, std::string_view name) {
  // Fast path: most ranks report the same stages in the same order.
  if (pos < cohort.used && same_name(cohort.stages[pos].name, name)) return static_cast<int>(pos);
  for (std::size_t i = 0; i < cohort.used; ++i)
    if (same_name(cohort.stages[i].name, name)) return static_cast<int>(i);
  return -1;
}

Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

class WindowEvaluator {
 public:
  WindowEvaluator(const Window& window, const DetectorOptions& options, Report& report,
                  Workspace& ws)
      : samples_(window.samples), options_(options), report_(report), ws_(ws) {}

  void run() {
    reset_report();
    group_by_cohort();
    double best_gap = 0.0;
    for (std::size_t c = 0; c < ws_.cohorts_used; ++c) {
      Cohort& cohort = ws_.cohorts[c];
      build_columns(cohort);
      add_untimed(cohort);
      evaluate_cohort(cohort, best_gap);
    }
    report_.stages.resize(figures_used_);
  }

 private:
  // Empties the report, keeping the storage of its stage figures and findings for this window.
  void reset_report() {
    const std::int64_t step = report_.step;
    std::vector<StageFigures> stages = std::move(report_.stages);
    std::vector<RankFinding> stragglers = std::move(report_.stragglers);
    std::vector<RankFinding> waiting = std::move(report_.waiting);
    stragglers.clear();
    waiting.clear();
    report_ = Report{};
    report_.step = step;
    report_.stages = std::move(stages);
    report_.stragglers = std::move(stragglers);
    report_.waiting = std::move(waiting);
    figures_used_ = 0;
  }

  Cohort& add_cohort(std::string_view name) {
    if (ws_.cohorts_used == ws_.cohorts.size()) ws_.cohorts.emplace_back();
    Cohort& c = ws_.cohorts[ws_.cohorts_used++];
    c.name = name;
    c.members.clear();
    c.ranks.clear();
    c.ranks_ascending = true;
    c.used = 0;
    return c;
  }

  void group_by_cohort() {
    ws_.cohorts_used = 0;
    std::unordered_map<std::string_view, int> index;
    int last = -1;
    int world = 0;
    bool ranks_sorted_unique = true;
    for (std::size_t i = 0; i < samples_.size(); ++i) {
      const StepSample& s = samples_[i];
      world = std::max(world, s.world_size);
      if (i > 0 && s.rank <= samples_[i - 1].rank) ranks_sorted_unique = false;
      int c = last;
      if (c < 0 || ws_.cohorts[static_cast<std::size_t>(c)].name != s.cohort) {
        auto [it, inserted] = index.emplace(s.cohort, static_cast<int>(ws_.cohorts_used));
        if (inserted) add_cohort(s.cohort);
        c = it->second;
      }
      Cohort& cohort = ws_.cohorts[static_cast<std::size_t>(c)];
      cohort.members.push_back(static_cast<int>(i));
      if (!cohort.ranks.empty() && s.rank < cohort.ranks.back()) cohort.ranks_ascending = false;
      cohort.ranks.push_back(s.rank);
      last = c;
    }
    report_.world_size = world;
    if (ranks_sorted_unique) {
      report_.ranks_seen = static_cast<int>(samples_.size());
    } else {
      std::vector<int> ranks;
      ranks.reserve(samples_.size());
      for (const StepSample& s : samples_) ranks.push_back(s.rank);
      std::sort(ranks.begin(), ranks.end());
      report_.ranks_seen =
          static_cast<int>(std::unique(ranks.begin(), ranks.end()) - ranks.begin());
    }
  }

  // A fresh column (or a reused one) for `name`, first reported by member `m`.
  Column& add_column(Cohort& cohort, const StageTime& st, std::size_t m) {
    if (cohort.used == cohort.stages.size()) cohort.stages.emplace_back();
    Column& col = cohort.stages[cohort.used++];
    col.name = st.name;
    col.kind = st.kind;
    col.count = 0;
    col.dense = m == 0;
    const std::size_t members = cohort.members.size();
    if (col.ms.size() < members) col.ms.resize(members);
    if (!col.dense && col.member.size() < members) col.member.resize(members);
    return col;
  }

  static void append(Column& col, std::size_t members, int m, double ms) {
    if (col.dense) {
      if (col.count == static_cast<std::size_t>(m)) {
        col.ms[col.count++] = ms;
        return;
      }
      // A member skipped the stage: from here on, entries name their member.
      if (col.member.size() < members) col.member.resize(members);
      for (std::size_t i = 0; i < col.count; ++i) col.member[i] = static_cast<int>(i);
      col.dense = false;
    }
    col.member[col.count] = m;
    col.ms[col.count++] = ms;
  }

  // Member m's stages, when they are exactly the layout (the cohort's columns, in order) and
  // every column so far is dense: written straight to each column at position m, with no name
  // lookup, duplicate check or count update (counts catch up in sync_counts). False, with
  // nothing counted, when the sample differs; the slow path then takes it.
  bool append_layout_row(const StepSample& s, std::size_t m) {
    const std::size_t n = s.stages.size();
    if (n != ws_.layout_names.size()) return false;
    const StageTime* st = s.stages.data();
    double sum = 0.0;
    for (std::size_t p = 0; p < n; ++p) {
      if (!same_name(ws_.layout_names[p], st[p].name) || !std::isfinite(st[p].ms)) return false;
      ws_.layout_ms[p][m] = st[p].ms;
      sum += st[p].ms;
    }
    ws_.untimed[m] = untimed_ms(s, sum);
    ws_.step[m] = step_of(s, sum);
    return true;
  }

  // A sample's step time: its step_ms, or without one the sum of its stage times (`timed`).
  static double step_of(const StepSample& s, double timed) {
    return std::isfinite(s.step_ms) && s.step_ms > 0.0 ? s.step_ms : timed;
  }

  // The part of a sample's step_ms that its stages (`timed`, the sum of their finite times) do
  // not cover, at least 0; -1 without a step time or without stages.
  static double untimed_ms(const StepSample& s, double timed) {
    if (!(std::isfinite(s.step_ms) && s.step_ms > 0.0) || s.stages.empty()) return -1.0;
    return std::max(0.0, s.step_ms - timed);
  }

  // Leaves the fast path: every column holds the dense rows [0, rows).
  void sync_counts(Cohort& cohort, std::size_t rows) {
    for (std::size_t p = 0; p < cohort.used; ++p) cohort.stages[p].count = rows;
  }

  // After member m went the slow way: if every column is dense and holds members [0, m], the
  // fast path can take over again with the columns as the layout.
  bool enter_layout(Cohort& cohort, std::size_t m) {
    ws_.layout_names.clear();
    ws_.layout_ms.clear();
    for (std::size_t p = 0; p < cohort.used; ++p) {
      Column& col = cohort.stages[p];
      if (!col.dense || col.count != m + 1) return false;
      ws_.layout_names.push_back(col.name);
      ws_.layout_ms.push_back(col.ms.data());
    }
    return cohort.used > 0;
  }

  // Also writes each member's untimed part (untimed_ms) to ws_.untimed, in the same pass: the
  // window's stages are read once.
  void build_columns(Cohort& cohort) {
    const std::size_t members = cohort.members.size();
    ws_.untimed.resize(members);
    ws_.step.resize(members);
    bool fast = false;
    std::size_t rows = 0;  // on the fast path: members [0, rows) are in every column
    for (std::size_t m = 0; m < members; ++m) {
      const StepSample& s = samples_[static_cast<std::size_t>(cohort.members[m])];
      // The window is read once, sample after sample, each sample's stages an allocation of
      // their own: the stages a few samples ahead are fetched while this one is copied (the
      // columns are bound by these loads, not by the work on them).
      if (m + kPrefetchAhead < members) {
        const StepSample& ahead =
            samples_[static_cast<std::size_t>(cohort.members[m + kPrefetchAhead])];
        const char* p = reinterpret_cast<const char*>(ahead.stages.data());
        const std::size_t bytes = ahead.stages.size() * sizeof(StageTime);
        for (std::size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
      }
      if (fast) {
        if (append_layout_row(s, m)) {
          rows = m + 1;
          continue;
        }
        sync_counts(cohort, rows);
        fast = false;
      }
      double timed = 0.0;
      for (std::size_t p = 0; p < s.stages.size(); ++p) {
        const StageTime& st = s.stages[p];
        if (!std::isfinite(st.ms)) continue;  // no usable time: as if the stage were missing
        timed += st.ms;
        int idx = find_stage(cohort, p, st.name);
        Column& col = idx >= 0 ? cohort.stages[static_cast<std::size_t>(idx)]
                               : add_column(cohort, st, m);
        if (col.count > 0 && col.member_at(col.count - 1) == static_cast<int>(m))
          col.ms[col.count - 1] += st.ms;  // the same stage twice in one sample: accumulate
        else
          append(col, members, static_cast<int>(m), st.ms);
      }
      ws_.untimed[m] = untimed_ms(s, timed);
      ws_.step[m] = step_of(s, timed);
      if (enter_layout(cohort, m)) {
        fast = true;
        rows = m + 1;
      }
    }
    if (fast) sync_counts(cohort, rows);
  }

  // The part of each member's step_ms that no stage covers, as a stage of kind `other` (unless a
  // stage of that name was reported). Members without a step time are left out. Stages nested in
  // others (module stages inside forward) make the sum too large: the value is clamped at 0.
  // Added only when some member has untimed time. The values come from build_columns.
  void add_untimed(Cohort& cohort) {
    for (std::size_t p = 0; p < cohort.used; ++p)
      if (same_name(cohort.stages[p].name, kUntimedStage)) return;
    const std::size_t members = cohort.members.size();
    const std::vector<double>& values = ws_.untimed;
    bool any = false;
    for (std::size_t m = 0; m < members; ++m) any |= values[m] > 0.0;
    if (!any) return;
    Column* col = nullptr;
    for (std::size_t m = 0; m < members; ++m) {
      if (values[m] < 0.0) continue;
      if (!col) {
        if (cohort.used == cohort.stages.size()) cohort.stages.emplace_back();
        col = &cohort.stages[cohort.used++];
        col->name = kUntimedStage;
        col->kind = StageKind::other;
        col->count = 0;
        col->dense = m == 0;
        if (col->ms.size() < members) col->ms.resize(members);
        if (!col->dense && col->member.size() < members) col->member.resize(members);
      }
      append(*col, members, static_cast<int>(m), values[m]);
    }
  }

  static int rank_of(const Cohort& cohort, int member) {
    return cohort.ranks[static_cast<std::size_t>(member)];
  }
  int rank_at(const Cohort& cohort, const Column& col, std::size_t i) const {
    return rank_of(cohort, col.member_at(i));
  }
  const StepSample& sample_of(const Cohort& cohort, int member) const {
    return samples_[static_cast<std::size_t>(cohort.members[static_cast<std::size_t>(member)])];
  }

  void evaluate_column(const Cohort& cohort, const Column& col, ColumnResult& r) {
    r.flagged.clear();
    const double* ms = col.ms.data();
    const std::size_t n = col.count;
    const detail::ColumnExtent extent = detail::column_extent(ms, n);
    const double hi = extent.max;
    int top = -1;  // the slowest rank, the lowest rank on ties
    if (cohort.ranks_ascending) {  // (the usual case) the first position holding the maximum
      top = static_cast<int>(detail::first_equal(ms, n, hi));
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        if (ms[i] != hi) continue;
        if (top < 0 ||
            rank_at(cohort, col, i) < rank_at(cohort, col, static_cast<std::size_t>(top)))
          top = static_cast<int>(i);
      }
    }
    r.mean = extent.sum / static_cast<double>(n);
    r.min = extent.min;
    r.max = hi;
    r.top = top;
    r.median = detail::median_of(ms, n, ws_.scratch);
    // Communication under a median reference: the ranks that wait are usually the majority, so
    // the median is a waiting rank. Waiting is measured from the rank that waited least (the last
    // to arrive): flagged when it exceeds that by (relative_threshold - 1) x the median.
    const bool wait_from_min =
        col.kind == StageKind::communication && options_.ref != Reference::mean;
    const double ref = options_.ref == Reference::mean ? r.mean : wait_from_min ? r.min : r.median;
    r.ref = ref;

    if (n > 1) {
      // With ref <= 0 the relative rule says nothing: only the absolute rule applies.
      double relative_limit =
          ref > 0.0 ? ref * options_.relative_threshold : std::numeric_limits<double>::infinity();
      if (wait_from_min)
        relative_limit = r.median > 0.0 ? ref + (options_.relative_threshold - 1.0) * r.median
                                        : std::numeric_limits<double>::infinity();
      detail::SlowRule rule;
      rule.ref = ref;
      rule.relative_limit = relative_limit;
      rule.absolute = options_.absolute_ms_threshold;
      rule.margin = -std::numeric_limits<double>::infinity();
      // The rule only grows more true as t grows: where the slowest time fails it without the
      // margin, every time does, and neither the margin nor the pass is needed (most columns of
      // most windows: this skips a MAD, the cost of a median, per column).
      if (!rule.slow(hi)) return;
      // The robust rule's extra margin; with MAD == 0 any t > median passes it.
      // (With 2 ranks the MAD is the distance of each from their midpoint: no rank could ever
      // pass it, so the margin needs 3 ranks.)
      if (options_.ref == Reference::robust && !wait_from_min && n >= 3) {
        const double mad = detail::median_abs_deviation(ms, n, r.median, ws_.scratch);
        if (mad > 0.0) rule.margin = options_.mad_z * kMadToSigma * mad;
      }
      detail::flag_slow(ms, n, rule, r.flagged);
      // Positions ascend; so do their ranks where the cohort's ranks ascend (the usual case).
      auto by_rank = [&](int a, int b) {
        return rank_at(cohort, col, static_cast<std::size_t>(a)) <
               rank_at(cohort, col, static_cast<std::size_t>(b));
      };
      if (!cohort.ranks_ascending &&
          !std::is_sorted(r.flagged.begin(), r.flagged.end(), by_rank))
        std::sort(r.flagged.begin(), r.flagged.end(), by_rank);
    }
  }

  // Fills a finding in place (no temporaries: at thousands of waiting ranks this shows).
  void fill_finding(RankFinding& f, const Cohort& cohort, const Column& col,
                    const ColumnResult& r, int pos) const {
    const std::size_t p = static_cast<std::size_t>(pos);
    const StepSample& s = sample_of(cohort, col.member_at(p));
    f.rank = s.rank;
    f.host.assign(s.host);
    f.cohort.assign(cohort.name);
    f.stage.assign(col.name);
    f.kind = col.kind;
    f.role = col.kind == StageKind::communication ? RankFinding::Role::waiting
                                                  : RankFinding::Role::straggler;
    f.ms = col.ms[p];
    f.ref_ms = r.ref;
    f.slowdown = r.ref > 0.0 ? col.ms[p] / r.ref : 1.0;
    set_cost(f, cohort_step_);
  }

  void hint_missing(const Cohort& cohort, const Column& col) {
    std::vector<char> present(cohort.members.size(), 0);
    for (std::size_t i = 0; i < col.count; ++i)
      present[static_cast<std::size_t>(col.member_at(i))] = 1;
    std::vector<int> missing;
    for (std::size_t m = 0; m < present.size(); ++m)
      if (!present[m]) missing.push_back(rank_of(cohort, static_cast<int>(m)));
    std::sort(missing.begin(), missing.end());
    report_.hints.push_back("measured: " + ranks_phrase(missing) + cohort_suffix(cohort.name) +
                            " did not report stage '" + std::string(col.name) +
                            "'; it is evaluated over the " + std::to_string(col.count) +
                            " ranks that did");
  }

  // Hosts of the cohort's members, as small integers; computed once per cohort, when needed.
  const std::vector<int>& host_ids(const Cohort& cohort) {
    std::vector<int>& host_of_member = ws_.host_of_member;
    std::vector<std::string_view>& host_names = ws_.host_names;
    if (hosts_known_) return host_of_member;
    hosts_known_ = true;
    host_of_member.resize(cohort.members.size());
    host_names.clear();
    std::unordered_map<std::string_view, int> index;
    for (std::size_t m = 0; m < cohort.members.size(); ++m) {
      std::string_view host = sample_of(cohort, static_cast<int>(m)).host;
      if (!host_names.empty() && host_names.back() == host) {
        host_of_member[m] = static_cast<int>(host_names.size()) - 1;
        continue;
      }
      auto [it, inserted] = index.emplace(host, static_cast<int>(host_names.size()));
      if (inserted) host_names.push_back(host);
      host_of_member[m] = it->second;
    }
    // The members on each host: the ranks on it of every column that all members reported.
    ws_.host_size.assign(host_names.size(), 0);
    for (int h : host_of_member) ++ws_.host_size[static_cast<std::size_t>(h)];
    return host_of_member;
  }

  void group_hosts(const Cohort& cohort, const Column& col, const ColumnResult& r) {
    const std::vector<int>& host_of = host_ids(cohort);
    const std::vector<std::string_view>& host_names = ws_.host_names;
    const std::size_t hosts = host_names.size();
    if (hosts < 2) return;
    // Every host all flagged: no host is slow against another.
    if (r.flagged.size() == col.count) return;
    std::vector<int>& flagged_on = ws_.flagged_on;
    flagged_on.assign(hosts, 0);
    bool any_pair = false;  // a host with two flagged ranks: else none can be all flagged
    for (int pos : r.flagged)
      any_pair |= ++flagged_on[static_cast<std::size_t>(host_of[static_cast<std::size_t>(
                      col.member_at(static_cast<std::size_t>(pos)))])] >= 2;
    if (!any_pair) return;
    const bool dense = col.count == cohort.members.size();
    if (!dense) {
      ws_.ranks_on.assign(hosts, 0);
      for (std::size_t i = 0; i < col.count; ++i)
        ++ws_.ranks_on[static_cast<std::size_t>(
            host_of[static_cast<std::size_t>(col.member_at(i))])];
    }
    const std::vector<int>& ranks_on = dense ? ws_.host_size : ws_.ranks_on;
    for (std::size_t h = 0; h < hosts; ++h) {
      // A whole host slow, while some other host has a rank at normal speed.
      if (host_names[h].empty() || ranks_on[h] < 2 || flagged_on[h] < ranks_on[h]) continue;
      HostFinding hf;
      hf.host = std::string(host_names[h]);
      hf.cohort = std::string(cohort.name);
      hf.stage = std::string(col.name);
      std::vector<double> slowdowns, costs;
      for (int pos : r.flagged) {
        const std::size_t p = static_cast<std::size_t>(pos);
        const int m = col.member_at(p);
        if (host_of[static_cast<std::size_t>(m)] != static_cast<int>(h)) continue;
        hf.ranks.push_back(rank_of(cohort, m));
        slowdowns.push_back(r.ref > 0.0 ? col.ms[p] / r.ref : 1.0);
        costs.push_back(std::max(0.0, col.ms[p] - r.ref));
      }
      std::sort(hf.ranks.begin(), hf.ranks.end());
      hf.slowdown = detail::median_inplace(slowdowns.data(), slowdowns.size());
      hf.cost_ms = detail::median_inplace(costs.data(), costs.size());
      hf.cost_share = cohort_step_ > 0.0 ? std::min(1.0, hf.cost_ms / cohort_step_) : 0.0;
      report_.hints.push_back("measured: all " + std::to_string(hf.ranks.size()) +
                              " ranks of host '" + hf.host + "' (" + ranks_phrase(hf.ranks) + ")" +
                              cohort_suffix(cohort.name) + " are slow in stage '" + hf.stage +
                              "', median " + fixed2(hf.slowdown) +
                              "x the reference; inferred: the host, not one GPU, is slow");
      report_.slow_hosts.push_back(std::move(hf));
    }
  }

  // Ranks wait in a collective for whoever is late to it: name the rank whose own work is
  // longest and whose wait is shortest.
  void hint_waiting(const Cohort& cohort, const Column& col, const ColumnResult& r) {
    const std::vector<double>& own_work = ws_.own_work;
    std::size_t shortest = 0;  // position in the column
    for (std::size_t i = 1; i < col.count; ++i) {
      const double t = col.ms[i];
      const double best = col.ms[shortest];
      if (t < best || (t == best && rank_at(cohort, col, i) < rank_at(cohort, col, shortest)))
        shortest = i;
    }
    const int shortest_rank = rank_at(cohort, col, shortest);
    int longest = -1;  // member with the longest own (non-communication) work
    for (std::size_t m = 0; m < cohort.members.size(); ++m) {
      const int rank = rank_of(cohort, static_cast<int>(m));
      if (longest < 0 || own_work[m] > own_work[static_cast<std::size_t>(longest)] ||
          (own_work[m] == own_work[static_cast<std::size_t>(longest)] &&
           rank < rank_of(cohort, longest)))
        longest = static_cast<int>(m);
    }
    const int longest_rank = rank_of(cohort, longest);

    std::vector<int> waiting;
    double least_excess = std::numeric_limits<double>::infinity();
    for (int pos : r.flagged) {
      const std::size_t p = static_cast<std::size_t>(pos);
      waiting.push_back(rank_at(cohort, col, p));
      least_excess = std::min(least_excess, col.ms[p] - col.ms[shortest]);
    }
    std::string hint = "measured: " + ranks_phrase(waiting) + cohort_suffix(cohort.name) +
                       " spent >= " + fixed2(least_excess) + " ms more than rank " +
                       std::to_string(shortest_rank) + " in communication stage '" +
                       std::string(col.name) + "'; inferred: they wait for rank " +
                       std::to_string(longest_rank);
    if (longest_rank == shortest_rank)
      hint += ", whose compute is longest and wait shortest";
    else
      hint += ", whose compute is longest (rank " + std::to_string(shortest_rank) + " waits least)";
    report_.hints.push_back(std::move(hint));
  }

  void evaluate_cohort(Cohort& cohort, double& best_gap) {
    const std::size_t members = cohort.members.size();
    const std::size_t stages = cohort.used;
    hosts_known_ = false;
    // The step time the findings' costs are shares of: the cohort's median (a straggler lengthens
    // every rank's step_ms alike in a synchronous job, so the median is the job's step).
    cohort_step_ = members > 0 ? detail::median_of(ws_.step.data(), members, ws_.scratch) : 0.0;
    if (members == 1)
      report_.hints.push_back("only one rank in cohort " + cohort_label(cohort.name) +
                              ": nothing to compare");

    // Own work per member: everything but communication.
    std::vector<double>& own_work = ws_.own_work;
    std::vector<double>& capped_work = ws_.capped_work;
    own_work.assign(members, 0.0);
    capped_work.assign(members, 0.0);
    std::vector<ColumnResult>& results = ws_.results;
    if (results.size() < stages) results.resize(stages);
    for (std::size_t s = 0; s < stages; ++s) {
      const Column& col = cohort.stages[s];
      evaluate_column(cohort, col, results[s]);
      if (col.kind == StageKind::communication) continue;
      const double ref = results[s].ref;
      const double* ms = col.ms.data();
      if (col.count == members) {  // every member reported it: entry i is member i
        for (std::size_t m = 0; m < members; ++m) {
          own_work[m] += ms[m];
          capped_work[m] += std::min(ms[m], ref);
        }
      } else {
        for (std::size_t i = 0; i < col.count; ++i) {
          const std::size_t m = static_cast<std::size_t>(col.member_at(i));
          own_work[m] += ms[i];
          capped_work[m] += std::min(ms[i], ref);
        }
      }
    }

    for (std::size_t s = 0; s < stages; ++s) {
      const Column& col = cohort.stages[s];
      const ColumnResult& r = results[s];
      if (col.count < members) hint_missing(cohort, col);
      if (!r.flagged.empty()) {
        auto& out = col.kind == StageKind::communication ? report_.waiting : report_.stragglers;
        for (int pos : r.flagged) fill_finding(out.emplace_back(), cohort, col, r, pos);
        if (col.kind == StageKind::communication)
          hint_waiting(cohort, col, r);
        else if (r.flagged.size() >= 2)  // a slow host has at least two ranks, all flagged
          group_hosts(cohort, col, r);
        // Waiting measured from the last arrival (median references) names no bottleneck.
        const bool waiting_only =
            col.kind == StageKind::communication && options_.ref != Reference::mean;
        const double gap = waiting_only ? 0.0 : r.max - r.ref;
        if (gap > best_gap) {
          best_gap = gap;
          report_.likely_bottleneck = std::string(col.name);
        }
      }
    }

    // What-if: the slowest rank's own work, against the same with every time capped at the
    // reference. Communication is left out: the wait vanishes when nobody is slow.
    if (members > 0) {
      const double total = *std::max_element(own_work.begin(), own_work.end());
      const double capped = *std::max_element(capped_work.begin(), capped_work.end());
      report_.whatif_step_saving_ms =
          std::max(report_.whatif_step_saving_ms, std::max(0.0, total - capped));
    }

    for (std::size_t s = 0; s < stages; ++s) {
      Column& col = cohort.stages[s];
      const ColumnResult& r = results[s];
      StageFigures& f = next_figures();
      f.cohort = std::string(cohort.name);
      f.stage = std::string(col.name);
      f.kind = col.kind;
      f.ranks = static_cast<int>(col.count);
      f.ref_ms = r.ref;
      f.step_ms = cohort_step_;
      f.mean_ms = r.mean;
      f.median_ms = r.median;
      f.min_ms = r.min;
      f.max_ms = r.max;
      f.slowdown_ratio = r.ref > 0.0 ? r.max / r.ref : 1.0;
      f.relative_score = (r.ref > 0.0 && r.max > r.ref) ? r.ref / r.max : 1.0;
      f.top_rank = rank_at(cohort, col, static_cast<std::size_t>(r.top));
      f.num_stragglers = static_cast<int>(r.flagged.size());
      f.flagged_ranks.reserve(r.flagged.size());
      for (int pos : r.flagged)
        f.flagged_ranks.push_back(rank_at(cohort, col, static_cast<std::size_t>(pos)));
      if (col.count == members) {
        f.rank_ids.assign(cohort.ranks.begin(), cohort.ranks.end());  // entry i is member i
      } else {
        f.rank_ids.resize(col.count);
        for (std::size_t i = 0; i < col.count; ++i) f.rank_ids[i] = rank_at(cohort, col, i);
      }
      if (f.rank_ms.capacity() >= members) {
        // A report reused from an earlier window: trade buffers with the column instead of
        // copying (the column takes the report's old one for the next window).
        f.rank_ms.swap(col.ms);
        f.rank_ms.resize(col.count);
        col.ms.resize(std::max(col.ms.size(), members));
      } else {
        f.rank_ms.assign(col.ms.begin(), col.ms.begin() + static_cast<std::ptrdiff_t>(col.count));
      }
    }
  }

  // The next StageFigures of the report: one left from the report's previous window when there
  // is one (its vectors keep their capacity), reset to defaults.
  StageFigures& next_figures() {
    std::vector<StageFigures>& all = report_.stages;
    if (figures_used_ == all.size()) {
      all.emplace_back();
      return all[figures_used_++];
    }
    StageFigures& f = all[figures_used_++];
    std::vector<int> flagged = std::move(f.flagged_ranks), ids = std::move(f.rank_ids);
    std::vector<double> ms = std::move(f.rank_ms);
    f = StageFigures{};
    flagged.clear();
    f.flagged_ranks = std::move(flagged);
    f.rank_ids = std::move(ids);
    f.rank_ms = std::move(ms);
    return f;
  }

  const std::vector<StepSample>& samples_;
  const DetectorOptions& options_;
  Report& report_;
  Workspace& ws_;
  bool hosts_known_ = false;  // ws_.host_of_member holds the current cohort's hosts
  double cohort_step_ = 0.0;  // the current cohort's step time (StageFigures::step_ms)
  std::size_t figures_used_ = 0;  // report_.stages in use; the rest are left from before
};

}  // namespace

void evaluate_window(const Window& window, const DetectorOptions& options, Report& out) {
  options.validate();
  out.step = window.step;
  WindowEvaluator(window, options, out, thread_workspace()).run();
}

Report evaluate_window(const Window& window, const DetectorOptions& options) {
  Report report;
  evaluate_window(window, options, report);
  return report;
}

// ---------------------------------------------------------------------------------------------
// Metric names

Metrics Report::metrics(int local_rank) const {
  Metrics out;
  // Per stage name, the cohort whose worst rank is furthest above its reference.
  std::vector<std::pair<std::string_view, const StageFigures*>> chosen;
  for (const StageFigures& f : stages) {
    auto it = std::find_if(chosen.begin(), chosen.end(),
                           [&](const auto& c) { return c.first == f.stage; });
    if (it == chosen.end())
      chosen.emplace_back(f.stage, &f);
    else if (f.max_ms - f.ref_ms > it->second->max_ms - it->second->ref_ms)
      it->second = &f;
  }
  for (const auto& [name, f] : chosen) {
    const std::string prefix = "straggler/" + std::string(name) + "/";
    // The local rank's own time, from whichever cohort it belongs to.
    const StageFigures* own = nullptr;
    std::size_t at = 0;
    auto holds = [&](const StageFigures& g) {
      auto it = std::find(g.rank_ids.begin(), g.rank_ids.end(), local_rank);
      if (it == g.rank_ids.end() || g.rank_ms.size() != g.rank_ids.size()) return false;
      own = &g;
      at = static_cast<std::size_t>(it - g.rank_ids.begin());
      return true;
    };
    if (!holds(*f))
      for (const StageFigures& g : stages)
        if (&g != f && g.stage == name && holds(g)) break;
    if (own) out[prefix + "local_ms"] = own->rank_ms[at];
    out[prefix + "mean_ms"] = f->mean_ms;
    out[prefix + "max_ms"] = f->max_ms;
    out[prefix + "slowdown_ratio"] = f->slowdown_ratio;
    out[prefix + "relative_score"] = f->relative_score;
    out[prefix + "top_rank"] = static_cast<double>(f->top_rank);
    out[prefix + "num_stragglers"] = static_cast<double>(f->num_stragglers);
  }
  std::string joined;
  for (const std::string& h : hints) {
    if (!joined.empty()) joined += "; ";
    joined += h;
  }
  auto distinct = [](const std::vector<RankFinding>& findings) {
    std::vector<int> ranks;
    ranks.reserve(findings.size());
    for (const RankFinding& f : findings) ranks.push_back(f.rank);
    std::sort(ranks.begin(), ranks.end());
    return static_cast<double>(std::unique(ranks.begin(), ranks.end()) - ranks.begin());
  };
  out["straggler/likely_bottleneck"] = likely_bottleneck;
  out["straggler/hints"] = std::move(joined);
  out["straggler/whatif_step_saving_ms"] = whatif_step_saving_ms;
  out["straggler/num_stragglers_total"] = distinct(stragglers);
  out["straggler/num_waiting"] = distinct(waiting);
  out["straggler/ranks"] = static_cast<double>(ranks_seen);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Persistence

namespace {
int popcount(std::uint32_t v) {
  int n = 0;
  for (; v; v &= v - 1) ++n;
  return n;
}

// The key of a (cohort, stage) in tracks_, seq_tracks_ and confirmed_at_, written into `key`
// (a buffer the caller reuses).
const std::string& stage_key(std::string& key, std::string_view cohort, std::string_view stage) {
  key.assign(cohort);
  key += '\x1f';
  key += stage;
  return key;
}
}  // namespace

Detector::Detector(DetectorOptions options) : options_(options) { options_.validate(); }

Report Detector::observe(const Window& window) {
  Report report;
  observe(window, report);
  return report;
}

void Detector::catch_up(const Track& track, History& h) {
  const std::int64_t pending = track.windows - h.synced;
  if (!h.in_set || pending <= 0) return;  // out of the set: no window is pending
  h.bits = pending >= 32 ? 0u : h.bits << pending;
  h.seen += static_cast<int>(pending);
  h.synced = track.windows;
}

void Detector::observe(const Window& window, Report& report) {
  evaluate_window(window, options_, report);
  ++windows_;
  if (options_.method == Method::sequential)
    observe_sequential(window, report);
  else
    observe_threshold(window, report);
}

bool Detector::extend_episode(int& index, const std::string& key, const RankFinding& f) {
  if (index < 0) {
    if (free_episodes_.empty()) {
      index = static_cast<int>(episodes_.size());
      episodes_.emplace_back();
    } else {
      index = free_episodes_.back();
      free_episodes_.pop_back();
    }
    Episode& e = episodes_[static_cast<std::size_t>(index)];
    e.slowdowns.clear();
    e.ratios.clear();
    e.costs_ms.clear();
    e.shares.clear();
    e.key = key;
    e.rank = f.rank;
  }
  Episode& e = episodes_[static_cast<std::size_t>(index)];
  e.window = windows_;
  e.slowdowns.push_back(f.slowdown);
  // Against a reference of 0 the ratio says nothing (RankFinding::slowdown is 1 there): any
  // time above it is a slowdown, and the cost decides.
  e.ratios.push_back(f.ref_ms > 0.0   ? f.slowdown
                     : f.ms > 0.0     ? std::numeric_limits<double>::infinity()
                                      : 1.0);
  e.costs_ms.push_back(f.cost_ms);
  e.shares.push_back(f.cost_share);
  const double typical_ratio = detail::median_of(e.ratios.data(), e.ratios.size(), gate_scratch_);
  const double typical_share = detail::median_of(e.shares.data(), e.shares.size(), gate_scratch_);
  return typical_ratio > options_.healthy_spread && typical_share >= options_.min_cost_share;
}

void Detector::end_lapsed_episodes() {
  const std::uint32_t mask =
      options_.confirm_n >= 32 ? ~std::uint32_t{0} : (std::uint32_t{1} << options_.confirm_n) - 1u;
  for (std::size_t i = 0; i < episodes_.size(); ++i) {
    Episode& e = episodes_[i];
    if (e.rank < 0 || e.window == windows_) continue;
    int* owner = nullptr;  // the pair's episode index, while it is still confirmed statistically
    bool lapsed = true;
    if (options_.method == Method::sequential) {
      auto it = seq_tracks_.find(e.key);
      const int slot = it == seq_tracks_.end() ? -1 : it->second.slot(e.rank);
      if (slot >= 0) {
        owner = &it->second.cold[static_cast<std::size_t>(slot)].episode;
        lapsed = it->second.named_bit[static_cast<std::size_t>(slot)] == 0;
      }
    } else {
      auto it = tracks_.find(e.key);
      if (it != tracks_.end() && static_cast<std::size_t>(e.rank) < it->second.history.size()) {
        History& h = it->second.history[static_cast<std::size_t>(e.rank)];
        catch_up(it->second, h);
        owner = &h.episode;
        lapsed = popcount(h.bits & mask) < options_.confirm_k;
      }
    }
    if (!lapsed) continue;
    if (owner && *owner == static_cast<int>(i)) *owner = -1;
    e.rank = -1;
    free_episodes_.push_back(static_cast<int>(i));
  }
}

Detector::Confirmed& Detector::publish(const RankFinding& f, int episode, std::int64_t step,
                                       std::int64_t first_flagged_step, const std::string& key) {
  Confirmed c;
  c.finding = f;
  c.first_confirmed_step = step;
  c.first_flagged_step = first_flagged_step;
  if (episode >= 0) {
    const Episode& e = episodes_[static_cast<std::size_t>(episode)];
    c.slowdowns = e.slowdowns;
    c.costs_ms = e.costs_ms;
    c.cost_shares = e.shares;
  } else {
    c.slowdowns.push_back(f.slowdown);
    c.costs_ms.push_back(f.cost_ms);
    c.cost_shares.push_back(f.cost_share);
  }
  confirmed_.push_back(std::move(c));
  confirmed_at_.push_back({key, f.rank});
  return confirmed_.back();
}

void Detector::observe_threshold(const Window& window, Report& report) {
  const std::uint32_t mask =
      options_.confirm_n >= 32 ? ~std::uint32_t{0} : (std::uint32_t{1} << options_.confirm_n) - 1u;
  auto in_range = [](int rank) { return rank >= 0 && rank < kMaxTrackedRank; };

  std::string key;
  auto track_of = [&](const std::string& cohort, const std::string& stage) {
    return &tracks_[stage_key(key, cohort, stage)];
  };

  for (const StageFigures& f : report.stages) {
    Track& track = *track_of(f.cohort, f.stage);
    if (f.rank_ids != track.ranks) {
      // The ranks taking part changed: settle the windows the previous ones were in, then
      // start counting for the new set from this window.
      for (int rank : track.ranks) {
        if (!in_range(rank)) continue;
        History& h = track.history[static_cast<std::size_t>(rank)];
        catch_up(track, h);
        h.in_set = false;
      }
      for (int rank : f.rank_ids) {
        if (!in_range(rank)) continue;
        if (static_cast<std::size_t>(rank) >= track.history.size())
          track.history.resize(static_cast<std::size_t>(rank) + 1);
        History& h = track.history[static_cast<std::size_t>(rank)];
        h.synced = track.windows;  // settled, or back after windows it missed (they do not count)
        h.in_set = true;
      }
      track.ranks.assign(f.rank_ids.begin(), f.rank_ids.end());
    }
    ++track.windows;  // every rank of the set now has this window pending
    for (int rank : f.flagged_ranks) {
      if (!in_range(rank)) continue;
      History& h = track.history[static_cast<std::size_t>(rank)];
      catch_up(track, h);
      h.bits |= 1u;
      ++h.flagged;
      if (h.first_flagged_step < 0) h.first_flagged_step = window.step;
    }
  }

  // Findings come grouped by (cohort, stage): look each group up once. Every finding's rank
  // was flagged in this window, so its history is settled.
  const std::string* last_cohort = nullptr;
  const std::string* last_stage = nullptr;
  Track* track = nullptr;
  auto fill = [&](RankFinding& f) -> History* {
    if (!last_cohort || *last_cohort != f.cohort || *last_stage != f.stage) {
      track = track_of(f.cohort, f.stage);
      last_cohort = &f.cohort;
      last_stage = &f.stage;
    }
    if (!in_range(f.rank) || static_cast<std::size_t>(f.rank) >= track->history.size())
      return nullptr;
    History& h = track->history[static_cast<std::size_t>(f.rank)];
    f.windows_flagged = h.flagged;
    f.confirmed = popcount(h.bits & mask) >= options_.confirm_k;  // flagged in the last n
    return &h;
  };
  for (RankFinding& f : report.waiting) fill(f);
  last_cohort = last_stage = nullptr;
  for (RankFinding& f : report.stragglers) {
    History* h = fill(f);
    if (!h) continue;
    // k of n makes it real statistically; the gate, materially.
    if (f.confirmed) f.confirmed = extend_episode(h->episode, key, f);
    if (h->confirmed_index >= 0) {
      Confirmed& c = confirmed_[static_cast<std::size_t>(h->confirmed_index)];
      c.finding = f;
      c.slowdowns.push_back(f.slowdown);
      c.costs_ms.push_back(f.cost_ms);
      c.cost_shares.push_back(f.cost_share);
    } else if (f.confirmed) {
      h->confirmed_index = static_cast<int>(confirmed_.size());
      publish(f, h->episode, window.step, h->first_flagged_step, key);
    }
  }
  end_lapsed_episodes();
  // Windows seen by each confirmed finding, including this one where it took part.
  for (std::size_t i = 0; i < confirmed_.size(); ++i) {
    Track& t = tracks_[confirmed_at_[i].key];
    History& h = t.history[static_cast<std::size_t>(confirmed_at_[i].rank)];
    catch_up(t, h);
    confirmed_[i].windows_seen = h.seen;
  }
}

// ---------------------------------------------------------------------------------------------
// The sequential method (docs/detection.md, "The default detector")

namespace {

// Times below this are noise of the clock and the interpreter, not of the work:
// x = ln((t + e) / (ref + e)). Sub-millisecond stages (untimed time is often 0.1 ms) would
// otherwise swing by tens of percent from window to window.
constexpr double kEpsilonMs = 0.5;
// A rank faster than the median by less than this holds no wait worth the name.
constexpr double kMinWaitMs = 0.5;
// Nor is an excess under this a slowdown worth naming, whatever its ratio: 0.3 ms of untimed
// time against 0.1 ms is interpreter noise, not a straggler.
constexpr double kMinExcessMs = 0.5;
// Before a (cohort, stage) has two windows, the noise of its log-ratio is taken as this.
constexpr double kPriorSigma = 0.05;
// The noise estimate never goes below this: a rank 0.5 % off is not resolved.
constexpr double kMinSigma = 0.005;
// EWMA of each rank's log-ratio (noise estimate only), and of ln(sigma) of a (cohort, stage); both
// are running means over their first windows (weight max(alpha, 1 / n)), so that the first
// window's draw, and the first deviations from a level that is one draw, do not linger: started
// as EWMAs from their first value, they had held sigma 15-20 % over its settled value at window
// 20, which made every test read the first windows of an onset as noisier than they are.
constexpr double kLevelAlpha = 0.1;
constexpr double kScaleAlpha = 0.1;
constexpr double kSqrt2 = 1.4142135623730951;
// Rank-windows pause_rate counts for in the pause rate a stage has shown. 100, not 1,000: on a
// loaded machine with 3 ranks a 2 ms region stalled in ~13 % of rank-windows, and a prior of
// 1,000 held the cap near ln 100 for the whole run (45 rank-windows), so 3-4 stalls of one rank
// came within one window of a verdict (docs/notes/detection-absolute.md).
constexpr double kPausePrior = 100.0;
constexpr double kBaseAlpha = 0.05;  // EWMA of a rank's own baseline (after its first windows)
constexpr int kOwnWarmup = 10;       // windows a rank's baseline takes before it is tested
// The own-baseline test runs where one window separates its shift from no change by this many
// sigma or more.
constexpr double kOwnSeparation = 3.0;
const double kLogPause = std::log(1.5);  // a pause: at least 1.5x the median
// The own-baseline test's noise model: Student's t with kOwnNu degrees of freedom. Its scale is
// kOwnScaleShrink of the t(4) scale with the stage's sigma (1.4826 MAD: MAD = 0.6745 sigma, and
// the MAD of t(4) is 0.7407 of its scale). The shrink is measured, not derived: sigma is a MAD of
// distances to an EWMA level that is itself noisy (over the first windows most), so it overstates
// the spread of a rank around a baseline learnt over many windows. 0.85 was measured with no
// healthy run alarmed at 8 to 4,096 ranks (0.7 alarmed in one at 64; 1.0, the t(4) scale as
// estimated, found fewer 1.1x ranks: docs/detection.md).
constexpr double kOwnNu = 4.0;
constexpr double kOwnScalePerSigma = 0.6745 / 0.7407;
constexpr double kOwnScaleShrink = 0.85;
// The baseline's update after a rank's first kOwnWarmup windows: a step of Fisher scoring for the
// location of the same t(kOwnNu) noise (at the stage's t scale, unshrunk): psi(d) = d / (1 + d^2
// / (nu s^2)), times 1 / E[psi'] = (nu + 3) / nu. A window near the baseline moves it as the mean
// would; one far from it (a pause, a tail, the first window of an onset, 6-7 t scales over it at
// 1.1x under 2 % jitter) moves it little: psi redescends. The 3-sigma clip it replaces let an
// onset's first window drag the baseline by 3 sigma x alpha, a third to a half of its standard
// error at window 20 (docs/detection.md).
constexpr double kOwnScoreGain = (kOwnNu + 3.0) / kOwnNu;
// Most evidence one window adds to the own-baseline test. The t LLR is bounded (by 6-7 under
// 2 % jitter, 9-10 under 1 %) and redescends: a pause or a heavy-tailed window far over the
// shift adds little, so no data-driven cap is needed for it; this one only bounds quiet stages.
constexpr double kOwnCeiling = 8.0;
// Shares of the false-alarm budget where the own-baseline test runs: it, the cohort test for
// relative_threshold and the cost test; the larger shifts' tests share what is left
// (docs/detection.md, step 4; docs/notes/detection-absolute.md).
constexpr double kShareOwn = 0.5;
constexpr double kShareFirst = 0.2;
constexpr double kShareCost = 0.2;
// The cost test (docs/notes/detection-absolute.md): per (rank, stage), "its excess costs the step
// kCostTarget x min_cost_share" against "its excess is within healthy_spread or under
// min_cost_share of the step", each mapped onto the log-ratio x, so that a fault's size in the
// step, not its stage's size, decides how fast it is found. Where the stage is most of the step
// the alternative is at least kCostLeastRatio x healthy_spread (a 1.05x slowdown).
constexpr double kCostTarget = 2.0;
// The step time the cost test measures against: the median of the cohort's step time over this
// many of its latest windows (a pause anywhere in a synchronous job lengthens every rank's step
// in its window; a change of the job's pace is followed within half of them).
constexpr std::size_t kCostStepWindows = 15;
// The cost test's x is clipped at its alternative + this many sigma (a Huber-type CUSUM): where
// its null and alternative are close (under 2 sigma apart) each healthy window takes little
// away, and without the clip frequent windows 1.1-1.4x over (GC, preemption: under what counts
// as a pause) added up to a verdict on healthy ranks (Sequential.
// HealthyRunsWithFrequentPausesConfirmNobody); with it a window adds at most
// delta^2 / (2 sigma^2) + kCostClip delta / sigma. A fault at or under the alternative + 3 sigma
// loses nothing. 2 and 4 pass that test too; 2 took small stages' 1.2x faults past 10 windows
// (docs/notes/detection-absolute.md).
constexpr double kCostClip = 3.0;
constexpr double kCostLeastRatio = 1.015;
// A rank confirmed in a timed stage with this many times its untimed excess (ms over the median)
// is not named for `untimed` as well (observe_sequential).
constexpr double kUntimedExplained = 4.0;


// The two passes over every slot, compiled twice where the toolchain can pick at load time
// (GNU ifunc): for AVX2 (eight float lanes, where SSE2 has four) and for the baseline. AVX2
// alone, not FMA: each lane computes what the baseline does, bit for bit.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(LAGGARD_NO_CLONES)
#define LAGGARD_WIDE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LAGGARD_WIDE_CLONES
#endif

// ln(v) for v > 0 within about 1e-7 (v a ratio near 1; any normal float): the exponent from the
// bits, and ln(m) for the mantissa m in [sqrt(1/2), sqrt(2)) from a series in
// s = (m - 1) / (m + 1). In float, four lanes to an SSE2 register: std::log was an eighth of a
// 16,384-rank window, and a double series half the log-ratio pass (docs/performance.md); the
// evidence it feeds is compared with thresholds of order 0.01 and stored as float anyway.
// Without branches, for the vectorized pass below.
inline float fast_logf(float v) {
  std::uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  float exponent = static_cast<float>(static_cast<std::int32_t>((bits >> 23) & 0xff) - 127);
  bits = (bits & 0x007fffffu) | 0x3f800000u;  // m in [1, 2)
  float m;
  std::memcpy(&m, &bits, sizeof m);
  const bool high = m > 1.41421356f;
  m = high ? m * 0.5f : m;
  exponent = high ? exponent + 1.0f : exponent;
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;  // |s| <= 0.172: s2^4 / 9 < 1e-7
  const float series = 2.0f * s * (1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7))));
  return series + exponent * 0.693147181f;
}

// Each rank's log-ratio to its stage's median, x = ln((t + e) / (median + e)), with
// inv_ref = 1 / (median + e) (log_ratio_ref): the ratio is formed in double and its log taken in
// float, within about 1e-7 of the exact value (a log of each time less the log of the median
// would lose the digits of the difference). Times are finite here (the window leaves out the
// others). Every user of x computes it with this function, so all see the same float.
inline double log_ratio_ref(double median) { return 1.0 / (std::max(median, 0.0) + kEpsilonMs); }
inline float log_ratio(double t, double inv_ref) {
  const double ratio = (std::max(t, 0.0) + kEpsilonMs) * inv_ref;
  // Clamped to float's normal range: a time of 1e300 ms or a median of 0 against a huge time
  // stays finite.
  return fast_logf(static_cast<float>(std::min(std::max(ratio, 1e-30), 1e30)));
}

// The log-ratios of n times to `median` into x: one vectorized pass, for the few places that
// need x outside seq_pass (which computes it again: at 16,384 x 16, recomputing is cheaper than
// writing a float per slot and reading it back).
LAGGARD_WIDE_CLONES
void log_ratios(std::size_t n, const double* __restrict ms, double median, float* __restrict x) {
  const double inv_ref = log_ratio_ref(median);
  for (std::size_t j = 0; j < n; ++j) x[j] = log_ratio(ms[j], inv_ref);
}

struct RatioCounts {
  int late = 0, fast = 0;
};
// How many of n times are at or over ln(slow) to `median`, and at or under -ln(slow): one
// vectorized pass that stores nothing.
LAGGARD_WIDE_CLONES
RatioCounts log_ratio_counts(std::size_t n, const double* __restrict ms, double median,
                             float log_slow) {
  const double inv_ref = log_ratio_ref(median);
  int late = 0, fast = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const float xj = log_ratio(ms[j], inv_ref);
    late += xj >= log_slow;
    fast += xj <= -log_slow;
  }
  return {late, fast};
}

// std::clamp for the vectorized pass (it returns a reference, which keeps GCC from
// if-converting the loop).
inline float clamp_f(float v, float lo, float hi) { return std::min(std::max(v, lo), hi); }


// The parameters of one (cohort, stage)'s pass in a window.
struct SeqPass {
  float weight[4], mid[4];       // per shift: LLR = weight (x - mid)
  float ceiling_open, ceiling_held;  // most evidence a window may add; held: waiting or tiny
  float hold_below, absolute;    // excess (ms) at or under which the window is held
  float step_limit;              // 3 sigma: the most a window moves the level
  float early_limit;             // first windows: |x| over this is left out of the baseline
  bool early;                    // some slot may be in its first kOwnWarmup windows
  float log_slow;                // ln(relative_threshold): pauses count after windows under it
  // The own-baseline test: a Student-t LLR of d = x - base,
  // own_half_nu1 ln((own_nu_s2 + d^2) / (own_nu_s2 + (d - own_delta)^2)), capped at
  // own_ceiling_*.
  float own_half_nu1, own_nu_s2, own_delta;
  float own_shift;  // taken off after the cap: the evidence falls to 0 where the test is off
  float own_jump;  // over the baseline by this (log): no evidence for the own-baseline test
  float own_ceiling_open, own_ceiling_held;
  float base_inv_nu_s2;  // 1 / (nu s^2) of the baseline's score (kOwnScoreGain)
  // The cost test: LLR = cost_weight (x - cost_mid); held where the excess is at or under
  // hold_below or under cost_absolute (the user's absolute rule; no 0.5 ms floor).
  float cost_weight, cost_mid, cost_absolute;
  float cost_clip;  // x is taken at most this (Huber): alternative + kCostClip sigma
  // The most the cost test's CUSUM holds: one window's cap over its threshold. Its healthy
  // windows take little away where null and alternative are close, so a CUSUM that had grown
  // over a long slowdown would keep the rank named for many windows after it recovered.
  float cost_top;
  // Added to the evidence of the relative_threshold test, the own-baseline one and the cost
  // test where it is over 0: their larger shares of the budget (the threshold is that of the
  // smallest share).
  float bonus0, bonus_own, bonus_cost;
};

// The own-baseline test's evidence of one window before its cap: none until the rank has a
// baseline (kOwnWarmup windows); a window 1.5x or more over the baseline is a pause or a larger
// slowdown, which the other shifts' tests weigh: it adds nothing here, either way.
inline float own_llr(const SeqPass& q, float xj, float b, bool warm) {
  const float d = xj - b, e = d - q.own_delta;
  const float t = q.own_half_nu1 * fast_logf((q.own_nu_s2 + d * d) / (q.own_nu_s2 + e * e));
  return !warm ? -1.0f : d >= q.own_jump ? 0.0f : t;
}

// What one pass over a (cohort, stage) counts besides the state it updates.
struct SeqCounts {
  int jumps = 0, jump_base = 0;  // pauses: 1.5x the median after a window under the shift
};

// One window of one (cohort, stage) over its slots [0, n): the noise level, the five shifts'
// CUSUMs and the own-baseline one with its baseline, the names (set at the threshold, kept
// until the evidence is back at 0), and the pauses seen. `attention` is non-zero where the
// caller has per-slot work: evidence that rose from 0 in this window, or a name held. One
// branch-free pass over contiguous arrays (restrict: nothing aliases), so the compiler
// vectorizes it; at 16,384 ranks x 16 stages it is the detector's inner loop, and bound by
// memory: every slot's state is read and written once per window.
template <bool kEarly>
inline __attribute__((always_inline)) SeqCounts seq_pass_body(
    std::size_t n, const SeqPass& p, float threshold, const double* __restrict ms, double median,
    int* __restrict seen, float* __restrict level, float* __restrict last,
    float* __restrict c0, float* __restrict c1, float* __restrict c2,
    float* __restrict c3, float* __restrict base, float* __restrict own,
    float* __restrict cost, std::uint8_t* __restrict named, std::uint8_t* __restrict attention) {
  const SeqPass q = p;  // locals: no reload through the reference in the loop
  const double inv_ref = log_ratio_ref(median);
  const float log_slow = q.log_slow, log_pause = q.own_jump;
  int jumps = 0, jump_base = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const float xj = log_ratio(ms[j], inv_ref);
    const float exj = static_cast<float>(ms[j] - median);  // the excess in ms
    const int seen_before = seen[j];
    seen[j] = seen_before + 1;
    // Pauses: 1.5x the median straight after a window at most relative_threshold (a straggler's
    // onset counts once; its later windows do not).
    const int pause_base = (seen_before > 0) & (last[j] < log_slow);
    jump_base += pause_base;
    jumps += pause_base & (xj >= log_pause);
    // The level follows the rank, a pause moving it by 3 sigma at most: a running mean over the
    // first windows, then an EWMA (past kOwnWarmup windows every slot is in the EWMA).
    const float dev = clamp_f(xj - level[j], -q.step_limit, q.step_limit);
    const float level_alpha =
        kEarly ? std::max(static_cast<float>(kLevelAlpha),
                          1.0f / static_cast<float>(seen_before + 1))
               : static_cast<float>(kLevelAlpha);
    level[j] = seen_before > 0 ? level[j] + level_alpha * dev : xj;
    last[j] = xj;
    const bool held = (exj <= q.hold_below) | (exj < q.absolute);
    const float ceiling = held ? q.ceiling_held : q.ceiling_open;
    const float v0 = std::max(0.0f, c0[j] + std::min(ceiling, q.weight[0] * (xj - q.mid[0])));
    const float v1 = std::max(0.0f, c1[j] + std::min(ceiling, q.weight[1] * (xj - q.mid[1])));
    const float v2 = std::max(0.0f, c2[j] + std::min(ceiling, q.weight[2] * (xj - q.mid[2])));
    const float v3 = std::max(0.0f, c3[j] + std::min(ceiling, q.weight[3] * (xj - q.mid[3])));
    // The evidence (the largest CUSUM) rises from 0 where every CUSUM was at 0 before this
    // window: no array of it is kept (Handle::evidence computes it for the few findings).
    const bool was_zero = (c0[j] == 0.0f) & (c1[j] == 0.0f) & (c2[j] == 0.0f) &
                          (c3[j] == 0.0f) & (own[j] == 0.0f) & (cost[j] == 0.0f);
    c0[j] = v0;
    c1[j] = v1;
    c2[j] = v2;
    c3[j] = v3;
    // The cost test: no 0.5 ms floor (its null holds what costs the step too little).
    const bool cost_held = (exj <= q.hold_below) | (exj < q.cost_absolute);
    const float cost_ceiling = cost_held ? q.ceiling_held : q.ceiling_open;
    const float vc = std::min(
        q.cost_top,
        std::max(0.0f, cost[j] + std::min(cost_ceiling, q.cost_weight * (std::min(xj, q.cost_clip) -
                                                                          q.cost_mid))));
    cost[j] = vc;
    // Against the rank's own baseline, once it has one (kOwnWarmup windows): the baseline is
    // learnt while this CUSUM is at 0, from the rank's second window on (the first one's sigma is
    // only the prior), as a running mean and then an EWMA, from 0 (the median). Over the first
    // kOwnWarmup windows a window whose |x| is over 3 sigma + ln(healthy_spread) (a pause, a
    // heavy-tailed or warm-up window) is left out; after them each window moves it by a step of
    // the t score (kOwnScoreGain), which a window far from the baseline hardly moves. Clipped
    // around the baseline instead, two fast first windows had held it low: the ordinary windows
    // that followed were clipped too, so it came back too slowly, the test started against it and
    // read them as slow, and a baseline learnt only at 0 stayed there.
    const float b = base[j];
    const bool warm = seen_before >= kOwnWarmup;  // the test runs; before, the first windows' rule
    const float own_ceiling = held ? q.own_ceiling_held : q.own_ceiling_open;
    const float v5 = std::max(
        0.0f, own[j] + std::min(own_ceiling, own_llr(q, xj, b, warm)) - q.own_shift);
    const bool early = kEarly && !warm;
    const float base_alpha = std::max(static_cast<float>(kBaseAlpha),
                                      1.0f / static_cast<float>(std::max(seen_before, 1)));
    const float d = xj - b;
    const float base_step =
        early ? d : static_cast<float>(kOwnScoreGain) * d / (1.0f + d * d * q.base_inv_nu_s2);
    const bool learn = (own[j] == 0.0f) & (seen_before > 0) &
                       (!early | (std::fabs(xj) <= q.early_limit));
    base[j] = learn ? b + base_alpha * base_step : b;
    own[j] = v5;
    const float most = std::max(
        std::max(std::max(std::max(v0 > 0.0f ? v0 + q.bonus0 : 0.0f, v1), std::max(v2, v3)),
                 v5 > 0.0f ? v5 + q.bonus_own : 0.0f),
        vc > 0.0f ? vc + q.bonus_cost : 0.0f);
    const bool rose = was_zero & (most > 0.0f);
    const std::uint8_t held_name =
        static_cast<std::uint8_t>((named[j] | (most >= threshold)) & (most != 0.0f));
    named[j] = held_name;
    attention[j] = static_cast<std::uint8_t>(held_name | (rose << 1));
  }
  return {jumps, jump_base};
}

// The pass, for a (cohort, stage) whose slots may still be in their first kOwnWarmup windows
// (p.early) or not: past them, the first windows' baseline rule is compiled out of the loop.
LAGGARD_WIDE_CLONES
SeqCounts seq_pass(std::size_t n, const SeqPass& p, float threshold, const double* __restrict ms,
                   double median, int* __restrict seen, float* __restrict level,
                   float* __restrict last, float* __restrict c0,
                   float* __restrict c1, float* __restrict c2, float* __restrict c3,
                   float* __restrict base, float* __restrict own,
                   float* __restrict cost, std::uint8_t* __restrict named,
                   std::uint8_t* __restrict attention) {
  return p.early ? seq_pass_body<true>(n, p, threshold, ms, median, seen, level, last,
                                       c0, c1, c2, c3, base, own, cost, named, attention)
                 : seq_pass_body<false>(n, p, threshold, ms, median, seen, level, last,
                                        c0, c1, c2, c3, base, own, cost, named, attention);
}

}  // namespace

void Detector::SeqTrack::arrange(const std::vector<int>& ranks) {
  const std::size_t n = ranks.size();
  if (n <= slot_rank.size() && std::equal(ranks.begin(), ranks.end(), slot_rank.begin())) return;
  settled_windows = 0;  // a slot may be new
  // For each new slot, the old slot it takes (-1: a rank not seen before): the window's ranks
  // in order, then the ranks that are not in this window, parked.
  const std::size_t old_slots = slot_rank.size();
  std::vector<int> from;
  from.reserve(n + old_slots);
  std::vector<char> taken(old_slots, 0);
  std::vector<int> new_rank;
  new_rank.reserve(n + old_slots);
  for (int rank : ranks) {
    int old = slot(rank);
    if (old >= 0 && taken[static_cast<std::size_t>(old)]) old = -1;  // the rank twice: a new slot
    if (old >= 0) taken[static_cast<std::size_t>(old)] = 1;
    from.push_back(old);
    new_rank.push_back(rank);
  }
  for (std::size_t s = 0; s < old_slots; ++s)
    if (!taken[s]) {
      from.push_back(static_cast<int>(s));
      new_rank.push_back(slot_rank[s]);
    }
  auto permute = [&](auto& values, auto fresh) {
    std::remove_reference_t<decltype(values)> out(from.size(), fresh);
    for (std::size_t s = 0; s < from.size(); ++s)
      if (from[s] >= 0) out[s] = values[static_cast<std::size_t>(from[s])];
    values.swap(out);
  };
  for (auto& c : cusum) permute(c, 0.0f);
  permute(level, 0.0f);
  permute(last, 0.0f);
  permute(base, 0.0f);
  permute(own, 0.0f);
  permute(cost, 0.0f);
  permute(seen, 0);
  permute(named_bit, std::uint8_t{0});
  permute(cold, SeqState{});
  slot_rank.swap(new_rank);
  // Ranks index slot_of_rank: ranks beyond kMaxTrackedRank keep a slot but are not found by rank.
  for (int& v : slot_of_rank) v = -1;
  for (std::size_t s = 0; s < slot_rank.size(); ++s) {
    const int rank = slot_rank[s];
    if (rank < 0 || rank >= kMaxTrackedRank) continue;
    const std::size_t r = static_cast<std::size_t>(rank);
    if (r >= slot_of_rank.size()) slot_of_rank.resize(r + 1, -1);
    if (slot_of_rank[r] < 0) slot_of_rank[r] = static_cast<int>(s);
  }
}

double Detector::SeqTrack::sigma() const {
  return scale_windows > 0 ? std::max(kMinSigma, std::exp(log_scale)) : kPriorSigma;
}

std::optional<Detector::SequentialState> Detector::sequential_state(const std::string& cohort,
                                                                    const std::string& stage,
                                                                    int rank) const {
  std::string key;
  const auto it = seq_tracks_.find(stage_key(key, cohort, stage));
  if (it == seq_tracks_.end()) return std::nullopt;
  const SeqTrack& t = it->second;
  const int slot = t.slot(rank);
  if (slot < 0) return std::nullopt;
  const std::size_t u = static_cast<std::size_t>(slot);
  SequentialState s;
  s.sigma = t.sigma();
  s.baseline = t.base[u];
  s.own_evidence = t.own[u];
  s.windows = t.seen[u];
  return s;
}

void Detector::observe_sequential(const Window& window, Report& report) {
  const double log_slow = std::log(options_.relative_threshold);
  const double log_healthy = std::log(options_.healthy_spread);
  // The slowdowns the test looks for: relative_threshold and those of 1.25, 1.5 and 2 above
  // it. One shift's test is weak against a much larger one when the noise is large (its
  // evidence per window grows with the gap it was built for); the others are not.
  double shifts[5];
  int num_shifts = 0;
  shifts[num_shifts++] = log_slow;
  for (double factor : {1.25, 1.5, 2.0})
    if (factor > options_.relative_threshold * 1.05) shifts[num_shifts++] = std::log(factor);
  const double cap = std::log(1.0 / options_.pause_rate);
  const bool use_absolute = std::isfinite(options_.absolute_ms_threshold);

  // Pairs watched: (rank, stage) of the stages that are not communication.
  double pairs = 0.0;
  for (const StageFigures& f : report.stages)
    if (f.kind != StageKind::communication) pairs += static_cast<double>(f.rank_ids.size());
  pairs_ = std::max(pairs_, pairs);
  // One test per shift, and the one against each rank's own baseline.
  // The budget is shared among the tests (Bonferroni, weighted): where the own-baseline test
  // runs, it takes kShareOwn and the test for relative_threshold kShareFirst, since those two
  // carry a slowdown near relative_threshold, where evidence is scarce; the tests for the larger
  // shifts share the rest: they reach the cap in every slow window, and a higher threshold costs
  // them a fraction of a window. Where it does not run, the cohort's tests share the budget
  // equally, as before (the own test's share is not given to them: under heavy noise that is what
  // keeps a healthy run quiet).
  // The cost test takes kShareCost where the own test runs, and an equal share where it does not.
  const double base_threshold = evidence_threshold(options_, pairs_);
  const double uniform_threshold = base_threshold + std::log(num_shifts + 2);
  const double share_first = num_shifts > 1 ? kShareFirst : 1.0 - kShareOwn - kShareCost;
  const double share_rest =
      num_shifts > 1 ? (1.0 - kShareOwn - kShareFirst - kShareCost) / (num_shifts - 1)
                     : share_first;
  const double split_threshold = base_threshold - std::log(share_rest);
  const float bonus_first = static_cast<float>(std::log(share_first / share_rest));
  const float bonus_own = static_cast<float>(std::log(kShareOwn / share_rest));
  const float bonus_cost = static_cast<float>(std::log(kShareCost / share_rest));
  const double healthy_ratio = options_.healthy_spread;

  std::string key;
  auto track_key = [&](const std::string& cohort, const std::string& stage) -> const std::string& {
    return stage_key(key, cohort, stage);
  };

  // Per stage: how many ranks are relative_threshold slower and faster than the median (the wait
  // search below looks at a stage only where there are some). The stage's extent answers for
  // most stages without a pass: no rank is late when even the slowest is short of the threshold
  // (by more than the 1e-7 of x's rounding), none fast when even the fastest is. The counts are
  // needed only where some rank may be fast (a stage of own work, not communication): elsewhere
  // the late count stays -1, "maybe", and the search, which tests every rank itself where it
  // runs, is not misled (a window with pauses has late ranks in every stage).
  std::vector<std::pair<int, int>>& ratio_counts = seq_ratio_counts_;
  ratio_counts.resize(report.stages.size());
  const float flog_slow = static_cast<float>(log_slow);
  constexpr float kRoundingMargin = 1e-5f;
  // The log-ratios of n times to `median`, into the scratch that every stage reuses.
  auto ratios_into_scratch = [&](const double* ms, std::size_t n, double median) -> const float* {
    if (seq_x_.size() < n) seq_x_.resize(n);
    log_ratios(n, ms, median, seq_x_.data());
    return seq_x_.data();
  };
  // One stage's log-ratios.
  auto stage_ratios = [&](const StageFigures& f) -> const float* {
    return ratios_into_scratch(f.rank_ms.data(), f.rank_ms.size(), f.median_ms);
  };
  for (std::size_t i = 0; i < report.stages.size(); ++i) {
    const StageFigures& f = report.stages[i];
    const double inv_ref = log_ratio_ref(f.median_ms);
    const bool maybe_late = log_ratio(f.max_ms, inv_ref) >= flog_slow - kRoundingMargin;
    const bool maybe_fast = log_ratio(f.min_ms, inv_ref) <= -flog_slow + kRoundingMargin;
    ratio_counts[i] = {maybe_late ? -1 : 0, 0};
    if (maybe_fast && f.kind != StageKind::communication) {
      const RatioCounts c =
          log_ratio_counts(f.rank_ms.size(), f.rank_ms.data(), f.median_ms, flog_slow);
      ratio_counts[i] = {c.late, c.fast};
    }
  }

  // A stage holds a wait for a late rank when a rank that is relative_threshold slower than the
  // median in another stage of its cohort is faster than the median in this one, by more than
  // relative_threshold and 3 sigma of the stage, and by about what it lost elsewhere (0.5x to 2x
  // in ms): it arrived last at a collective inside this stage, and the others waited there for
  // it. Excess in this stage up to 1.5x that wait is then waiting, whatever the stage was
  // called: it gives no evidence. (Matching the milliseconds keeps a pause in one stage and
  // jitter in another from looking like a wait in a large cohort.)
  std::vector<double>& wait_ms = seq_wait_;
  wait_ms.assign(report.stages.size(), 0.0);
  // A stage of own work with a rank relative_threshold faster than the median: else nobody
  // arrived last in it.
  auto may_hold_wait = [&](std::size_t i) {
    const StageFigures& f = report.stages[i];
    return f.kind != StageKind::communication && f.rank_ids.size() >= 2 &&
           ratio_counts[i].second > 0;
  };
  for (std::size_t b = 0; b < report.stages.size();) {
    std::size_t e = b;
    while (e < report.stages.size() && report.stages[e].cohort == report.stages[b].cohort) ++e;
    auto& late = seq_late_;
    late.clear();
    // The late ranks matter only where some rank is fast enough to have waited for them.
    bool any_fast = false;
    for (std::size_t i = b; i < e; ++i) any_fast |= may_hold_wait(i);
    for (std::size_t i = b; i < e && any_fast; ++i) {
      const StageFigures& f = report.stages[i];
      if (f.kind == StageKind::communication || ratio_counts[i].first == 0) continue;
      const float* x = stage_ratios(f);
      for (std::size_t j = 0; j < f.rank_ids.size(); ++j)
        if (x[j] >= flog_slow) late.emplace_back(f.rank_ids[j], f.rank_ms[j] - f.median_ms);
    }
    std::sort(late.begin(), late.end(), [](const auto& a, const auto& c) {
      return a.first < c.first || (a.first == c.first && a.second > c.second);
    });
    late.erase(std::unique(late.begin(), late.end(),
                           [](const auto& a, const auto& c) { return a.first == c.first; }),
               late.end());  // each rank once, with its largest excess
    if (!late.empty()) {
      for (std::size_t i = b; i < e; ++i) {
        if (!may_hold_wait(i)) continue;
        const StageFigures& f = report.stages[i];
        auto t = seq_tracks_.find(track_key(f.cohort, f.stage));
        const double low = -std::max(log_slow, 3.0 * (t == seq_tracks_.end()
                                                           ? kPriorSigma
                                                           : t->second.sigma()));
        const float* x = stage_ratios(f);
        for (std::size_t j = 0; j < f.rank_ids.size(); ++j) {
          const double deficit = f.median_ms - f.rank_ms[j];
          if (static_cast<double>(x[j]) > low || deficit < kMinWaitMs) continue;
          auto it = std::lower_bound(
              late.begin(), late.end(), f.rank_ids[j],
              [](const std::pair<int, double>& a, int rank) { return a.first < rank; });
          if (it == late.end() || it->first != f.rank_ids[j]) continue;
          if (!(it->second >= 0.5 * deficit && it->second <= 2.0 * deficit)) continue;
          if (deficit <= wait_ms[i]) continue;
          if (wait_ms[i] == 0.0) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "%.2f ms", deficit);
            report.hints.push_back("measured: rank " + std::to_string(f.rank_ids[j]) +
                                   cohort_suffix(f.cohort) + " is slow in another stage and " +
                                   buf + " faster than the median in '" + f.stage +
                                   "'; inferred: '" + f.stage +
                                   "' holds a wait for it, and the others' excess there is "
                                   "waiting");
          }
          wait_ms[i] = deficit;
        }
      }
    }
    b = e;
  }

  std::vector<double>& scratch = seq_scratch_;
  seq_named_.clear();
  for (std::size_t i = 0; i < report.stages.size(); ++i) {
    const StageFigures& f = report.stages[i];
    SeqTrack& track = seq_tracks_[track_key(f.cohort, f.stage)];
    track.arrange(f.rank_ids);  // slot j is f.rank_ids[j]
    const double* ms = f.rank_ms.data();
    const std::size_t n = f.rank_ids.size();

    // The evidence uses the noise estimated up to the previous window; this window's deviations
    // update it afterwards.
    const double sigma = track.sigma();
    const bool comparable = f.kind != StageKind::communication && n >= 2;
    // Shifts not looked for get weight 0: their CUSUM stays at 0 (the loop has a fixed length).
    float weight[kShifts] = {}, mid[kShifts] = {};
    for (int k = 0; k < num_shifts; ++k) {
      weight[k] = static_cast<float>((shifts[k] - log_healthy) / (sigma * sigma));
      mid[k] = static_cast<float>(0.5 * (shifts[k] + log_healthy));
    }
    // The cap follows the pauses this stage has actually seen, when they are more frequent than
    // pause_rate: the budget holds on a noisier machine, at the price of more windows to confirm.
    // The rate seen, with pause_rate as a prior worth kPausePrior rank-windows.
    const double pause_share =
        std::max(options_.pause_rate, (track.pauses + kPausePrior * options_.pause_rate) /
                                          (track.pause_chances + kPausePrior));
    const float fcap = static_cast<float>(std::min(cap, std::log(1.0 / pause_share)));
    // Waiting (explained by the wait this stage holds) or below the absolute rule: evidence may
    // not rise. Communication, or nothing to compare with: it only falls.
    const float hold_below = wait_ms[i] > 0.0 ? static_cast<float>(1.5 * wait_ms[i]) : -1.0f;
    const float absolute = static_cast<float>(
        std::max(kMinExcessMs, use_absolute ? options_.absolute_ms_threshold : 0.0));
    const float step_limit = static_cast<float>(3.0 * sigma);
    const float flog_pause = static_cast<float>(kLogPause);

    int* seen = track.seen.data();
    float* level = track.level.data();
    float* last = track.last.data();

    // Noise: the median over ranks of each rank's deviation from its own level (its persistent
    // offset taken out), so one slow or paused rank does not move it; over 1,024 ranks at most
    // (every n/1,024-th), which estimates a median as well at a fraction of the cost.
    // Two ranks are the exception: their log-ratios to the midpoint mirror each other, so one
    // rank's onset moves both away from their levels and would read as noise for as long as the
    // levels take to follow. Their noise is the change from the previous window instead (/ sqrt 2:
    // the difference of two draws), which a persistent shift moves once.
    const std::size_t stride = n > 2048 ? n / 1024 : 1;
    const bool pair_noise = n == 2;
    const float* x;  // x[k] is the log-ratio of slot k * stride
    if (stride == 1) {
      x = stage_ratios(f);
    } else {
      std::vector<double>& picked = seq_picked_;
      picked.clear();
      for (std::size_t j = 0; j < n; j += stride) picked.push_back(ms[j]);
      x = ratios_into_scratch(picked.data(), picked.size(), f.median_ms);
    }
    scratch.clear();
    for (std::size_t j = 0, k = 0; j < n; j += stride, ++k)
      if (seen[j] > 0)
        scratch.push_back(pair_noise ? std::fabs(static_cast<double>(x[k] - last[j])) / kSqrt2
                                     : std::fabs(static_cast<double>(x[k] - level[j])));
    // The test, one pass over the slots.
    SeqPass pass;
    for (int k = 0; k < kShifts; ++k) {
      pass.weight[k] = weight[k];
      pass.mid[k] = mid[k];
    }
    pass.ceiling_open = comparable ? fcap : -fcap;
    pass.ceiling_held = comparable ? 0.0f : -fcap;
    pass.hold_below = hold_below;
    pass.absolute = absolute;
    pass.step_limit = step_limit;
    pass.early_limit = step_limit + static_cast<float>(std::log(options_.healthy_spread));
    pass.early = track.settled_windows < kOwnWarmup;
    track.settled_windows = std::min(track.settled_windows + 1, kOwnWarmup);
    // The own-baseline test: "slower than its own baseline by relative_threshold" against "no
    // change", the LLR of a Student-t(kOwnNu) d = x - base, bounded and redescending.
    const double own_scale = sigma * kOwnScalePerSigma * kOwnScaleShrink;
    const float own_cap = static_cast<float>(kOwnCeiling);
    pass.own_half_nu1 = static_cast<float>(0.5 * (kOwnNu + 1.0));
    pass.own_nu_s2 = static_cast<float>(kOwnNu * own_scale * own_scale);
    pass.own_delta = static_cast<float>(log_slow);
    pass.own_shift = 0.0f;
    // Only where one window separates the shift from no change by 3 sigma or more: in a noisier
    // stage a rank's baseline is not known to a fraction of the shift within the windows it has,
    // and a streak of noise against a baseline learnt before it reads as a slowdown.
    const bool own_on = sigma * kOwnSeparation <= log_slow;
    pass.own_jump = flog_pause;
    if (!own_on) {
      pass.own_half_nu1 = 0.0f;
      pass.own_delta = 0.0f;  // the ratio is 1 (own_nu_s2 > 0)
      pass.own_shift = own_cap;  // no evidence: what it had falls to 0
    }
    const double base_scale = sigma * kOwnScalePerSigma;
    pass.base_inv_nu_s2 = static_cast<float>(1.0 / (kOwnNu * base_scale * base_scale));
    pass.own_ceiling_open = comparable ? own_cap : -own_cap;
    pass.own_ceiling_held = comparable ? 0.0f : -own_cap;
    pass.log_slow = flog_slow;
    pass.bonus0 = own_on ? bonus_first : 0.0f;
    pass.bonus_own = own_on ? bonus_own : 0.0f;
    pass.bonus_cost = own_on ? bonus_cost : 0.0f;
    track.bonus_first = pass.bonus0;
    track.bonus_own = pass.bonus_own;
    track.bonus_cost = pass.bonus_cost;
    pass.cost_weight = 0.0f;
    // The cost test's null and alternative as excesses in ms, then as log-ratios (with the same
    // kEpsilonMs as x): null, within healthy_spread or under min_cost_share of the step;
    // alternative, kCostTarget times that share, and at least kCostLeastRatio over the null's
    // ratio. Off (its evidence falls to 0) without a step time.
    double step_ms = f.step_ms;
    if (std::isfinite(step_ms) && step_ms > 0.0) {
      if (track.steps.size() < kCostStepWindows) {
        track.steps.push_back(step_ms);
      } else {
        track.steps[track.step_next] = step_ms;
        track.step_next = (track.step_next + 1) % kCostStepWindows;
      }
      double recent[kCostStepWindows];
      std::copy(track.steps.begin(), track.steps.end(), recent);
      step_ms = detail::median_inplace(recent, track.steps.size());
    }
    const double m = std::max(f.median_ms, 0.0);
    if (comparable && std::isfinite(step_ms) && step_ms > 0.0 && std::isfinite(m)) {
      const double e0 = std::max((healthy_ratio - 1.0) * m, options_.min_cost_share * step_ms);
      const double e1 = std::max((healthy_ratio * kCostLeastRatio - 1.0) * m,
                                 kCostTarget * options_.min_cost_share * step_ms);
      const double x0 = std::log1p(e0 / (m + kEpsilonMs));
      const double x1 = std::log1p(e1 / (m + kEpsilonMs));
      pass.cost_weight = static_cast<float>((x1 - x0) / (sigma * sigma));
      pass.cost_mid = static_cast<float>(0.5 * (x0 + x1));
      pass.cost_clip = static_cast<float>(x1 + kCostClip * sigma);
    }
    if (!(comparable && std::isfinite(step_ms) && step_ms > 0.0 && std::isfinite(m)) ||
        !(pass.cost_weight > 0.0f)) {
      pass.cost_weight = 1.0f;
      pass.cost_mid = 1e30f;
      pass.cost_clip = 0.0f;
    }
    pass.cost_absolute = use_absolute ? static_cast<float>(options_.absolute_ms_threshold)
                                      : -std::numeric_limits<float>::infinity();
    const float fthreshold = static_cast<float>(own_on ? split_threshold : uniform_threshold);
    pass.cost_top = fthreshold - pass.bonus_cost + fcap;
    std::vector<std::uint8_t>& attention = seq_attention_;
    attention.resize(n);
    static_assert(kShifts == 4, "seq_pass updates four shifts' CUSUMs");
    const SeqCounts counts =
        seq_pass(n, pass, fthreshold, ms, f.median_ms, seen, level, last,
                 track.cusum[0].data(), track.cusum[1].data(), track.cusum[2].data(),
                 track.cusum[3].data(), track.base.data(),
                 track.own.data(), track.cost.data(), track.named_bit.data(), attention.data());
    if (comparable) {
      track.pauses += counts.jumps;
      track.pause_chances += counts.jump_base;
    }
    // The slots the pass marked (rare): a rise's step, the names held now. Eight slots at a time
    // where none is marked.
    const std::uint8_t* marks = attention.data();
    for (std::size_t j = 0; j < n; ++j) {
      if (j + 8 <= n) {
        std::uint64_t word;
        std::memcpy(&word, marks + j, sizeof word);
        if (word == 0) {
          j += 7;
          continue;
        }
      }
      if (marks[j] == 0) continue;
      if (marks[j] & 2) track.cold[j].rise_step = window.step;
      if ((marks[j] & 1) && comparable) seq_named_.emplace_back(i, j);
    }
    if (scratch.size() >= 2) {
      const double window_sigma = std::max(
          kMinSigma, kMadToSigma * detail::median_inplace(scratch.data(), scratch.size()));
      // The first windows count as a running mean (kScaleAlpha): for a pair, warm-up and an
      // onset; for larger cohorts, the first deviations from levels that are still one draw.
      const double alpha =
          std::max(kScaleAlpha, 1.0 / static_cast<double>(track.scale_windows + 1));
      track.log_scale = track.scale_windows == 0
                            ? std::log(window_sigma)
                            : (1.0 - alpha) * track.log_scale + alpha * std::log(window_sigma);
      ++track.scale_windows;
    }
    for (int rank : f.flagged_ranks) {
      const int slot = track.slot(rank);
      if (slot < 0) continue;
      SeqState& st = track.cold[static_cast<std::size_t>(slot)];
      ++st.flagged;
      if (st.first_flagged_step < 0) st.first_flagged_step = window.step;
    }
  }

  // Findings: the window's flags, marked confirmed when named; flags in a stage that holds a
  // wait become waiting; a named rank that is not flagged in this window is still listed.
  // Findings come grouped by (cohort, stage): each group's track is looked up once.
  const std::string* last_cohort = nullptr;
  const std::string* last_stage = nullptr;
  SeqTrack* last_track = nullptr;
  struct Handle {
    SeqTrack* track = nullptr;
    std::size_t slot = 0;
    explicit operator bool() const { return track != nullptr; }
    SeqState* operator->() const { return &track->cold[slot]; }
    bool named() const { return track->named_bit[slot] != 0; }
    // The largest CUSUM with its test's bonus, as the pass computed it (seq_pass_body).
    double evidence() const {
      const SeqTrack& t = *track;
      auto with = [](float v, float bonus) { return v > 0.0f ? v + bonus : 0.0f; };
      float most = with(t.cusum[0][slot], t.bonus_first);
      for (int k = 1; k < kShifts; ++k) most = std::max(most, t.cusum[k][slot]);
      most = std::max(most, with(t.own[slot], t.bonus_own));
      most = std::max(most, with(t.cost[slot], t.bonus_cost));
      return static_cast<double>(most);
    }
  };
  auto state_of = [&](const std::string& cohort, const std::string& stage, int rank) -> Handle {
    if (!last_cohort || *last_cohort != cohort || *last_stage != stage) {
      auto it = seq_tracks_.find(track_key(cohort, stage));
      last_track = it == seq_tracks_.end() ? nullptr : &it->second;
      last_cohort = &cohort;
      last_stage = &stage;
    }
    const int slot = last_track ? last_track->slot(rank) : -1;
    if (slot < 0) return {};
    return {last_track, static_cast<std::size_t>(slot)};
  };
  const bool any_wait = std::any_of(wait_ms.begin(), wait_ms.end(), [](double w) { return w > 0; });
  auto is_wait_bearing = [&](const RankFinding& f) {
    if (!any_wait) return false;
    for (std::size_t i = 0; i < report.stages.size(); ++i)
      if (wait_ms[i] > 0.0 && report.stages[i].stage == f.stage &&
          report.stages[i].cohort == f.cohort)
        return f.ms - report.stages[i].median_ms <= 1.5 * wait_ms[i];
    return false;
  };
  // Each finding's state first, its cold part fetched ahead: with pauses a window has thousands of
  // findings, each the state of another slot, and reading them one by one waited on memory.
  std::vector<Handle> handles;
  handles.reserve(report.stragglers.size());
  for (const RankFinding& f : report.stragglers) {
    handles.push_back(state_of(f.cohort, f.stage, f.rank));
    if (handles.back()) __builtin_prefetch(handles.back().operator->());
  }
  std::vector<RankFinding> kept;
  kept.reserve(report.stragglers.size());
  for (std::size_t k = 0; k < report.stragglers.size(); ++k) {
    RankFinding& f = report.stragglers[k];
    const Handle st = handles[k];
    f.windows_flagged = st ? st->flagged : 0;
    f.evidence = st ? st.evidence() : 0.0;
    f.confirmed = st && st.named();  // statistically; the gate comes below
    if (!f.confirmed && is_wait_bearing(f)) {
      f.role = RankFinding::Role::waiting;
      report.waiting.push_back(std::move(f));
    } else {
      kept.push_back(std::move(f));
    }
  }
  report.stragglers.swap(kept);
  last_cohort = last_stage = nullptr;
  for (const auto& [i, j] : seq_named_) {
    const StageFigures& f = report.stages[i];
    const int rank = f.rank_ids[j];
    if (std::find(f.flagged_ranks.begin(), f.flagged_ranks.end(), rank) != f.flagged_ranks.end())
      continue;  // listed already
    const Handle st = state_of(f.cohort, f.stage, rank);
    if (!st) continue;
    RankFinding r;
    for (const StepSample& s : window.samples)
      if (s.rank == rank && s.cohort == f.cohort) {
        r.host = s.host;
        break;
      }
    r.rank = rank;
    r.cohort = f.cohort;
    r.stage = f.stage;
    r.kind = f.kind;
    r.role = RankFinding::Role::straggler;
    r.ms = f.rank_ms[j];
    r.ref_ms = f.ref_ms;
    r.slowdown = f.ref_ms > 0.0 ? f.rank_ms[j] / f.ref_ms : 1.0;
    set_cost(r, f.step_ms);
    r.windows_flagged = st->flagged;
    r.evidence = st.evidence();
    r.confirmed = true;
    report.stragglers.push_back(std::move(r));
  }

  // Materiality: a named pair is a verdict while its current run of naming is, typically, above
  // healthy_spread and at least min_cost_share of the step. `named` keeps which are named.
  std::vector<std::uint8_t>& named = seq_stat_named_;
  named.assign(report.stragglers.size(), 0);
  last_cohort = last_stage = nullptr;
  std::string episode_key;
  for (std::size_t k = 0; k < report.stragglers.size(); ++k) {
    RankFinding& f = report.stragglers[k];
    if (!f.confirmed) continue;
    const Handle st = state_of(f.cohort, f.stage, f.rank);
    if (!st) {
      f.confirmed = false;
      continue;
    }
    named[k] = 1;
    f.confirmed = extend_episode(st->episode, stage_key(episode_key, f.cohort, f.stage), f);
  }
  end_lapsed_episodes();

  // Waiting is persistent evidence (confirmed) while its cohort has a confirmed straggler to
  // wait for; it is never a verdict.
  std::vector<std::string_view> cohorts_named;
  for (const RankFinding& f : report.stragglers)
    if (f.confirmed &&
        std::find(cohorts_named.begin(), cohorts_named.end(), f.cohort) == cohorts_named.end())
      cohorts_named.push_back(f.cohort);
  last_cohort = last_stage = nullptr;
  for (RankFinding& f : report.waiting) {
    const Handle st = state_of(f.cohort, f.stage, f.rank);
    f.windows_flagged = st ? st->flagged : 0;
    f.confirmed = std::find(cohorts_named.begin(), cohorts_named.end(), f.cohort) !=
                  cohorts_named.end();
  }

  // The untimed stage is what no section covers. Where the same rank is confirmed in a timed
  // stage of its cohort with an excess kUntimedExplained times its untimed excess or more, that
  // stage says why the rank is slow, and the small rest outside the sections is a side effect
  // (code right after a long stall runs on cold caches; a slow host is slow everywhere): it is
  // not named apart. Its finding stays, unconfirmed, and a hint says so.
  for (RankFinding& u : report.stragglers) {
    if (!u.confirmed || u.stage != kUntimedStage) continue;
    const double untimed_excess = u.ms - u.ref_ms;
    const RankFinding* why = nullptr;
    for (const RankFinding& f : report.stragglers)
      if (f.confirmed && f.rank == u.rank && f.cohort == u.cohort && f.stage != kUntimedStage &&
          f.ms - f.ref_ms >= kUntimedExplained * untimed_excess &&
          (!why || f.ms - f.ref_ms > why->ms - why->ref_ms))
        why = &f;
    if (!why) continue;
    u.confirmed = false;
    named[static_cast<std::size_t>(&u - report.stragglers.data())] = 0;  // not named apart
    char buf[160];
    std::snprintf(buf, sizeof buf, " is %.2f ms over the median in '%s' and %.2f ms in '",
                  untimed_excess, std::string(kUntimedStage).c_str(), why->ms - why->ref_ms);
    report.hints.push_back("measured: rank " + std::to_string(u.rank) + cohort_suffix(u.cohort) +
                           buf + why->stage + "', where it is confirmed; inferred: '" +
                           why->stage + "' explains it, '" + std::string(kUntimedStage) +
                           "' is not named apart");
  }

  // The run's confirmed list: a pair enters it when first confirmed (named and material), with
  // the figures of its run of naming so far, and then takes every window it is named in.
  last_cohort = last_stage = nullptr;
  for (std::size_t k = 0; k < report.stragglers.size(); ++k) {
    const RankFinding& f = report.stragglers[k];
    if (!named[k]) continue;
    const Handle st = state_of(f.cohort, f.stage, f.rank);
    if (!st) continue;
    if (st->confirmed_index < 0) {
      if (!f.confirmed) continue;
      st->confirmed_index = static_cast<int>(confirmed_.size());
      publish(f, st->episode, window.step,
              st->first_flagged_step >= 0 ? st->first_flagged_step
              : st->rise_step >= 0        ? st->rise_step
                                          : window.step,
              stage_key(key, f.cohort, f.stage));
      continue;
    }
    Confirmed& c = confirmed_[static_cast<std::size_t>(st->confirmed_index)];
    c.finding = f;
    c.slowdowns.push_back(f.slowdown);
    c.costs_ms.push_back(f.cost_ms);
    c.cost_shares.push_back(f.cost_share);
  }
  for (std::size_t i = 0; i < confirmed_.size(); ++i) {
    auto it = seq_tracks_.find(confirmed_at_[i].key);
    if (it == seq_tracks_.end()) continue;
    const int slot = it->second.slot(confirmed_at_[i].rank);
    if (slot >= 0) confirmed_[i].windows_seen = it->second.seen[static_cast<std::size_t>(slot)];
  }
}

}  // namespace laggard
