// What the run report draws beyond RunSummary (laggard/html_report.hpp's RunReportData),
// gathered window by window in memory bounded by ranks × stages, and the streaming median it
// keeps per (rank, stage).
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "laggard/html_report.hpp"
#include "sinks/html/format.hpp"

namespace laggard {

using html::kNaN;

// ---- StreamingMedian (P²) --------------------------------------------------------------------

void StreamingMedian::add(double x) noexcept {
  if (!std::isfinite(x)) return;
  if (count_ < 5) {
    int i = count_;
    while (i > 0 && q_[i - 1] > x) {
      q_[i] = q_[i - 1];
      --i;
    }
    q_[i] = x;
    ++count_;
    return;
  }
  int k = 0;
  if (x < q_[0]) {
    q_[0] = x;
  } else if (x >= q_[4]) {
    q_[4] = x;
    k = 3;
  } else {
    while (k < 3 && x >= q_[k + 1]) ++k;
  }
  for (int i = k + 1; i < 5; ++i) ++n_[i];
  ++count_;
  static constexpr double kFraction[5] = {0.0, 0.25, 0.5, 0.75, 1.0};
  for (int i = 1; i <= 3; ++i) {
    const double desired = 1.0 + (count_ - 1) * kFraction[i];
    const double d = desired - n_[i];
    if ((d >= 1.0 && n_[i + 1] - n_[i] > 1) || (d <= -1.0 && n_[i - 1] - n_[i] < -1)) {
      const int s = d > 0 ? 1 : -1;
      const double np = n_[i + 1], nm = n_[i - 1], ni = n_[i];
      // Piecewise-parabolic prediction of the marker height; linear if it would leave order.
      const double parabolic = q_[i] + s / (np - nm) *
                                           ((ni - nm + s) * (q_[i + 1] - q_[i]) / (np - ni) +
                                            (np - ni - s) * (q_[i] - q_[i - 1]) / (ni - nm));
      if (q_[i - 1] < parabolic && parabolic < q_[i + 1])
        q_[i] = parabolic;
      else
        q_[i] += s * (q_[i + s] - q_[i]) / (n_[i + s] - n_[i]);
      n_[i] += s;
    }
  }
}

double StreamingMedian::value() const noexcept {
  if (count_ == 0) return kNaN;
  if (count_ >= 5) return q_[2];
  return count_ % 2 ? q_[count_ / 2] : 0.5 * (q_[count_ / 2 - 1] + q_[count_ / 2]);
}

// ---- RunReportData ---------------------------------------------------------------------------

RunReportData::RunReportData(std::size_t max_points)
    : max_points_(std::max<std::size_t>(max_points, 16)) {}

const std::string& RunReportData::host_of(int rank) const noexcept {
  static const std::string kEmpty;
  return rank >= 0 && static_cast<std::size_t>(rank) < host_.size()
             ? host_[static_cast<std::size_t>(rank)]
             : kEmpty;
}

const std::string& RunReportData::cohort_of(int rank) const noexcept {
  static const std::string kEmpty;
  return rank >= 0 && static_cast<std::size_t>(rank) < cohort_.size()
             ? cohort_[static_cast<std::size_t>(rank)]
             : kEmpty;
}

std::uint32_t RunReportData::stage_index(const std::string& name, StageKind kind,
                                         std::uint32_t previous) {
  // A hash lookup and a link, not a scan and a vector insert: tens of thousands of distinct stage
  // names made both quadratic (32k names: 22 s to write the report).
  const auto [it, fresh] =
      stage_of_name_.emplace(name, static_cast<std::uint32_t>(stages_.size()));
  if (!fresh) return it->second;
  const std::uint32_t index = it->second;
  stages_.push_back(Stage{name, kind});
  slot_.emplace_back();
  // A new stage goes right after the stage it follows (pipeline order across cohorts).
  if (previous == kNone) {
    next_stage_.push_back(first_stage_);
    first_stage_ = index;
  } else {
    next_stage_.push_back(next_stage_[previous]);
    next_stage_[previous] = index;
  }
  return index;
}

std::vector<std::uint32_t> RunReportData::pipeline_order() const {
  std::vector<std::uint32_t> order;
  order.reserve(stages_.size());
  for (std::uint32_t i = first_stage_; i != kNone && order.size() < stages_.size();
       i = next_stage_[i])
    order.push_back(i);
  return order;
}

RunReportData::Cell* RunReportData::cell(std::size_t stage, int rank) {
  if (rank < 0 || rank >= (1 << 22)) return nullptr;
  auto& slots = slot_[stage];
  if (static_cast<std::size_t>(rank) >= slots.size())
    slots.resize(static_cast<std::size_t>(rank) + 1, -1);
  std::int32_t& s = slots[static_cast<std::size_t>(rank)];
  if (s < 0) {
    s = static_cast<std::int32_t>(cells_.size());
    Cell c;
    c.rank = rank;
    c.stage = static_cast<std::uint32_t>(stage);
    cells_.push_back(c);
  }
  return &cells_[static_cast<std::size_t>(s)];
}

void RunReportData::add(const Window& window, const Report& report) {
  scratch_.clear();
  double slowest = 0.0;
  for (const StepSample& s : window.samples) {
    if (s.rank >= 0 && s.rank < (1 << 22)) {
      const auto r = static_cast<std::size_t>(s.rank);
      if (r >= host_.size()) {
        host_.resize(r + 1);
        cohort_.resize(r + 1);
      }
      if (host_[r] != s.host) host_[r] = s.host;
      if (cohort_[r] != s.cohort) cohort_[r] = s.cohort;
    }
    slowest = std::max(slowest, s.step_ms);
    scratch_.push_back(s.step_ms);
  }
  if (!scratch_.empty()) {
    const auto mid = scratch_.begin() + static_cast<std::ptrdiff_t>(scratch_.size() / 2);
    std::nth_element(scratch_.begin(), mid, scratch_.end());
    const double median = *mid;
    if (points_.empty() || points_.back().windows >= bucket_windows_) {
      Point p;
      p.first_step = window.step;
      p.job_min = p.job_max = slowest;
      points_.push_back(p);
    }
    Point& p = points_.back();
    p.last_step = window.step;
    ++p.windows;
    p.job_sum += slowest;
    p.job_min = std::min(p.job_min, slowest);
    p.job_max = std::max(p.job_max, slowest);
    p.median_sum += median;
    if (points_.size() > max_points_) {  // merge neighbours: half the points, twice the width
      std::vector<Point> merged;
      for (std::size_t i = 0; i < points_.size(); i += 2) {
        Point a = points_[i];
        if (i + 1 < points_.size()) {
          const Point& b = points_[i + 1];
          a.last_step = b.last_step;
          a.windows += b.windows;
          a.job_sum += b.job_sum;
          a.median_sum += b.median_sum;
          a.job_min = std::min(a.job_min, b.job_min);
          a.job_max = std::max(a.job_max, b.job_max);
        }
        merged.push_back(a);
      }
      points_.swap(merged);
      bucket_windows_ *= 2;
    }
  }

  std::uint32_t previous = kNone;
  const std::string* previous_cohort = nullptr;
  for (const StageFigures& st : report.stages) {
    if (previous_cohort && *previous_cohort != st.cohort) previous = kNone;
    const std::uint32_t stage = stage_index(st.stage, st.kind, previous);
    previous = stage;
    previous_cohort = &st.cohort;
    if (!(st.ref_ms > 0.0)) continue;
    for (std::size_t i = 0; i < st.rank_ids.size() && i < st.rank_ms.size(); ++i) {
      Cell* c = cell(stage, st.rank_ids[i]);
      if (!c) continue;
      const double s = st.rank_ms[i] / st.ref_ms;
      c->slowdown.add(s);
      c->max_slowdown = std::max(c->max_slowdown, static_cast<float>(s));
    }
  }
  for (const auto* list : {&report.stragglers, &report.waiting})
    for (const RankFinding& f : *list) {
      const auto it = stage_of_name_.find(f.stage);
      if (it != stage_of_name_.end())
        if (Cell* c = cell(it->second, f.rank)) ++c->flagged;
    }
}

}  // namespace laggard
