// laggard — runs of the same job at several world sizes: per stage how time grows with ranks, the
// smallest size at which a stage regresses (first-regression along sizes), and where to look next.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "laggard/compare.hpp"
#include "laggard/export.hpp"

namespace laggard {

/// How per-rank work changes with the world size, to put every run on the baseline's footing.
enum class Scaling : std::uint8_t {
  weak = 0,    ///< the same work per rank at every size (global batch grows): times as they are
  strong = 1,  ///< the same global work (per-rank work ~ 1/world size): times x size / base size
  work = 2,    ///< the samples' own `work` (tokens or samples per rank): times x base work / work
};

/// "weak", "strong", "work". Thread-safe.
LAGGARD_API const char* to_string(Scaling scaling) noexcept;

/// One run, read and normalised (its times multiplied by `factor`).
struct ScaleRun {
  std::string name;
  int world_size = 0;
  int ranks = 0;
  int hosts = 0;        ///< distinct host names in its samples (0: none named)
  double work = 0.0;    ///< median per-rank work per step (NaN when not recorded)
  double factor = 1.0;  ///< what its times were multiplied by
  RunProfile profile;   ///< of the normalised samples
};

/// One stage at one size, against the baseline.
struct ScalePoint {
  int world_size = 0;
  double ms = 0.0;     ///< the median rank's normalised time per step (median over steps)
  double ratio = 1.0;  ///< ms / the baseline's
  double ci_low = 0.0, ci_high = 0.0;
  Verdict verdict = Verdict::same;  ///< the baseline itself: SAME
  std::string reason;
};

struct ScaleStage {
  std::string cohort;
  std::string stage;
  StageKind kind = StageKind::compute;
  std::vector<ScalePoint> points;  ///< one per run that has the stage, ascending size
  /// Slope of log(ms) over log(world size) across the runs: 0 = flat, 1 = linear in ranks (NaN
  /// with fewer than two sizes or a zero time).
  double growth = 0.0;
  int first_regressed_size = 0;  ///< smallest size at which it is REGRESSED (0: none)
};

/// The whole study.
struct ScaleResult {
  Scaling scaling = Scaling::weak;
  CompareOptions options;
  int baseline_size = 0;
  std::vector<ScaleRun> runs;      ///< ascending world size (their profiles moved in)
  std::vector<ScaleStage> stages;  ///< the baseline's stages, pipeline order
  ScaleStage step_time;            ///< the slowest rank's step time, normalised
  /// The smallest size (other than the baseline) at which some stage REGRESSED, the first such
  /// stage in pipeline order there (the origin), and its point; 0 / empty when none.
  int first_regression_size = 0;
  int origin_stage = -1;  ///< into stages
  /// Whether first_regression_size is the smallest size spanning more than one host.
  bool first_multi_host = false;
  int first_multi_host_size = 0;  ///< the smallest size spanning more than one host (0: none)
  int ranks_per_host = 0;         ///< the most ranks any single-host run had on its host
  int bracket_low = 0;  ///< the largest size below first_regression_size without a regression
  std::vector<int> next_sizes;  ///< the sizes to run next (empty: the runs bracket the onset)
  std::string next_reason;      ///< why those (or that the runs bracket it)
  std::vector<int> unknown_sizes;  ///< sizes with a stage UNKNOWN (more steps would settle it)
};

/// Compares every run with the one of `baseline_size` (0: the smallest) stage by stage with
/// compare_runs' statistics, in pipeline order, and answers the scale questions above. `runs`
/// must have distinct world sizes (std::invalid_argument otherwise, or with fewer than two runs,
/// or a baseline size none has). Cost: one compare_runs per run.
LAGGARD_API ScaleResult scale_runs(std::vector<ScaleRun> runs, int baseline_size = 0,
                                   const CompareOptions& options = {});

}  // namespace laggard
