// Scale bisection: runs of one job at several world sizes, each compared with the baseline size
// stage by stage (compare_runs: noise-aware REGRESSED / SAME / UNKNOWN), the first regressed size
// and stage found in size order then pipeline order, and the next size to try.
#include "laggard/scale.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

namespace laggard {

const char* to_string(Scaling scaling) noexcept {
  switch (scaling) {
    case Scaling::weak:
      return "weak";
    case Scaling::strong:
      return "strong";
    case Scaling::work:
      return "work";
  }
  return "weak";
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Least-squares slope of log(y) over log(x).
double log_slope(const std::vector<std::pair<double, double>>& xy) {
  if (xy.size() < 2) return kNaN;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : xy) {
    if (!(x > 0) || !(y > 0)) return kNaN;
    const double lx = std::log(x), ly = std::log(y);
    sx += lx;
    sy += ly;
    sxx += lx * lx;
    sxy += lx * ly;
  }
  const double n = static_cast<double>(xy.size());
  const double d = n * sxx - sx * sx;
  return d > 0 ? (n * sxy - sx * sy) / d : kNaN;
}

bool is_power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

ScaleResult scale_runs(std::vector<ScaleRun> runs, int baseline_size,
                       const CompareOptions& options) {
  options.validate();
  if (runs.size() < 2)
    throw std::invalid_argument("scale needs runs at two or more world sizes, got " +
                                std::to_string(runs.size()));
  std::sort(runs.begin(), runs.end(),
            [](const ScaleRun& a, const ScaleRun& b) { return a.world_size < b.world_size; });
  for (std::size_t i = 1; i < runs.size(); ++i)
    if (runs[i].world_size == runs[i - 1].world_size)
      throw std::invalid_argument(runs[i - 1].name + " and " + runs[i].name +
                                  " have the same world size (" +
                                  std::to_string(runs[i].world_size) +
                                  "): give one run per size");
  ScaleResult out;
  out.options = options;
  out.baseline_size = baseline_size > 0 ? baseline_size : runs.front().world_size;
  std::size_t base = runs.size();
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (runs[i].world_size == out.baseline_size) base = i;
  if (base == runs.size()) {
    std::string sizes;
    for (const auto& r : runs) sizes += (sizes.empty() ? "" : ", ") + std::to_string(r.world_size);
    throw std::invalid_argument("no run has the baseline size " +
                                std::to_string(out.baseline_size) + " (sizes: " + sizes + ")");
  }

  // Every size against the baseline.
  std::vector<Comparison> cmp(runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (i != base) cmp[i] = compare_runs(runs[base].profile, runs[i].profile, options);

  // Stages: the baseline's, in its pipeline order; a stage's point at a size where it exists.
  const auto series = runs[base].profile.ordered_series();
  for (const RunProfile::Series* s : series) {
    ScaleStage st;
    st.cohort = s->cohort;
    st.stage = s->stage;
    st.kind = s->kind;
    out.stages.push_back(std::move(st));
  }
  const auto fill = [&](ScaleStage& st, bool step_time) {
    std::vector<std::pair<double, double>> xy;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const StageComparison* c = nullptr;
      if (i != base) {
        if (step_time) {
          c = &cmp[i].step_time;
        } else {
          for (const auto& x : cmp[i].stages)
            if (x.stage == st.stage && x.cohort == st.cohort) c = &x;
          if (!c) continue;
        }
      }
      ScalePoint p;
      p.world_size = runs[i].world_size;
      if (c) {
        p.ms = c->current_ms;
        p.ratio = c->ratio;
        p.ci_low = c->ci_low;
        p.ci_high = c->ci_high;
        p.verdict = c->verdict;
        p.reason = c->reason;
      } else {
        // The baseline: its figure from any comparison (all share it).
        for (std::size_t j = 0; j < runs.size(); ++j) {
          if (j == base) continue;
          const StageComparison* b = nullptr;
          if (step_time) {
            b = &cmp[j].step_time;
          } else {
            for (const auto& x : cmp[j].stages)
              if (x.stage == st.stage && x.cohort == st.cohort) b = &x;
          }
          if (b) {
            p.ms = b->baseline_ms;
            break;
          }
        }
        p.ratio = 1.0;
        p.ci_low = p.ci_high = 1.0;
        p.verdict = Verdict::same;
        p.reason = "baseline";
      }
      xy.emplace_back(static_cast<double>(p.world_size), p.ms);
      if (p.verdict == Verdict::regressed && st.first_regressed_size == 0 && i != base)
        st.first_regressed_size = p.world_size;
      st.points.push_back(std::move(p));
    }
    st.growth = log_slope(xy);
  };
  for (ScaleStage& st : out.stages) fill(st, false);
  out.step_time.stage = "step time";
  out.step_time.kind = StageKind::other;
  fill(out.step_time, true);

  // The first regression: sizes in ascending order, then stages in pipeline order.
  for (std::size_t i = 0; i < runs.size() && out.first_regression_size == 0; ++i) {
    if (i == base) continue;
    for (std::size_t s = 0; s < out.stages.size(); ++s) {
      const auto& pts = out.stages[s].points;
      const auto it = std::find_if(pts.begin(), pts.end(), [&](const ScalePoint& p) {
        return p.world_size == runs[i].world_size;
      });
      if (it != pts.end() && it->verdict == Verdict::regressed) {
        out.first_regression_size = runs[i].world_size;
        out.origin_stage = static_cast<int>(s);
        break;
      }
    }
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (i == base) continue;
    for (const auto& st : out.stages)
      for (const auto& p : st.points)
        if (p.world_size == runs[i].world_size && p.verdict == Verdict::unknown &&
            (out.unknown_sizes.empty() || out.unknown_sizes.back() != p.world_size))
          out.unknown_sizes.push_back(p.world_size);
  }

  // Hosts: the first size spanning more than one, and how many ranks a host holds.
  for (const ScaleRun& r : runs) {
    if (r.hosts > 1 && out.first_multi_host_size == 0) out.first_multi_host_size = r.world_size;
    if (r.hosts == 1) out.ranks_per_host = std::max(out.ranks_per_host, r.ranks);
  }
  if (out.ranks_per_host == 0)
    for (const ScaleRun& r : runs)
      if (r.hosts > 1 && r.ranks % r.hosts == 0) {
        out.ranks_per_host = r.ranks / r.hosts;
        break;
      }
  out.first_multi_host =
      out.first_regression_size > 0 && out.first_regression_size == out.first_multi_host_size;

  // Where to look next.
  const int largest = runs.back().world_size;
  if (out.first_regression_size == 0) {
    int next = largest * 2;
    std::string why = "no stage regressed up to " + std::to_string(largest) + " ranks";
    if (out.first_multi_host_size == 0 && out.ranks_per_host > 0 &&
        2 * out.ranks_per_host > largest) {
      next = 2 * out.ranks_per_host;
      why += ", all on one host: try " + std::to_string(next) +
             ", the smallest size spanning two hosts (" + std::to_string(out.ranks_per_host) +
             " ranks per host)";
    } else {
      why += ": try " + std::to_string(next);
    }
    out.next_sizes = {next};
    out.next_reason = why;
  } else {
    int low = 0;
    for (const ScaleRun& r : runs)
      if (r.world_size < out.first_regression_size) low = r.world_size;
    out.bracket_low = low;
    const int high = out.first_regression_size;
    const int two_hosts = out.ranks_per_host > 0 ? 2 * out.ranks_per_host : 0;
    if (low == 0) {
      out.next_reason = "it regressed at the smallest size compared";
    } else if (two_hosts > low && two_hosts < high && out.first_multi_host_size == high) {
      out.next_sizes = {two_hosts};
      out.next_reason = "no regression at " + std::to_string(low) + ", REGRESSED at " +
                        std::to_string(high) + ": try " + std::to_string(two_hosts) +
                        ", the smallest size spanning two hosts (" +
                        std::to_string(out.ranks_per_host) + " ranks per host)";
    } else {
      std::vector<int> between;
      for (int v = 1; v < high; v *= 2)
        if (v > low && is_power_of_two(v)) between.push_back(v);
      if (between.empty()) {
        out.next_reason = "bracketed: no regression at " + std::to_string(low) + ", REGRESSED at " +
                          std::to_string(high);
      } else {
        const int mid = between[(between.size() - 1) / 2];
        out.next_sizes = {mid};
        out.next_reason = "no regression at " + std::to_string(low) + ", REGRESSED at " +
                          std::to_string(high) + ": try " + std::to_string(mid) +
                          " (bisecting the powers of two between)";
      }
    }
  }
  out.runs = std::move(runs);
  return out;
}

}  // namespace laggard
