// Assembles windows (every rank's sample of one step) on the analysis rank. Private.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "laggard/model.hpp"

namespace laggard {

/// Samples arrive per rank in step order but ranks run at their own pace. A window is released
/// once every rank that can still contribute has, or when it went stale: older than `timeout`,
/// or more than `max_pending` windows waiting. Windows are released in step order, so the
/// persistence counts of the detector see them in order; a sample for a step already released
/// is late and discarded. Not thread-safe (the background thread owns it).
class WindowAssembler {
 public:
  using Clock = std::chrono::steady_clock;

  WindowAssembler(int world_size, Clock::duration timeout, std::size_t max_pending);

  enum class Added { ok, late, duplicate, bad_rank };
  Added add(StepSample&& sample, Clock::time_point now);

  /// `rank` sent its last sample: windows stop waiting for it.
  void finished(int rank);
  bool all_finished() const noexcept { return finished_count_ == world_size_; }

  /// The next window ready for analysis, if any; `final` releases everything left.
  /// `complete` says whether every rank was in it.
  bool next(Window& out, bool& complete, Clock::time_point now, bool final);

  std::size_t pending() const noexcept { return pending_.size(); }
  /// When the oldest waiting window goes stale (next() releases it then without waiting for
  /// anything); Clock::time_point::max() when none waits.
  Clock::time_point next_due() const noexcept {
    return pending_.empty() ? Clock::time_point::max() : pending_.begin()->second.first_seen + timeout_;
  }

 private:
  struct Pending {
    Clock::time_point first_seen{};
    std::vector<StepSample> samples;
    std::vector<char> present;  // by rank
  };
  bool complete(const Pending& p) const;

  int world_size_;
  Clock::duration timeout_;
  std::size_t max_pending_;
  std::map<std::int64_t, Pending> pending_;
  std::optional<std::int64_t> last_released_;
  std::vector<char> finished_;
  int finished_count_ = 0;
};

}  // namespace laggard
