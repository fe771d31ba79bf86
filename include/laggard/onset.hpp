// laggard — onset detection: the step at which a slowdown began, found online in O(1) per value.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "laggard/export.hpp"

namespace laggard {

/// Settings of the onset detector (a clipped one-sided CUSUM on log-time, see docs/compare.md).
struct LAGGARD_API OnsetOptions {
  int baseline_windows = 8;  ///< the first values of a series set its baseline (median, MAD)
  int persist_windows = 3;   ///< a shift must last this many values to count (spikes do not)
  double threshold = 5.0;    ///< CUSUM decision threshold h, in baseline standard deviations
  double min_shift = 0.10;   ///< smallest relative slowdown that counts (0.10: 10% slower)

  /// Throws std::invalid_argument naming the offending setting.
  void validate() const;
};

/// One series' onset detector. Feed it log(time) values in step order; it reports the step at
/// which a persistent upward shift began. Before `baseline_windows` values have arrived it only
/// buffers them; then it sets the baseline level mu (median) and scale sigma (1.4826 × MAD, at
/// least min_shift/4 so that noise-free data does not make every wiggle significant) and runs
///   S = max(0, S + min(z - k, h/m)),  z = (x - mu)/sigma,  k = max(1, shift/(2 sigma)),
/// with shift = log(1 + min_shift), h = threshold and m = persist_windows. Each value adds at most
/// h/m, so S reaches h only after at least m high values, and a confirmation also needs the last m
/// values to be high (z > k): one or two spikes that revert never confirm. While S is 0 (in control) mu and sigma keep learning from the values, winsorized at
/// 3 sigma (a few baseline values alone misjudge the noise). The onset is the first value of the
/// excursion that reached h; only the first confirmed onset is kept.
/// Without a baseline cap, an excursion that begins at the series' very first value is warm-up,
/// not an onset (no earlier level was seen to shift from); with a cap it is an onset.
///
/// Memory: a fixed-size object (no allocation). Cost: O(1) per value. Not thread-safe.
class LAGGARD_API OnsetDetector {
 public:
  static constexpr int kMaxBaseline = 16;

  OnsetDetector() = default;
  /// `baseline_cap`: the baseline level is min(median, cap). For a rank's time relative to its
  /// cohort's reference, log(t/ref), the cap is 0: the cohort is the healthy level, so a rank that
  /// was slow from its first step still shows an onset (at that first step).
  /// Throws std::invalid_argument for invalid options.
  explicit OnsetDetector(const OnsetOptions& options, double baseline_cap = kNoCap);

  /// Adds the value of step `step`; `log_value` must be finite (non-finite values are ignored).
  void add(std::int64_t step, double log_value) noexcept;

  /// The step at which the first confirmed shift began, or nothing. When fewer than
  /// baseline_windows values arrived, they are evaluated with the baseline they give (at least 3
  /// values are needed).
  std::optional<std::int64_t> onset() const noexcept;
  /// exp(baseline level): the typical value before the onset (NaN before a baseline exists).
  double baseline() const noexcept;
  /// exp(mean of log values from the onset on): the typical value since (NaN without an onset).
  double since() const noexcept;
  int values() const noexcept { return values_; }

  static constexpr double kNoCap = 1e300;

 private:
  void start_baseline() noexcept;
  void step_cusum(std::int64_t step, double x, bool learn) noexcept;

  // Settings (floats: these objects exist per rank and stage, keep them small).
  std::uint8_t baseline_n_ = 6;
  std::uint8_t persist_ = 3;
  float threshold_ = 5.0f;
  float shift_ = 0.0953102f;  // log(1.10)
  float cap_ = 3.0e38f;
  // Baseline buffer.
  std::array<float, kMaxBaseline> buffer_{};
  std::array<std::int32_t, kMaxBaseline> buffer_offsets_{};  // step - first_step_
  std::int64_t first_step_ = 0;
  int values_ = 0;
  bool ready_ = false;
  float mu_ = 0.0f, sigma_ = 0.0f, cap_step_ = 0.0f;
  // In-control learning: count, winsorized sums of x and of |x - mu|.
  float learn_n_ = 0.0f;
  double learn_sum_ = 0.0, learn_abs_ = 0.0;
  // CUSUM state.
  double s_ = 0.0;
  std::int64_t start_ = 0;  // first value of the current excursion
  double excursion_sum_ = 0.0;
  int excursion_count_ = 0;
  bool first_value_ = true;  // the next CUSUM value is the series' first
  std::uint8_t high_run_ = 0;  // consecutive values with z > k, up to persist_
  bool excursion_from_first_ = false;
  bool found_ = false;
  std::int64_t onset_ = 0;
  double sum_since_ = 0.0;
  int count_since_ = 0;
};

}  // namespace laggard
