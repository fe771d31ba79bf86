// laggard — the threshold method (docs/detection.md, "The threshold method") and the per-window
// flags both methods start from ("Per-window flags"): evaluate_window, its columns and rules
// (WindowEvaluator), and the threshold method's k-of-n confirmation (Detector::observe_threshold).
#include "laggard/detector.hpp"

#include "analysis/column_kernels.hpp"
#include "analysis/detector_internal.hpp"
#include "analysis/detector_wording.hpp"
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

using namespace detector_detail;

// ---------------------------------------------------------------------------------------------
// One window

namespace {

using Column = ColumnarWindow::Column;

// A column every member reported, added to each member's own work and to its work capped at the
// reference: the same additions, in the same order, as a loop per member; compiled for AVX2 as
// well where the toolchain can pick at load time (no FMA: each lane computes what SSE2 does).
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(LAGGARD_NO_CLONES)
__attribute__((target_clones("avx2", "default")))
#endif
void add_work(std::size_t n, const double* __restrict ms, double ref, double* __restrict own,
              double* __restrict capped) {
  for (std::size_t m = 0; m < n; ++m) {
    own[m] += ms[m];
    capped[m] += std::min(ms[m], ref);
  }
}

// One cohort of the window as the evaluator reads it: the window's per-member arrays, and its
// columns with the untimed one the evaluator adds.
struct Cohort {
  std::string_view name;
  std::size_t size = 0;  // members
  const int* ranks = nullptr;
  const std::string* hosts = nullptr;
  const double* step_ms = nullptr;
  const double* untimed_ms = nullptr;
  bool ranks_ascending = true;  // ranks[m] <= ranks[m + 1]: columns are in rank order
  std::vector<Column*> stages;  // mutated only where the evaluator may take their times
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
  Cohort cohort;
  Column untimed;  // the cohort's untimed column, when it has one
  std::vector<double> scratch;
  std::vector<double> own_work, capped_work;
  std::vector<int> host_of_member;
  std::vector<int> host_size;             // members per host
  std::vector<int> flagged_on, ranks_on;  // per host, for group_hosts
  std::vector<std::string_view> host_names;
  std::vector<ColumnResult> results;
  // evaluate_window(const Window&): the window turned into columns.
  ColumnarWindow columns;
};

Workspace& thread_workspace() {
  thread_local Workspace workspace;
  return workspace;
}

class WindowEvaluator {
 public:
  // `take_times`: the window's columns are the caller's scratch, and their times' buffers may be
  // traded for the report's (no copy of the per-rank times into StageFigures::rank_ms).
  WindowEvaluator(const ColumnarWindow& window, const DetectorOptions& options, Report& report,
                  Workspace& ws, bool take_times)
      : window_(window), options_(options), report_(report), ws_(ws), take_times_(take_times) {}

  void run() {
    reset_report();
    report_.world_size = window_.world_size();
    report_.ranks_seen = window_.distinct_ranks();
    double best_gap = 0.0;
    for (std::size_t c = 0; c < window_.cohort_count(); ++c) {
      Cohort& cohort = view(window_.cohort(c));
      add_untimed(cohort);
      evaluate_cohort(cohort, best_gap);
    }
    report_.stages.resize(figures_used_);
    report_.stragglers.resize(stragglers_used_);
    report_.waiting.resize(waiting_used_);
  }

 private:
  // Empties the report, keeping the storage of its stage figures and findings for this window
  // (the findings themselves too: next_finding reuses them, strings and all).
  void reset_report() {
    const std::int64_t step = report_.step;
    std::vector<StageFigures> stages = std::move(report_.stages);
    std::vector<RankFinding> stragglers = std::move(report_.stragglers);
    std::vector<RankFinding> waiting = std::move(report_.waiting);
    report_ = Report{};
    report_.step = step;
    report_.stages = std::move(stages);
    report_.stragglers = std::move(stragglers);
    report_.waiting = std::move(waiting);
    figures_used_ = 0;
    stragglers_used_ = 0;
    waiting_used_ = 0;
  }

  Cohort& view(const ColumnarWindow::Cohort& data) {
    Cohort& c = ws_.cohort;
    c.name = data.name;
    c.size = data.members;
    c.ranks = data.ranks.data();
    c.hosts = data.hosts.data();
    c.step_ms = data.step_ms.data();
    c.untimed_ms = data.untimed_ms.data();
    c.ranks_ascending = data.ranks_ascending;
    c.stages.clear();
    for (std::size_t p = 0; p < data.used; ++p)
      c.stages.push_back(const_cast<Column*>(&data.columns[p]));
    return c;
  }

  // The part of each member's step_ms that no stage covers, as a stage of kind `other` (unless a
  // stage of that name was reported). Members without a step time are left out. Stages nested in
  // others (module stages inside forward) make the sum too large: the value is clamped at 0.
  // Added only when some member has untimed time. The values come with the window's columns.
  void add_untimed(Cohort& cohort) {
    for (const Column* col : cohort.stages)
      if (same_name(col->name, kUntimedStage)) return;
    const std::size_t members = cohort.size;
    const double* values = cohort.untimed_ms;
    bool any = false;
    for (std::size_t m = 0; m < members; ++m) any |= values[m] > 0.0;
    if (!any) return;
    Column& col = ws_.untimed;
    col.count = 0;
    for (std::size_t m = 0; m < members; ++m) {
      if (values[m] < 0.0) continue;
      if (col.count == 0) {
        col.name.assign(kUntimedStage);
        col.kind = StageKind::other;
        col.dense = m == 0;
        if (col.ms.size() < members) col.ms.resize(members);
        if (!col.dense && col.member.size() < members) col.member.resize(members);
        cohort.stages.push_back(&col);
      }
      if (col.dense && col.count != m) {  // a member without a step time: entries name theirs
        if (col.member.size() < members) col.member.resize(members);
        for (std::size_t i = 0; i < col.count; ++i) col.member[i] = static_cast<int>(i);
        col.dense = false;
      }
      if (!col.dense) col.member[col.count] = static_cast<int>(m);
      col.ms[col.count++] = values[m];
    }
  }

  static int rank_of(const Cohort& cohort, int member) {
    return cohort.ranks[static_cast<std::size_t>(member)];
  }
  int rank_at(const Cohort& cohort, const Column& col, std::size_t i) const {
    return rank_of(cohort, col.member_at(i));
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
    bool sorted = false;  // ws_.scratch[0, n) holds the column sorted (read by the MAD below)
    r.median = detail::median_of(ms, n, ws_.scratch, sorted);
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
        const double* column = ws_.scratch.data();
        const double mad =
            sorted && std::isfinite(column[0]) && std::isfinite(column[n - 1]) &&
                    std::isfinite(r.median)
                ? detail::median_abs_deviation_sorted(column, n, r.median)
                : detail::median_abs_deviation(ms, n, r.median, ws_.scratch);
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
    const std::size_t m = static_cast<std::size_t>(col.member_at(p));
    f.rank = cohort.ranks[m];
    set_text(f.host, cohort.hosts[m]);
    set_text(f.cohort, cohort.name);
    set_text(f.stage, col.name);
    f.kind = col.kind;
    f.role = col.kind == StageKind::communication ? RankFinding::Role::waiting
                                                  : RankFinding::Role::straggler;
    f.ms = col.ms[p];
    f.ref_ms = r.ref;
    f.slowdown = r.ref > 0.0 ? col.ms[p] / r.ref : 1.0;
    set_cost(f, cohort_step_);
  }

  void hint_missing(const Cohort& cohort, const Column& col) {
    std::vector<char> present(cohort.size, 0);
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
    host_of_member.resize(cohort.size);
    host_names.clear();
    std::unordered_map<std::string_view, int> index;
    for (std::size_t m = 0; m < cohort.size; ++m) {
      std::string_view host = cohort.hosts[m];
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
    const bool dense = col.count == cohort.size;
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
    int longest = -1;  // member with the longest own (non-communication) work
    if (cohort.ranks_ascending) {
      // (The usual case) the first position holding the least time, the first member holding
      // the most own work: the lowest rank among equals, as the loops below pick.
      shortest = detail::first_equal(col.ms.data(), col.count, r.min);
      double most = own_work.empty() ? 0.0 : own_work[0];
      for (std::size_t m = 1; m < cohort.size; ++m) most = own_work[m] > most ? own_work[m] : most;
      longest = static_cast<int>(detail::first_equal(own_work.data(), cohort.size, most));
    }
    if (!cohort.ranks_ascending || shortest >= col.count ||
        static_cast<std::size_t>(longest) >= cohort.size) {
      shortest = 0;
      for (std::size_t i = 1; i < col.count; ++i) {
        const double t = col.ms[i];
        const double best = col.ms[shortest];
        if (t < best || (t == best && rank_at(cohort, col, i) < rank_at(cohort, col, shortest)))
          shortest = i;
      }
      longest = -1;
      for (std::size_t m = 0; m < cohort.size; ++m) {
        const int rank = rank_of(cohort, static_cast<int>(m));
        if (longest < 0 || own_work[m] > own_work[static_cast<std::size_t>(longest)] ||
            (own_work[m] == own_work[static_cast<std::size_t>(longest)] &&
             rank < rank_of(cohort, longest)))
          longest = static_cast<int>(m);
      }
    }
    const int shortest_rank = rank_at(cohort, col, shortest);
    const int longest_rank = rank_of(cohort, longest);

    std::vector<int> waiting;
    waiting.reserve(r.flagged.size());
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
    const std::size_t members = cohort.size;
    const std::size_t stages = cohort.stages.size();
    hosts_known_ = false;
    // The step time the findings' costs are shares of: the cohort's median (a straggler lengthens
    // every rank's step_ms alike in a synchronous job, so the median is the job's step).
    cohort_step_ = members > 0 ? detail::median_of(cohort.step_ms, members, ws_.scratch) : 0.0;
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
      const Column& col = *cohort.stages[s];
      evaluate_column(cohort, col, results[s]);
      if (col.kind == StageKind::communication) continue;
      const double ref = results[s].ref;
      const double* ms = col.ms.data();
      if (col.count == members) {  // every member reported it: entry i is member i
        add_work(members, ms, ref, own_work.data(), capped_work.data());
      } else {
        for (std::size_t i = 0; i < col.count; ++i) {
          const std::size_t m = static_cast<std::size_t>(col.member_at(i));
          own_work[m] += ms[i];
          capped_work[m] += std::min(ms[i], ref);
        }
      }
    }

    for (std::size_t s = 0; s < stages; ++s) {
      const Column& col = *cohort.stages[s];
      const ColumnResult& r = results[s];
      if (col.count < members) hint_missing(cohort, col);
      if (!r.flagged.empty()) {
        const bool waits = col.kind == StageKind::communication;
        for (int pos : r.flagged) fill_finding(next_finding(waits), cohort, col, r, pos);
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
      Column& col = *cohort.stages[s];
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
        f.rank_ids.assign(cohort.ranks, cohort.ranks + members);  // entry i is member i
      } else {
        f.rank_ids.resize(col.count);
        for (std::size_t i = 0; i < col.count; ++i) f.rank_ids[i] = rank_at(cohort, col, i);
      }
      if (f.rank_ms.capacity() >= members && (take_times_ || &col == &ws_.untimed)) {
        // A report reused from an earlier window and a column of the evaluator's own: trade
        // buffers with the column instead of copying (the column takes the report's old one for
        // the next window).
        f.rank_ms.swap(col.ms);
        f.rank_ms.resize(col.count);
        col.ms.resize(std::max(col.ms.size(), members));
      } else {
        f.rank_ms.assign(col.ms.begin(), col.ms.begin() + static_cast<std::ptrdiff_t>(col.count));
      }
    }
  }

  // The next finding of report_.waiting (`waits`) or report_.stragglers: one left from the
  // report's previous window when there is one (its strings keep their storage; at thousands of
  // waiting ranks constructing each afresh showed), with the fields fill_finding does not set
  // reset to their defaults.
  RankFinding& next_finding(bool waits) {
    std::vector<RankFinding>& all = waits ? report_.waiting : report_.stragglers;
    std::size_t& used = waits ? waiting_used_ : stragglers_used_;
    if (used == all.size()) {
      ++used;
      return all.emplace_back();
    }
    RankFinding& f = all[used++];
    f.windows_flagged = 0;
    f.confirmed = false;
    f.evidence = 0.0;
    return f;
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

  const ColumnarWindow& window_;
  const DetectorOptions& options_;
  Report& report_;
  Workspace& ws_;
  bool take_times_;
  bool hosts_known_ = false;  // ws_.host_of_member holds the current cohort's hosts
  double cohort_step_ = 0.0;  // the current cohort's step time (StageFigures::step_ms)
  std::size_t figures_used_ = 0;  // report_.stages in use; the rest are left from before
  std::size_t stragglers_used_ = 0, waiting_used_ = 0;  // the same for the findings
};

}  // namespace

namespace detector_detail {

void evaluate_columns(const ColumnarWindow& window, const DetectorOptions& options, Report& out,
                      bool take_times) {
  options.validate();
  out.step = window.step();
  WindowEvaluator(window, options, out, thread_workspace(), take_times).run();
}

}  // namespace detector_detail

void evaluate_window(const ColumnarWindow& window, const DetectorOptions& options, Report& out) {
  evaluate_columns(window, options, out, false);
}

void evaluate_window(const Window& window, const DetectorOptions& options, Report& out) {
  ColumnarWindow& columns = thread_workspace().columns;
  columns.assign(window);
  evaluate_columns(columns, options, out, true);
}

Report evaluate_window(const Window& window, const DetectorOptions& options) {
  Report report;
  evaluate_window(window, options, report);
  return report;
}

void Detector::observe_threshold(const ColumnarWindow& window, Report& report) {
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
      if (h.first_flagged_step < 0) h.first_flagged_step = window.step();
    }
  }

  // Findings come grouped by (cohort, stage): look each group up once. Every finding's rank
  // was flagged in this window, so its history is settled.
  const std::string* last_cohort = nullptr;
  const std::string* last_stage = nullptr;
  Track* track = nullptr;
  auto fill = [&](RankFinding& f) -> History* {
    if (!last_cohort || !same_name(*last_cohort, f.cohort) || !same_name(*last_stage, f.stage)) {
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
      publish(f, h->episode, window.step(), h->first_flagged_step, key);
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
}  // namespace laggard
