// laggard — onset detection: the step at which a slowdown began, found online in O(1) per value.
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "laggard/export.hpp"

namespace laggard {

namespace detail {
class OnsetColumns;
}

/// Settings of the onset detector (a clipped one-sided CUSUM on log-time, see docs/howto/compare.md).
struct LAGGARD_API OnsetOptions {
  int baseline_windows = 8;  ///< the first values of a series set its baseline (median, MAD)
  int persist_windows = 3;   ///< a shift must last this many values to count (spikes do not)
  double threshold = 5.0;    ///< CUSUM decision threshold h, in baseline standard deviations
  double min_shift = 0.10;   ///< smallest relative slowdown that counts (0.10: 10% slower)
  /// RunAnalysis: the onset of each (rank, stage) as well as the job's step time. It costs a
  /// logarithm and a filter step per rank and stage per window (at 16,384 ranks x 16 stages
  /// more than the detector itself); false keeps only the step time's.
  bool per_rank = true;

  /// Throws std::invalid_argument naming the offending setting.
  void validate() const;
};

/// One series' onset detector. Feed it log(time) values in step order; it reports the step at
/// which a persistent upward shift began.
///  - Values first pass a running median of 5, dated at the middle value: an impulse of one or two
///    values vanishes, a lasting shift keeps its edge and its first step (confirmation comes two
///    values later than without it).
///  - The first `baseline_windows` medians set the baseline level mu (their median); the noise
///    scale sigma is 1.4826 × the median absolute successive difference of the raw values that
///    came with them, over sqrt(2) (a shift among them is one large difference and does not
///    inflate it; at least min_shift/4, so noise-free data does not make every wiggle significant).
///    While the CUSUM is at 0 (in control), mu and sigma keep learning from the values, winsorized
///    at 3 sigma: a few baseline values alone misjudge the noise too often.
///  - S = max(0, S + min(z - k, h/m)) with z = (median - mu)/sigma, k = max(1, shift/(2 sigma)),
///    shift = log(1 + min_shift), h = threshold, m = persist_windows. The median's noise is smaller
///    than sigma, a shift passes in full: fewer false alarms at the same power. One value adds at
///    most h/m, so S reaches h only after m high values, and a confirmation also needs the last m
///    values to be high (z > k).
/// The onset is the first value of the run of high values that confirmed the shift (sharper
/// than the start of the CUSUM excursion, which noise often opens a few values early); only the
/// first confirmed onset is kept. Without a baseline cap, an excursion that begins at the series'
/// very first value is warm-up, not an onset (no earlier level was seen to shift from); with a cap
/// it is an onset.
///
/// Memory: a fixed-size object (no allocation). Cost: O(1) per value. Not thread-safe.
class LAGGARD_API OnsetDetector {
 public:
  static constexpr int kMaxBaseline = 8;

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
  friend class detail::OnsetColumns;  // steps many detectors' in-control values together
  void start_baseline() noexcept;
  void step_cusum(std::int64_t step, double x, double raw, bool learn) noexcept;
  void add_filtered(std::int64_t step, double x, double raw) noexcept;

  // Settings (floats: these objects exist per rank and stage, keep them small).
  std::uint8_t baseline_n_ = 6;
  std::uint8_t persist_ = 3;
  float threshold_ = 5.0f;
  float shift_ = 0.0953102f;  // log(1.10)
  float cap_ = 3.0e38f;
  // The running median's window: the last 5 raw values and their steps (ring).
  std::array<float, 5> ring_{};
  std::array<std::int64_t, 5> ring_steps_{};
  std::uint32_t raw_ = 0;  // raw values seen
  // Baseline buffer.
  std::array<float, kMaxBaseline> buffer_{};      // running medians
  std::array<float, kMaxBaseline> raw_buffer_{};  // the raw values that arrived with them
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
  bool first_value_ = true;     // the next CUSUM value is the series' first
  std::uint8_t high_run_ = 0;   // consecutive values with z > k, up to persist_
  std::int64_t run_start_ = 0;  // step of the first value of the current run of high values
  bool excursion_from_first_ = false;
  bool found_ = false;
  std::int64_t onset_ = 0;
  double sum_since_ = 0.0;
  int count_since_ = 0;
};

}  // namespace laggard
