// laggard — a whole run's verdicts, built window by window (what `laggard analyze` prints).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "laggard/detector.hpp"
#include "laggard/export.hpp"
#include "laggard/model.hpp"
#include "laggard/detail/onset_columns.hpp"
#include "laggard/onset.hpp"

namespace laggard {

/// A confirmed straggler over the run.
struct StragglerSummary {
  int rank = 0;
  std::string host;
  std::string cohort;
  std::string stage;
  StageKind kind = StageKind::compute;
  int windows_flagged = 0;
  int windows_seen = 0;
  std::int64_t first_flagged_step = 0;
  std::int64_t confirmed_step = 0;
  /// Typical t / ref over the windows it was confirmed in: a 20 % trimmed mean (sees a slowdown
  /// present in a third of the windows; pauses do not move it).
  double typical_slowdown = 1.0;
  /// Its typical cost to the step (RankFinding::cost_ms): the same trimmed mean.
  double cost_ms = 0.0;
  /// The trimmed mean of RankFinding::cost_share over the same windows, in [0, 1].
  double cost_share = 0.0;
  double last_ms = 0.0;
  double last_ref_ms = 0.0;
  /// The step at which its slowdown began (CUSUM on log(t / ref), see OnsetDetector); nothing
  /// when no persistent shift was found (an intermittent straggler).
  std::optional<std::int64_t> onset_step;
};

/// A rank whose excess was only time spent waiting in communication (evidence, not a verdict),
/// counted in windows where its flag met the same k-of-n persistence rule as a straggler's.
struct WaitingSummary {
  int rank = 0;
  std::string host;
  std::string cohort;
  std::string stage;
  int windows = 0;
  double typical_excess_ms = 0.0;  ///< median of t - ref over those windows
};

/// A host all of whose ranks were slow in the same stage, in at least confirm_k windows.
struct HostSummary {
  std::string host;
  std::string cohort;
  std::string stage;
  std::vector<int> ranks;
  int windows = 0;
  double typical_slowdown = 1.0;
  double cost_ms = 0.0;     ///< median of HostFinding::cost_ms over those windows
  double cost_share = 0.0;  ///< median of HostFinding::cost_share over those windows
};

/// What a whole run showed.
struct RunSummary {
  std::int64_t windows = 0;
  std::int64_t samples = 0;
  int ranks = 0;       ///< distinct ranks seen
  int world_size = 0;  ///< largest world_size any sample declared
  std::int64_t first_step = 0;
  std::int64_t last_step = 0;
  /// Confirmed and material over all their windows (DetectorOptions::healthy_spread,
  /// min_cost_share), costliest first (then by rank, cohort, stage).
  std::vector<StragglerSummary> stragglers;
  std::vector<WaitingSummary> waiting;  ///< waiting ranks, counted in windows where persistent
  std::vector<HostSummary> slow_hosts;  ///< material as stragglers are, costliest first
  /// stage → windows it was likely_bottleneck, counting windows with a persistent finding only
  std::map<std::string, int> bottleneck_windows;
  std::string likely_bottleneck;  ///< the most frequent; empty if none
  double mean_step_ms = 0.0;           ///< per window, the slowest rank's step_ms, averaged
  double mean_whatif_saving_ms = 0.0;  ///< whatif_step_saving_ms averaged over windows
  Report last;                         ///< the last window's report
  /// The step at which the job's step time (per window, the slowest rank's step_ms) began a
  /// persistent rise, and its typical value before and since; nothing if it did not.
  std::optional<std::int64_t> step_time_onset;
  double step_time_before_ms = 0.0;  ///< baseline level (NaN when unknown)
  double step_time_since_ms = 0.0;   ///< typical since the onset (NaN without an onset)
  /// Why there is no step_time_onset when the run shows it: sampled steps with a step time (an
  /// onset needs at least 3), and a rise that came within the first
  /// OnsetOptions::baseline_windows of them, which set the baseline it would be measured from:
  /// the step of that rise and the step time's median before and after it.
  int step_time_values = 0;
  int step_time_baseline_values = 0;  ///< how many first values set the baseline
  std::optional<std::int64_t> step_time_rise_in_baseline;
  double step_time_rise_from_ms = 0.0;
  double step_time_rise_to_ms = 0.0;
};

/// Runs a Detector over a run's windows and keeps what the summary needs (memory grows with
/// ranks × stages, not with steps: one fixed-size OnsetDetector per rank and non-communication
/// stage, for the onsets). Not thread-safe.
class LAGGARD_API RunAnalysis {
 public:
  /// Throws std::invalid_argument for invalid options.
  explicit RunAnalysis(DetectorOptions options = {}, OnsetOptions onset = {});
  /// Analyses one window and returns its report (valid until the next call).
  const Report& add(const Window& window);
  /// The summary so far.
  RunSummary summary() const;
  const DetectorOptions& options() const noexcept { return detector_.options(); }
  const OnsetOptions& onset_options() const noexcept { return onset_options_; }
  /// The onset of (cohort, stage, rank) in log(t / ref), or nothing (also when never seen).
  std::optional<std::int64_t> onset(const std::string& cohort, const std::string& stage,
                                    int rank) const;

 private:
  struct Waiting {
    WaitingSummary info;
    std::vector<double> excess;
  };
  struct Host {
    HostSummary info;
    std::vector<double> slowdowns, costs_ms, shares;
  };
  Detector detector_;
  Report last_;
  std::int64_t samples_ = 0;
  std::int64_t first_step_ = 0;
  std::int64_t last_step_ = 0;
  int world_size_ = 0;
  std::vector<bool> ranks_seen_;
  std::map<std::string, Waiting> waiting_;  ///< key: cohort/stage/rank
  std::map<std::string, Host> hosts_;       ///< key: cohort/stage/host
  std::map<std::string, int> bottleneck_windows_;
  double sum_step_ms_ = 0.0;
  double sum_whatif_ms_ = 0.0;
  // Onsets: per cohort \x1f stage, rank → slot in the dense detectors (ranks of other cohorts
  // cost 4 bytes each, not a detector).
  struct StageOnsets {
    std::vector<std::int32_t> slot;
    detail::OnsetColumns detectors;  // one series per slot, stepped together per window
  };
  OnsetOptions onset_options_;
  std::unordered_map<std::string, StageOnsets> rank_onsets_;
  // Per position in the last report's stages: its (cohort, stage) and their onsets, so that a
  // window laid out as the one before finds them without a look-up.
  struct StageOnsetsAt {
    std::string cohort, stage;
    StageOnsets* onsets = nullptr;
  };
  // Points into rank_onsets_: a copy or a move leaves both objects without it.
  struct OnsetsAt : std::vector<StageOnsetsAt> {
    OnsetsAt() = default;
    OnsetsAt(const OnsetsAt&) : std::vector<StageOnsetsAt>() {}
    OnsetsAt(OnsetsAt&& other) noexcept : std::vector<StageOnsetsAt>() { other.clear(); }
    OnsetsAt& operator=(const OnsetsAt&) {
      clear();
      return *this;
    }
    OnsetsAt& operator=(OnsetsAt&& other) noexcept {
      clear();
      other.clear();
      return *this;
    }
  };
  OnsetsAt onsets_at_;
  OnsetDetector step_onset_;
  // The step time's first values (those that set its onset baseline), and the mean log of the
  // later ones: enough to say why a rise among the first values is no onset.
  std::array<std::pair<std::int64_t, double>, OnsetDetector::kMaxBaseline> step_first_{};
  int step_values_ = 0;
  double step_later_log_sum_ = 0.0;
  std::string key_;
};

}  // namespace laggard
