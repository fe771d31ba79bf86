// laggard — a window as the detector reads it: per cohort, one array of times per stage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "laggard/export.hpp"
#include "laggard/model.hpp"

namespace laggard {

/// Every rank's sample of one step, stored by column: per cohort, each stage's name once and
/// the times of the ranks that reported it in one contiguous array, in sample order. The
/// detector compares each stage across ranks, so this is the form it reads; a `Window` is
/// turned into it first (`assign`), which at 16,384 ranks x 16 stages reads 15 MB of
/// `StageTime` (a name each) to gather 2 MB of times. A producer that has each sample in hand
/// (and in cache) as it arrives appends it with `add` instead, and no `Window` is needed.
///
/// What `add` keeps of a sample: its rank, world_size, cohort, host, its step time, and each
/// stage's name, kind and time. Stages without a finite time are left out (as if not
/// reported); a stage reported twice in one sample is summed. Cohorts and their stages are in
/// order of first appearance. Storage is kept by `clear`, so a window reused step after step
/// allocates nothing in steady state. Not thread-safe.
class LAGGARD_API ColumnarWindow {
 public:
  /// One stage of one cohort. While every member so far reported the stage it is dense (entry
  /// i is member i) and `member` is unused; the first member that skips it makes it sparse.
  struct Column {
    std::string name;
    StageKind kind = StageKind::compute;
    std::size_t count = 0;  ///< entries in use: ms[0, count) (and member[0, count) if sparse)
    bool dense = true;
    std::vector<int> member;  ///< sparse only: the member (index into the cohort) of entry i
    std::vector<double> ms;   ///< at least count entries; those past count are unspecified
    int member_at(std::size_t i) const noexcept {
      return dense ? static_cast<int>(i) : member[i];
    }
  };

  /// The samples of one cohort, in sample order (member m is the cohort's m-th sample).
  struct Cohort {
    std::string name;
    std::size_t members = 0;
    /// Per member, entries [0, members): its rank, host, step time (step_ms, or without one the
    /// sum of its stage times) and untimed time (step_ms less its stage times, at least 0; -1
    /// without a step time or without stages). Entries past `members` are unspecified.
    std::vector<int> ranks;
    std::vector<std::string> hosts;
    std::vector<double> step_ms;
    std::vector<double> untimed_ms;
    bool ranks_ascending = true;  ///< ranks[m] <= ranks[m + 1] for every member
    std::vector<Column> columns;  ///< the first `used` are this window's
    std::size_t used = 0;
  };

  /// Empties the window for step `step`, keeping its storage.
  void clear(std::int64_t step = 0);
  /// Appends one sample (its row of every column).
  void add(const StepSample& sample);
  /// clear(window.step), then add every sample of `window` in order.
  void assign(const Window& window);

  std::int64_t step() const noexcept { return step_; }
  std::size_t samples() const noexcept { return samples_; }
  /// The largest world_size of the samples (0 without samples).
  int world_size() const noexcept { return world_size_; }
  /// How many distinct ranks the samples hold.
  int distinct_ranks() const;
  std::size_t cohort_count() const noexcept { return cohorts_used_; }
  const Cohort& cohort(std::size_t i) const noexcept { return cohorts_[i]; }
  /// The cohort called `name`, or nullptr.
  const Cohort* find_cohort(std::string_view name) const noexcept;

 private:
  Cohort& cohort_of(const std::string& name);
  static void grow(Cohort& c, std::size_t& capacity, std::size_t rows);
  static Column& add_column(Cohort& c, std::size_t capacity, const StageTime& st,
                            std::size_t m);
  static bool add_layout_row(Cohort& c, const StepSample& s, std::size_t m);
  static bool layout_holds(const Cohort& c, std::size_t rows);

  std::int64_t step_ = 0;
  std::size_t samples_ = 0;
  int world_size_ = 0;
  bool ranks_sorted_unique_ = true;  // every sample's rank above the one before
  int last_rank_ = 0;
  std::vector<Cohort> cohorts_;  // the first cohorts_used_ are this window's
  std::size_t cohorts_used_ = 0;
  std::size_t last_cohort_ = 0;  // the cohort of the latest sample
  // Per cohort: the rows every column (and per-member array) has room for, and whether its rows
  // take the layout path: while every row so far had the same stages in the same order, all
  // finite, each is written straight to the columns without a name search.
  std::vector<std::size_t> capacity_;
  std::vector<char> fast_;
};

}  // namespace laggard
