// laggard — timeline bubbles: per rank and step, the time the device was idle, split into
// waiting for data, waiting on communication, launch-bound gaps and other idle time, and the time
// spent inside NCCL kernels waiting for ranks that reached the collective later.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "laggard/export.hpp"
#include "laggard/trace.hpp"

namespace laggard {

/// One rank's timeline, averaged over its steps (ms per step).
struct RankTimelineSummary {
  int rank = 0;
  std::string host;
  std::size_t steps = 0;
  double step_ms = 0.0;
  double window_ms = 0.0;
  double busy_ms = 0.0;
  double copy_ms = 0.0;
  double data_wait_ms = 0.0;
  double comm_idle_ms = 0.0;
  double launch_wait_ms = 0.0;
  double other_idle_ms = 0.0;
  double comm_ms = 0.0;
  double comm_wait_ms = 0.0;
  std::size_t collectives = 0;   ///< its NCCL kernels matched with other ranks'
  std::size_t arrived_last = 0;  ///< of those, the ones where its kernel was the shortest: the
                                 ///< others were already waiting inside theirs when it came
};

/// A bubble worth a look: one kind of lost device time on some ranks (or all of them).
struct TimelineFinding {
  enum class Kind {
    data_wait = 0,
    launch_bound = 1,
    other_idle = 2,
    late_arrival = 3,
    comm_idle = 4,  ///< idle while the host was in a collective: communication or a late rank
  };
  Kind kind = Kind::data_wait;
  std::vector<int> ranks;   ///< ascending
  bool every_rank = false;  ///< the whole job, not a few ranks
  double ms_per_step = 0.0;  ///< mean over the ranks named
  double share = 0.0;        ///< ms_per_step / their mean window
  double median_ms = 0.0;    ///< the median rank's figure
  /// late_arrival: the collectives the rank reached last, of how many, and the others' wait.
  std::size_t last = 0, of = 0;
  double others_wait_ms = 0.0;
};

/// "data_wait", "launch_bound", "other_idle", "late_arrival", "comm_idle". Thread-safe.
LAGGARD_API const char* to_string(TimelineFinding::Kind kind) noexcept;

struct TimelineSummary {
  std::vector<RankTimelineSummary> ranks;  ///< ranks with device activity, ascending
  std::vector<TimelineFinding> findings;   ///< late arrivals first, then by ms_per_step
  std::size_t ranks_without_device = 0;    ///< CPU-only traces: no timeline
  std::size_t collectives_matched = 0;     ///< (step, group, ordinal) seen on 2 or more ranks
  std::size_t collectives_mismatched = 0;  ///< ... whose name or sizes differ across ranks
};

/// Settings of the findings.
struct TimelineOptions {
  double min_share = 0.05;  ///< a bubble counts when it is this share of the rank's window ...
  double min_ms = 0.5;      ///< ... and at least this many ms per step ...
  double over_median = 1.5;  ///< ... and this many times the median rank's (else every rank's)
  double min_last_share = 0.5;  ///< late_arrival: last at this share of the collectives
};

/// Matches collectives across ranks (by step, process group and their order in the step) and
/// fills each StepTimeline's comm_wait_ms: its NCCL kernel time minus the shortest of the same
/// collective on any rank. Then averages per rank and names the bubbles worth a look. Cost:
/// O(collectives log collectives + steps x ranks). Not thread-safe on the same `ranks`.
LAGGARD_API TimelineSummary analyze_timeline(std::vector<RankTrace>& ranks,
                                             const TimelineOptions& options = {});

}  // namespace laggard
