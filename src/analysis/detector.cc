// laggard — the straggler analysis: the RFC rule per window (evaluate_window), the report's metric
// names (Report::metrics), and persistence over windows (Detector).
#include "laggard/detector.hpp"

#include "analysis/median.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
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
}

DetectorOptions DetectorOptions::recommended(int world_size) {
  DetectorOptions o;
  o.ref = Reference::robust;
  o.relative_threshold = 1.1;
  o.absolute_ms_threshold = std::numeric_limits<double>::infinity();  // off: see docs
  o.mad_z = 3.5;
  if (world_size > 512) {
    o.confirm_k = 3;
    o.confirm_n = 5;
  }
  return o;
}

DetectorOptions DetectorOptions::preset(std::string_view name, int world_size) {
  if (name == "rfc") return rfc();
  if (name == "recommended") return recommended(world_size);
  throw std::invalid_argument("unknown detector preset '" + std::string(name) +
                              "': expected rfc or recommended");
}

// ---------------------------------------------------------------------------------------------
// One window

namespace {

// MAD × 1.4826 estimates the standard deviation of normally distributed times.
constexpr double kMadToSigma = 1.4826;

// One stage of one cohort: the times of the ranks that reported it, in sample order.
struct Column {
  std::string_view name;
  StageKind kind = StageKind::compute;
  std::size_t count = 0;    // entries in use; member and ms are sized for every possible one
  std::vector<int> member;  // position in Cohort::members
  std::vector<double> ms;
};

struct Cohort {
  std::string_view name;
  std::vector<int> members;  // indices into Window::samples, in sample order
  std::vector<int> ranks;    // ranks[m] = samples[members[m]].rank
  std::vector<Column> stages;
};

// What the rule found in one column, before it becomes StageFigures.
struct ColumnResult {
  double ref = 0.0, mean = 0.0, median = 0.0, min = 0.0, max = 0.0;
  int top = -1;              // position in the column of the largest time
  std::vector<int> flagged;  // positions in the column, ordered by rank
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
  if (n >= 8) {
    for (std::size_t i = 0; i + 8 < n; i += 8)
      if (!same8(p + i, q + i)) return false;
    return same8(p + n - 8, q + n - 8);  // the last 8 bytes, overlapping the loop's
  }
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != q[i]) return false;
  return true;
}

int find_stage(const std::vector<Column>& stages, std::size_t pos, std::string_view name) {
  // Fast path: most ranks report the same stages in the same order.
  if (pos < stages.size() && same_name(stages[pos].name, name)) return static_cast<int>(pos);
  for (std::size_t i = 0; i < stages.size(); ++i)
    if (same_name(stages[i].name, name)) return static_cast<int>(i);
  return -1;
}

class WindowEvaluator {
 public:
  WindowEvaluator(const Window& window, const DetectorOptions& options, Report& report)
      : samples_(window.samples), options_(options), report_(report) {}

  void run() {
    group_by_cohort();
    double best_gap = 0.0;
    for (Cohort& cohort : cohorts_) {
      build_columns(cohort);
      evaluate_cohort(cohort, best_gap);
    }
  }

 private:
  void group_by_cohort() {
    std::unordered_map<std::string_view, int> index;
    int last = -1;
    int world = 0;
    bool ranks_sorted_unique = true;
    for (std::size_t i = 0; i < samples_.size(); ++i) {
      const StepSample& s = samples_[i];
      world = std::max(world, s.world_size);
      if (i > 0 && s.rank <= samples_[i - 1].rank) ranks_sorted_unique = false;
      int c = last;
      if (c < 0 || cohorts_[static_cast<std::size_t>(c)].name != s.cohort) {
        auto [it, inserted] = index.emplace(s.cohort, static_cast<int>(cohorts_.size()));
        if (inserted) {
          cohorts_.emplace_back();
          cohorts_.back().name = s.cohort;
        }
        c = it->second;
      }
      Cohort& cohort = cohorts_[static_cast<std::size_t>(c)];
      cohort.members.push_back(static_cast<int>(i));
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

  void build_columns(Cohort& cohort) {
    std::vector<Column>& stages = cohort.stages;
    const std::size_t members = cohort.members.size();
    for (std::size_t m = 0; m < members; ++m) {
      const StepSample& s = samples_[static_cast<std::size_t>(cohort.members[m])];
      for (std::size_t p = 0; p < s.stages.size(); ++p) {
        const StageTime& st = s.stages[p];
        if (!std::isfinite(st.ms)) continue;  // no usable time: as if the stage were missing
        int idx = find_stage(stages, p, st.name);
        if (idx < 0) {
          idx = static_cast<int>(stages.size());
          stages.emplace_back();
          Column& fresh = stages.back();
          fresh.name = st.name;
          fresh.kind = st.kind;
          // Each remaining member adds at most one entry: size once, then write by index.
          fresh.member.resize(members - m);
          fresh.ms.resize(members - m);
        }
        Column& col = stages[static_cast<std::size_t>(idx)];
        if (col.count > 0 && col.member[col.count - 1] == static_cast<int>(m)) {
          col.ms[col.count - 1] += st.ms;  // the same stage twice in one sample: accumulate
        } else {
          col.member[col.count] = static_cast<int>(m);
          col.ms[col.count] = st.ms;
          ++col.count;
        }
      }
    }
    for (Column& col : stages) {  // shrinking keeps the capacity: no reallocation
      col.member.resize(col.count);
      col.ms.resize(col.count);
    }
  }

  static int rank_of(const Cohort& cohort, int member) {
    return cohort.ranks[static_cast<std::size_t>(member)];
  }
  const StepSample& sample_of(const Cohort& cohort, int member) const {
    return samples_[static_cast<std::size_t>(cohort.members[static_cast<std::size_t>(member)])];
  }

  ColumnResult evaluate_column(const Cohort& cohort, const Column& col) {
    ColumnResult r;
    const std::vector<double>& ms = col.ms;
    const std::size_t n = ms.size();
    // One running sum, in sample order: the mean is then exactly what a plain loop gives.
    double sum = 0.0, lo = ms[0], hi = ms[0];
    for (std::size_t i = 0; i < n; ++i) sum += ms[i];
    for (std::size_t i = 0; i < n; ++i) {  // branch-free
      lo = ms[i] < lo ? ms[i] : lo;
      hi = ms[i] > hi ? ms[i] : hi;
    }
    int top = -1;  // the slowest rank, the lowest rank on ties
    for (std::size_t i = 0; i < n; ++i) {
      if (ms[i] != hi) continue;
      if (top < 0 || rank_of(cohort, col.member[i]) <
                         rank_of(cohort, col.member[static_cast<std::size_t>(top)]))
        top = static_cast<int>(i);
    }
    r.mean = sum / static_cast<double>(n);
    r.min = lo;
    r.max = hi;
    r.top = top;
    scratch_.assign(ms.begin(), ms.end());
    r.median = detail::median_inplace(scratch_.data(), scratch_.size());
    const double ref = options_.ref == Reference::mean ? r.mean : r.median;
    r.ref = ref;

    // The robust rule's extra margin; with MAD == 0 any t > median passes it.
    double mad_margin = -std::numeric_limits<double>::infinity();
    if (options_.ref == Reference::robust) {
      for (std::size_t i = 0; i < n; ++i) scratch_[i] = std::fabs(ms[i] - r.median);
      const double mad = detail::median_inplace(scratch_.data(), scratch_.size());
      if (mad > 0.0) mad_margin = options_.mad_z * kMadToSigma * mad;
    }
    if (n > 1) {
      // With ref <= 0 the relative rule says nothing: only the absolute rule applies.
      const double relative_limit =
          ref > 0.0 ? ref * options_.relative_threshold : std::numeric_limits<double>::infinity();
      const double absolute = options_.absolute_ms_threshold;
      for (std::size_t i = 0; i < n; ++i) {
        const double t = ms[i];
        const double excess = t - ref;
        // Non-short-circuit &, |: about half the ranks are above the mean, so branching on
        // each condition would mispredict; only the rare flag takes a branch.
        const bool slow =
            (t > ref) & ((t >= relative_limit) | (excess >= absolute)) & (excess >= mad_margin);
        if (LAGGARD_UNLIKELY(slow)) r.flagged.push_back(static_cast<int>(i));
      }
      std::sort(r.flagged.begin(), r.flagged.end(), [&](int a, int b) {
        return rank_of(cohort, col.member[static_cast<std::size_t>(a)]) <
               rank_of(cohort, col.member[static_cast<std::size_t>(b)]);
      });
    }
    return r;
  }

  RankFinding make_finding(const Cohort& cohort, const Column& col, const ColumnResult& r,
                           int pos) const {
    const std::size_t p = static_cast<std::size_t>(pos);
    const StepSample& s = sample_of(cohort, col.member[p]);
    RankFinding f;
    f.rank = s.rank;
    f.host = s.host;
    f.cohort = std::string(cohort.name);
    f.stage = std::string(col.name);
    f.kind = col.kind;
    f.role = col.kind == StageKind::communication ? RankFinding::Role::waiting
                                                  : RankFinding::Role::straggler;
    f.ms = col.ms[p];
    f.ref_ms = r.ref;
    f.slowdown = r.ref > 0.0 ? col.ms[p] / r.ref : 1.0;
    return f;
  }

  void hint_missing(const Cohort& cohort, const Column& col) {
    std::vector<char> present(cohort.members.size(), 0);
    for (int m : col.member) present[static_cast<std::size_t>(m)] = 1;
    std::vector<int> missing;
    for (std::size_t m = 0; m < present.size(); ++m)
      if (!present[m]) missing.push_back(rank_of(cohort, static_cast<int>(m)));
    std::sort(missing.begin(), missing.end());
    report_.hints.push_back("measured: " + ranks_phrase(missing) + cohort_suffix(cohort.name) +
                            " did not report stage '" + std::string(col.name) +
                            "'; it is evaluated over the " + std::to_string(col.ms.size()) +
                            " ranks that did");
  }

  // Hosts of the cohort's members, as small integers; computed once per cohort, when needed.
  const std::vector<int>& host_ids(const Cohort& cohort) {
    if (host_of_member_.size() == cohort.members.size()) return host_of_member_;
    host_of_member_.resize(cohort.members.size());
    host_names_.clear();
    std::unordered_map<std::string_view, int> index;
    for (std::size_t m = 0; m < cohort.members.size(); ++m) {
      std::string_view host = sample_of(cohort, static_cast<int>(m)).host;
      if (!host_names_.empty() && host_names_.back() == host) {
        host_of_member_[m] = static_cast<int>(host_names_.size()) - 1;
        continue;
      }
      auto [it, inserted] = index.emplace(host, static_cast<int>(host_names_.size()));
      if (inserted) host_names_.push_back(host);
      host_of_member_[m] = it->second;
    }
    return host_of_member_;
  }

  void group_hosts(const Cohort& cohort, const Column& col, const ColumnResult& r) {
    const std::vector<int>& host_of = host_ids(cohort);
    const std::size_t hosts = host_names_.size();
    if (hosts < 2) return;
    std::vector<int> ranks_on(hosts, 0), flagged_on(hosts, 0);
    for (int m : col.member)
      ++ranks_on[static_cast<std::size_t>(host_of[static_cast<std::size_t>(m)])];
    for (int pos : r.flagged)
      ++flagged_on[static_cast<std::size_t>(
          host_of[static_cast<std::size_t>(col.member[static_cast<std::size_t>(pos)])])];
    int hosts_with_unflagged = 0;
    for (std::size_t h = 0; h < hosts; ++h)
      if (flagged_on[h] < ranks_on[h]) ++hosts_with_unflagged;
    if (hosts_with_unflagged == 0) return;
    for (std::size_t h = 0; h < hosts; ++h) {
      // A whole host slow, while some other host has a rank at normal speed.
      if (host_names_[h].empty() || ranks_on[h] < 2 || flagged_on[h] < ranks_on[h]) continue;
      HostFinding hf;
      hf.host = std::string(host_names_[h]);
      hf.cohort = std::string(cohort.name);
      hf.stage = std::string(col.name);
      std::vector<double> slowdowns;
      for (int pos : r.flagged) {
        const std::size_t p = static_cast<std::size_t>(pos);
        if (host_of[static_cast<std::size_t>(col.member[p])] != static_cast<int>(h)) continue;
        hf.ranks.push_back(rank_of(cohort, col.member[p]));
        slowdowns.push_back(r.ref > 0.0 ? col.ms[p] / r.ref : 1.0);
      }
      std::sort(hf.ranks.begin(), hf.ranks.end());
      hf.slowdown = detail::median_inplace(slowdowns.data(), slowdowns.size());
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
    int shortest = 0;  // position in the column
    for (std::size_t i = 1; i < col.ms.size(); ++i) {
      const double t = col.ms[i];
      const double best = col.ms[static_cast<std::size_t>(shortest)];
      if (t < best ||
          (t == best && rank_of(cohort, col.member[i]) <
                            rank_of(cohort, col.member[static_cast<std::size_t>(shortest)])))
        shortest = static_cast<int>(i);
    }
    const int shortest_rank = rank_of(cohort, col.member[static_cast<std::size_t>(shortest)]);
    int longest = -1;  // member with the longest own (non-communication) work
    for (std::size_t m = 0; m < own_work_.size(); ++m) {
      const int rank = rank_of(cohort, static_cast<int>(m));
      if (longest < 0 || own_work_[m] > own_work_[static_cast<std::size_t>(longest)] ||
          (own_work_[m] == own_work_[static_cast<std::size_t>(longest)] &&
           rank < rank_of(cohort, longest)))
        longest = static_cast<int>(m);
    }
    const int longest_rank = rank_of(cohort, longest);

    std::vector<int> waiting;
    double least_excess = std::numeric_limits<double>::infinity();
    for (int pos : r.flagged) {
      const std::size_t p = static_cast<std::size_t>(pos);
      waiting.push_back(rank_of(cohort, col.member[p]));
      least_excess = std::min(least_excess, col.ms[p] - col.ms[static_cast<std::size_t>(shortest)]);
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
    host_of_member_.clear();
    if (members == 1)
      report_.hints.push_back("only one rank in cohort " + cohort_label(cohort.name) +
                              ": nothing to compare");

    // Own work per member: everything but communication.
    own_work_.assign(members, 0.0);
    capped_work_.assign(members, 0.0);
    std::vector<ColumnResult> results;
    results.reserve(cohort.stages.size());
    for (const Column& col : cohort.stages) {
      results.push_back(evaluate_column(cohort, col));
      if (col.kind == StageKind::communication) continue;
      const double ref = results.back().ref;
      const double* ms = col.ms.data();
      if (col.ms.size() == members) {  // every member reported it: entry i is member i
        for (std::size_t m = 0; m < members; ++m) {
          own_work_[m] += ms[m];
          capped_work_[m] += std::min(ms[m], ref);
        }
      } else {
        for (std::size_t i = 0; i < col.ms.size(); ++i) {
          const std::size_t m = static_cast<std::size_t>(col.member[i]);
          own_work_[m] += ms[i];
          capped_work_[m] += std::min(ms[i], ref);
        }
      }
    }

    for (std::size_t s = 0; s < cohort.stages.size(); ++s) {
      const Column& col = cohort.stages[s];
      const ColumnResult& r = results[s];
      if (col.ms.size() < members) hint_missing(cohort, col);
      if (!r.flagged.empty()) {
        auto& out = col.kind == StageKind::communication ? report_.waiting : report_.stragglers;
        for (int pos : r.flagged) out.push_back(make_finding(cohort, col, r, pos));
        if (col.kind == StageKind::communication)
          hint_waiting(cohort, col, r);
        else
          group_hosts(cohort, col, r);
        const double gap = r.max - r.ref;
        if (gap > best_gap) {
          best_gap = gap;
          report_.likely_bottleneck = std::string(col.name);
        }
      }
    }

    // What-if: the slowest rank's own work, against the same with every time capped at the
    // reference. Communication is left out: the wait vanishes when nobody is slow.
    if (members > 0) {
      const double total = *std::max_element(own_work_.begin(), own_work_.end());
      const double capped = *std::max_element(capped_work_.begin(), capped_work_.end());
      report_.whatif_step_saving_ms =
          std::max(report_.whatif_step_saving_ms, std::max(0.0, total - capped));
    }

    for (std::size_t s = 0; s < cohort.stages.size(); ++s) {
      Column& col = cohort.stages[s];
      ColumnResult& r = results[s];
      StageFigures f;
      f.cohort = std::string(cohort.name);
      f.stage = std::string(col.name);
      f.kind = col.kind;
      f.ranks = static_cast<int>(col.ms.size());
      f.ref_ms = r.ref;
      f.mean_ms = r.mean;
      f.median_ms = r.median;
      f.min_ms = r.min;
      f.max_ms = r.max;
      f.slowdown_ratio = r.ref > 0.0 ? r.max / r.ref : 1.0;
      f.relative_score = (r.ref > 0.0 && r.max > r.ref) ? r.ref / r.max : 1.0;
      f.top_rank = rank_of(cohort, col.member[static_cast<std::size_t>(r.top)]);
      f.num_stragglers = static_cast<int>(r.flagged.size());
      f.flagged_ranks.reserve(r.flagged.size());
      for (int pos : r.flagged)
        f.flagged_ranks.push_back(rank_of(cohort, col.member[static_cast<std::size_t>(pos)]));
      if (col.ms.size() == members)
        f.rank_ids = cohort.ranks;  // entry i is member i
      else {
        for (int& m : col.member) m = rank_of(cohort, m);  // members become ranks, in place
        f.rank_ids = std::move(col.member);
      }
      f.rank_ms = std::move(col.ms);
      report_.stages.push_back(std::move(f));
    }
  }

  const std::vector<StepSample>& samples_;
  const DetectorOptions& options_;
  Report& report_;
  std::vector<Cohort> cohorts_;
  std::vector<double> scratch_;
  std::vector<double> own_work_, capped_work_;
  std::vector<int> host_of_member_;
  std::vector<std::string_view> host_names_;
};

}  // namespace

Report evaluate_window(const Window& window, const DetectorOptions& options) {
  options.validate();
  Report report;
  report.step = window.step;
  WindowEvaluator(window, options, report).run();
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
}  // namespace

Detector::Detector(DetectorOptions options) : options_(options) { options_.validate(); }

Report Detector::observe(const Window& window) {
  Report report = evaluate_window(window, options_);
  ++windows_;
  const std::uint32_t mask =
      options_.confirm_n >= 32 ? ~std::uint32_t{0} : (std::uint32_t{1} << options_.confirm_n) - 1u;
  auto in_range = [](int rank) { return rank >= 0 && rank < kMaxTrackedRank; };

  std::string key;
  auto histories = [&](const std::string& cohort, const std::string& stage) {
    key.assign(cohort);
    key += '\x1f';
    key += stage;
    return &history_[key];
  };

  for (const StageFigures& f : report.stages) {
    std::vector<History>& hist = *histories(f.cohort, f.stage);
    for (int rank : f.rank_ids) {
      if (!in_range(rank)) continue;
      if (static_cast<std::size_t>(rank) >= hist.size())
        hist.resize(static_cast<std::size_t>(rank) + 1);
      History& h = hist[static_cast<std::size_t>(rank)];
      h.bits <<= 1;
      ++h.seen;
      if (h.confirmed_index >= 0)
        confirmed_[static_cast<std::size_t>(h.confirmed_index)].windows_seen = h.seen;
    }
    for (int rank : f.flagged_ranks) {
      if (!in_range(rank)) continue;
      History& h = hist[static_cast<std::size_t>(rank)];
      h.bits |= 1u;
      ++h.flagged;
      if (h.first_flagged_step < 0) h.first_flagged_step = window.step;
    }
  }

  // Findings come grouped by (cohort, stage): look each group up once.
  const std::string* last_cohort = nullptr;
  const std::string* last_stage = nullptr;
  std::vector<History>* hist = nullptr;
  auto fill = [&](RankFinding& f) -> History* {
    if (!last_cohort || *last_cohort != f.cohort || *last_stage != f.stage) {
      hist = histories(f.cohort, f.stage);
      last_cohort = &f.cohort;
      last_stage = &f.stage;
    }
    if (!in_range(f.rank) || static_cast<std::size_t>(f.rank) >= hist->size()) return nullptr;
    History& h = (*hist)[static_cast<std::size_t>(f.rank)];
    f.windows_flagged = h.flagged;
    f.confirmed = popcount(h.bits & mask) >= options_.confirm_k;  // flagged in the last n
    return &h;
  };
  for (RankFinding& f : report.waiting) fill(f);
  last_cohort = last_stage = nullptr;
  for (RankFinding& f : report.stragglers) {
    History* h = fill(f);
    if (!h) continue;
    if (h->confirmed_index >= 0) {
      Confirmed& c = confirmed_[static_cast<std::size_t>(h->confirmed_index)];
      c.finding = f;
      c.windows_seen = h->seen;
      c.slowdowns.push_back(f.slowdown);
    } else if (f.confirmed) {
      h->confirmed_index = static_cast<int>(confirmed_.size());
      Confirmed c;
      c.finding = f;
      c.first_confirmed_step = window.step;
      c.first_flagged_step = h->first_flagged_step;
      c.windows_seen = h->seen;
      c.slowdowns.push_back(f.slowdown);
      confirmed_.push_back(std::move(c));
    }
  }
  return report;
}

}  // namespace laggard
