// laggard — run comparison: which stage regressed first against a known-good baseline run,
// decided with noise-aware statistics over repeated sampled steps (REGRESSED / SAME / UNKNOWN).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "laggard/export.hpp"
#include "laggard/model.hpp"

namespace laggard {

/// A stage's (or a rank's) verdict against the baseline.
///  - regressed: the whole confidence interval of current/baseline lies above 1 + threshold, and
///               the rank-sum test is significant after correction across the tested stages;
///  - improved:  the mirror image (interval below 1 - threshold, significant);
///  - same:      the interval lies within 1 ± threshold, or no significant change was found with
///               enough steps;
///  - unknown:   not enough evidence: too few steps, a zero baseline, or a significant change
///               whose interval straddles the threshold (more steps would settle it).
enum class Verdict : std::uint8_t { same = 0, regressed = 1, improved = 2, unknown = 3 };

/// "SAME", "REGRESSED", "IMPROVED", "UNKNOWN". Thread-safe.
LAGGARD_API const char* to_string(Verdict verdict) noexcept;

/// Settings of a comparison.
struct LAGGARD_API CompareOptions {
  double relative_threshold = 0.05;  ///< smallest change that counts: ratio > 1 + this
  double alpha = 0.05;   ///< family-wise error rate (Holm), stages and rank-stage pairs apart
  int warmup = -1;       ///< sampled steps skipped at the start of each run; -1: max(2, 10%)
  int min_steps = 5;     ///< per run, after the warm-up; fewer gives UNKNOWN
  int resamples = 1000;  ///< bootstrap resamples for each interval
  std::uint64_t seed = 0x6c616767;  ///< fixed: the same inputs give the same intervals
  bool per_rank = true;             ///< also test each (rank, stage) when the world sizes match

  /// Throws std::invalid_argument naming the offending setting.
  void validate() const;
  /// The warm-up used for a run of `windows` sampled steps.
  int warmup_for(std::int64_t windows) const noexcept;
};

/// What comparison keeps of one run, fed one window at a time. Per (cohort, stage) it keeps one
/// value per sampled step (the median and the max over the cohort's ranks), per (cohort, stage,
/// rank) the rank's own time, and per step the job's step time (slowest rank). Memory is bounded:
/// at most `Limits::steps` steps per stage series and `Limits::rank_steps` per rank series are
/// kept; past that every other kept step is dropped and only every 2nd, 4th, ... step is kept
/// from then on (a systematic sample, so the values keep their distribution). Not thread-safe.
class LAGGARD_API RunProfile {
 public:
  struct Limits {
    std::size_t steps = 4096;     ///< per (cohort, stage): two doubles and an index per step
    std::size_t rank_steps = 64;  ///< per (cohort, stage, rank): a float and an index per step
  };
  /// One per-step series: `window[i]` (index of the sampled step in the run) gave `value[i]`.
  struct Series {
    std::string cohort;
    std::string stage;
    StageKind kind = StageKind::compute;
    std::vector<std::uint32_t> window;
    std::vector<double> median;  ///< over the cohort's ranks that reported the stage
    std::vector<double> max;
  };
  struct RankSeries {
    int rank = 0;
    std::size_t series = 0;  ///< index into series()
    std::vector<std::uint32_t> window;
    std::vector<float> ms;
  };

  RunProfile();
  explicit RunProfile(Limits limits);
  ~RunProfile();
  RunProfile(RunProfile&&) noexcept;
  RunProfile& operator=(RunProfile&&) noexcept;
  RunProfile(const RunProfile&) = delete;
  RunProfile& operator=(const RunProfile&) = delete;

  /// Adds one sampled step. Cost O(samples × stages) plus a selection per stage.
  void add(const Window& window);

  std::int64_t windows() const noexcept;  ///< sampled steps added
  std::int64_t samples() const noexcept;
  int ranks() const noexcept;       ///< distinct ranks seen
  int world_size() const noexcept;  ///< the largest world_size declared
  std::int64_t first_step() const noexcept;
  std::int64_t last_step() const noexcept;
  /// Stage series, cohorts and stages in pipeline order (order of first appearance, a stage met
  /// later placed after the stage it follows in its sample).
  std::vector<const Series*> ordered_series() const;
  const std::vector<Series>& series() const noexcept;
  const std::vector<RankSeries>& rank_series() const noexcept;
  /// The job's step time: per sampled step the slowest rank's step_ms (in `max`) and the median
  /// rank's (in `median`).
  const Series& step_time() const noexcept;
  /// Step number of sampled step `window` (kept for kept windows only; -1 if not kept).
  std::int64_t step_of(std::uint32_t window) const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One stage (of one cohort) compared. Times are medians over the steps used of the per-step
/// median over ranks; `*_max_ms` the same over the per-step max over ranks.
struct StageComparison {
  enum class Role : std::uint8_t { none = 0, origin = 1, victim = 2, unknown_before_origin = 3 };
  std::string cohort;
  std::string stage;
  StageKind kind = StageKind::compute;
  Verdict verdict = Verdict::unknown;
  Role role = Role::none;
  std::string reason;      ///< one line: why this verdict
  int baseline_steps = 0;  ///< steps used, after the warm-up
  int current_steps = 0;
  int steps_needed = 0;  ///< when UNKNOWN for lack of steps: steps needed per run, else 0
  double baseline_ms = 0.0;
  double current_ms = 0.0;
  double delta_ms = 0.0;  ///< current_ms - baseline_ms
  double ratio = 1.0;     ///< current_ms / baseline_ms (NaN when the baseline is 0)
  double ci_low = 0.0;    ///< bootstrap interval of the ratio (NaN when not computed)
  double ci_high = 0.0;
  double p_value = 1.0;     ///< two-sided Mann-Whitney U (NaN when not tested)
  double p_adjusted = 1.0;  ///< Holm-adjusted over the tested stages
  double baseline_max_ms = 0.0;
  double current_max_ms = 0.0;
};

/// One (cohort, stage, rank) compared: the rank's own time per step in both runs.
struct RankComparison {
  int rank = 0;
  std::string cohort;
  std::string stage;
  StageKind kind = StageKind::compute;
  Verdict verdict = Verdict::same;
  int baseline_steps = 0;
  int current_steps = 0;
  double baseline_ms = 0.0;  ///< median over steps
  double current_ms = 0.0;
  double delta_ms = 0.0;
  double ratio = 1.0;
  double ci_low = 0.0;  ///< NaN unless significant (the interval is computed only then)
  double ci_high = 0.0;
  double p_adjusted = 1.0;                   ///< Holm over all tested pairs
  Verdict stage_verdict = Verdict::unknown;  ///< the verdict of the stage's median rank
};

/// What one run contributed.
struct RunOverview {
  std::int64_t windows = 0;
  int warmup = 0;  ///< sampled steps skipped
  std::int64_t samples = 0;
  int ranks = 0;
  int world_size = 0;
  std::int64_t first_step = 0;
  std::int64_t last_step = 0;
};

/// The whole comparison.
struct Comparison {
  CompareOptions options;
  RunOverview baseline;
  RunOverview current;
  int stages_tested = 0;                      ///< size of the Holm family over stages
  std::vector<StageComparison> stages;        ///< stages present in both runs, pipeline order
  std::vector<std::string> only_in_baseline;  ///< "stage" or "stage [cohort]"
  std::vector<std::string> only_in_current;
  int origin = -1;           ///< index into stages of the first REGRESSED stage, or -1
  std::vector<int> victims;  ///< later REGRESSED stages
  std::vector<int> unknown_before_origin;  ///< UNKNOWN stages before the origin (or all, if none)
  StageComparison step_time;  ///< the job's step time (slowest rank), tested on its own
  bool per_rank = false;      ///< whether per-rank comparison ran
  std::string per_rank_note;  ///< why it did not, or what it covered
  int rank_pairs_tested = 0;
  std::vector<RankComparison> ranks;  ///< every tested pair, by cohort, stage order, then rank
  int ranks_regressed = 0;
  int ranks_improved = 0;
  /// Into ranks: the first pair, in pipeline order (then rank), that REGRESSED in a stage of the
  /// rank's own work (not communication); -1 if none.
  int rank_origin = -1;
  /// Set when the stage-level picture misleads: the origin is a communication stage (a longer
  /// wait, evidence about someone else) while some rank's own work regressed, or no stage
  /// regressed for the median rank while some rank's own work did. Empty otherwise.
  std::string hint;
};

/// Compares two runs stage by stage (see docs/howto/compare.md for the statistics). Throws
/// std::invalid_argument for invalid options. Cost: per stage one bootstrap (resamples × steps);
/// per rank-stage pair a rank-sum test, plus a bootstrap only for significant pairs.
LAGGARD_API Comparison compare_runs(const RunProfile& baseline, const RunProfile& current,
                                    const CompareOptions& options = {});

/// "forward" or "forward [pp1]" (the cohort is named when the runs have more than one).
LAGGARD_API std::string stage_label(const std::string& stage, const std::string& cohort,
                                    bool name_cohort);

}  // namespace laggard
