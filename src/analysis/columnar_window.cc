// laggard — ColumnarWindow: a window stored by column (per cohort, one array of times per stage),
// the form the detector reads (detector_threshold.cc).
#include "laggard/columnar_window.hpp"

#include "analysis/detector_internal.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace laggard {

using detector_detail::same_name;

namespace {

// A sample's step time: its step_ms, or without one the sum of its stage times (`timed`).
double step_of(const StepSample& s, double timed) {
  return std::isfinite(s.step_ms) && s.step_ms > 0.0 ? s.step_ms : timed;
}

// The part of a sample's step_ms that its stages (`timed`, the sum of their finite times) do
// not cover, at least 0; -1 without a step time or without stages.
double untimed_of(const StepSample& s, double timed) {
  if (!(std::isfinite(s.step_ms) && s.step_ms > 0.0) || s.stages.empty()) return -1.0;
  return std::max(0.0, s.step_ms - timed);
}

constexpr std::size_t kFirstCapacity = 64;  // rows a cohort's arrays start with
constexpr std::size_t kPrefetchAhead = 4;   // samples: about the loads' latency at a sample's work

}  // namespace

void ColumnarWindow::clear(std::int64_t step) {
  step_ = step;
  samples_ = 0;
  world_size_ = 0;
  ranks_sorted_unique_ = true;
  last_rank_ = 0;
  cohorts_used_ = 0;
  last_cohort_ = 0;
  // Sizes are checked afresh (a column's buffer may have been traded for a smaller one).
  std::fill(capacity_.begin(), capacity_.end(), std::size_t{0});
}

const ColumnarWindow::Cohort* ColumnarWindow::find_cohort(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < cohorts_used_; ++i)
    if (cohorts_[i].name == name) return &cohorts_[i];
  return nullptr;
}

int ColumnarWindow::distinct_ranks() const {
  if (ranks_sorted_unique_) return static_cast<int>(samples_);
  std::vector<int> ranks;
  ranks.reserve(samples_);
  for (std::size_t c = 0; c < cohorts_used_; ++c)
    ranks.insert(ranks.end(), cohorts_[c].ranks.begin(),
                 cohorts_[c].ranks.begin() + static_cast<std::ptrdiff_t>(cohorts_[c].members));
  std::sort(ranks.begin(), ranks.end());
  return static_cast<int>(std::unique(ranks.begin(), ranks.end()) - ranks.begin());
}

ColumnarWindow::Cohort& ColumnarWindow::cohort_of(const std::string& name) {
  // Samples usually come grouped by cohort (or all in one): the one before first.
  if (last_cohort_ < cohorts_used_ && cohorts_[last_cohort_].name == name)
    return cohorts_[last_cohort_];
  for (std::size_t i = 0; i < cohorts_used_; ++i)
    if (cohorts_[i].name == name) {
      last_cohort_ = i;
      return cohorts_[i];
    }
  if (cohorts_used_ == cohorts_.size()) {
    cohorts_.emplace_back();
    capacity_.push_back(0);
    fast_.push_back(0);
  }
  last_cohort_ = cohorts_used_++;
  Cohort& c = cohorts_[last_cohort_];
  c.name.assign(name);
  c.members = 0;
  c.ranks_ascending = true;
  c.used = 0;
  fast_[last_cohort_] = 0;
  return c;
}

void ColumnarWindow::grow(Cohort& c, std::size_t& capacity, std::size_t rows) {
  capacity = std::max(rows, std::max(kFirstCapacity, 2 * capacity));
  if (c.ranks.size() < capacity) {
    c.ranks.resize(capacity);
    c.hosts.resize(capacity);
    c.step_ms.resize(capacity);
    c.untimed_ms.resize(capacity);
  }
  for (std::size_t p = 0; p < c.used; ++p) {
    Column& col = c.columns[p];
    if (col.ms.size() < capacity) col.ms.resize(capacity);
    if (!col.dense && col.member.size() < capacity) col.member.resize(capacity);
  }
}

ColumnarWindow::Column& ColumnarWindow::add_column(Cohort& c, std::size_t capacity,
                                                   const StageTime& st, std::size_t m) {
  if (c.used == c.columns.size()) c.columns.emplace_back();
  Column& col = c.columns[c.used++];
  col.name.assign(st.name);
  col.kind = st.kind;
  col.count = 0;
  col.dense = m == 0;
  if (col.ms.size() < capacity) col.ms.resize(capacity);
  if (!col.dense && col.member.size() < capacity) col.member.resize(capacity);
  return col;
}

bool ColumnarWindow::add_layout_row(Cohort& c, const StepSample& s, std::size_t m) {
  const std::size_t n = s.stages.size();
  if (n != c.used) return false;
  const StageTime* st = s.stages.data();
  Column* cols = c.columns.data();
  double sum = 0.0;
  for (std::size_t p = 0; p < n; ++p) {
    if (!same_name(cols[p].name, st[p].name) || !std::isfinite(st[p].ms)) return false;
    cols[p].ms[m] = st[p].ms;
    sum += st[p].ms;
  }
  for (std::size_t p = 0; p < n; ++p) cols[p].count = m + 1;
  c.untimed_ms[m] = untimed_of(s, sum);
  c.step_ms[m] = step_of(s, sum);
  return true;
}

// After a row went the general way: the rows that follow can take the layout when every column
// is dense and holds each of the `rows` members so far.
bool ColumnarWindow::layout_holds(const Cohort& c, std::size_t rows) {
  for (std::size_t p = 0; p < c.used; ++p)
    if (!c.columns[p].dense || c.columns[p].count != rows) return false;
  return c.used > 0;
}

void ColumnarWindow::add(const StepSample& s) {
  world_size_ = std::max(world_size_, s.world_size);
  if (samples_ > 0 && s.rank <= last_rank_) ranks_sorted_unique_ = false;
  last_rank_ = s.rank;
  ++samples_;
  Cohort& c = cohort_of(s.cohort);
  const std::size_t ci = last_cohort_;
  const std::size_t m = c.members;
  std::size_t& capacity = capacity_[ci];
  if (m >= capacity) grow(c, capacity, m + 1);
  if (m > 0 && s.rank < c.ranks[m - 1]) c.ranks_ascending = false;
  c.ranks[m] = s.rank;
  c.hosts[m].assign(s.host);
  c.members = m + 1;
  if (fast_[ci]) {
    if (add_layout_row(c, s, m)) return;
    fast_[ci] = 0;
  }
  double timed = 0.0;
  for (std::size_t p = 0; p < s.stages.size(); ++p) {
    const StageTime& st = s.stages[p];
    if (!std::isfinite(st.ms)) continue;  // no usable time: as if the stage were missing
    timed += st.ms;
    // Most ranks report the same stages in the same order: position p first.
    Column* col = nullptr;
    if (p < c.used && same_name(c.columns[p].name, st.name)) {
      col = &c.columns[p];
    } else {
      for (std::size_t i = 0; i < c.used; ++i)
        if (same_name(c.columns[i].name, st.name)) {
          col = &c.columns[i];
          break;
        }
    }
    if (!col) col = &add_column(c, capacity, st, m);
    if (col->count > 0 && col->member_at(col->count - 1) == static_cast<int>(m)) {
      col->ms[col->count - 1] += st.ms;  // the same stage twice in one sample: accumulate
      continue;
    }
    if (col->dense && col->count != m) {
      // A member skipped the stage: from here on, entries name their member.
      if (col->member.size() < capacity) col->member.resize(capacity);
      for (std::size_t i = 0; i < col->count; ++i) col->member[i] = static_cast<int>(i);
      col->dense = false;
    }
    if (!col->dense) col->member[col->count] = static_cast<int>(m);
    col->ms[col->count++] = st.ms;
  }
  c.untimed_ms[m] = untimed_of(s, timed);
  c.step_ms[m] = step_of(s, timed);
  fast_[ci] = layout_holds(c, m + 1) ? 1 : 0;
}

void ColumnarWindow::assign(const Window& window) {
  clear(window.step);
  const std::vector<StepSample>& samples = window.samples;
  const std::size_t n = samples.size();
  for (std::size_t i = 0; i < n; ++i) {
    // The window is read once, sample after sample, each sample's stages an allocation of
    // their own: the stages a few samples ahead are fetched while this one is copied (the
    // columns are bound by these loads, not by the work on them).
    if (i + kPrefetchAhead < n) {
      const StepSample& ahead = samples[i + kPrefetchAhead];
      const char* p = reinterpret_cast<const char*>(ahead.stages.data());
      const std::size_t bytes = ahead.stages.size() * sizeof(StageTime);
      for (std::size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
    }
    add(samples[i]);
  }
}

}  // namespace laggard
