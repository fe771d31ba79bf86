// laggard — the verdict every rank can read: the analysis rank's confirmed stragglers and this
// rank's own score, sent down the gather tree after each report (docs/design.md, "The verdict
// down the tree").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "laggard/model.hpp"

namespace laggard {

/// One confirmed straggler, as every rank learns it.
struct VerdictFinding {
  int rank = 0;
  std::string host;
  std::string cohort;
  std::string stage;
  StageKind kind = StageKind::compute;
  double ms = 0.0;        ///< its time in the stage, this window
  double ref_ms = 0.0;    ///< the reference (the cohort's median, by default)
  double slowdown = 1.0;  ///< ms / ref_ms
  double cost_ms = 0.0;   ///< what it costs every step: max(0, ms - ref_ms)
  double cost_share = 0.0;  ///< cost_ms over the cohort's step time, in [0, 1]
  int windows_flagged = 0;
  /// The step of the first window of its current run of flagged windows (where the slowdown
  /// began, as far as the sampled windows tell), the step of the window that confirmed it
  /// (the console line's), and how many windows it has been confirmed in since.
  std::int64_t onset_step = 0;
  std::int64_t confirmed_step = 0;
  int windows_held = 0;
  /// Why, in words: "its own compute; ranks 0,2,3 wait for it in 'allreduce'" (and the measured
  /// resource reason, when there is one).
  std::string reason;
};

/// The latest verdict of the live analysis, on any rank.
struct StragglerVerdict {
  std::uint64_t seq = 0;      ///< reports made on the analysis rank up to this one (1, 2, ...)
  std::int64_t step = 0;      ///< the step of the window it is about
  int ranks_seen = 0;         ///< ranks in that window
  int world_size = 0;
  double step_ms = 0.0;       ///< the window's step time (median over its ranks)
  double whatif_step_saving_ms = 0.0;
  std::string likely_bottleneck;
  int num_confirmed = 0;      ///< confirmed stragglers; `confirmed` lists at most kMaxFindings
  std::vector<VerdictFinding> confirmed;
  /// This rank: its score, the median over its last 5 windows of its worst relative score
  /// ref / t over its compute, data and other stages, in (0, 1]; 1 = nowhere slower than the
  /// reference. Each as (ref + e) / (t + e), e = 0.5 ms or a tenth of the window's step time
  /// if larger, so that neither a sub-millisecond stage's noise nor a short stage's hiccup that
  /// costs the step little scores; the median, so that one window's wait that landed in a
  /// compute stage (an all-reduce inside backward) does not either. Waiting in communication does not lower it: that is
  /// others' time. NaN when the verdict carried no score for this rank (its samples had not
  /// reached the analysis yet).
  int rank = -1;
  double score = 1.0;
  bool self_confirmed = false;  ///< this rank is among the confirmed stragglers
  /// The stop policy (AnalyzerOptions::stop_after_windows): the step every rank stops before,
  /// agreed by the analysis rank once a confirmed straggler has held for that many windows and
  /// carried by every verdict after; -1 = no stop.
  std::int64_t stop_step = -1;

  /// At most this many findings travel (the strongest first by cost); `num_confirmed` counts all.
  static constexpr std::size_t kMaxFindings = 16;
};

}  // namespace laggard
