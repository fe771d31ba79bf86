// Onset detection: a clipped one-sided CUSUM on log-time against a robust early baseline.
#include "laggard/onset.hpp"

#include "analysis/median.hpp"
#include "laggard/export.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace laggard {

void OnsetOptions::validate() const {
  if (baseline_windows < 3 || baseline_windows > OnsetDetector::kMaxBaseline)
    throw std::invalid_argument("onset baseline_windows must be in [3, " +
                                std::to_string(OnsetDetector::kMaxBaseline) + "], got " +
                                std::to_string(baseline_windows));
  if (persist_windows < 1 || persist_windows > 64)
    throw std::invalid_argument("onset persist_windows must be in [1, 64], got " +
                                std::to_string(persist_windows));
  if (!(threshold > 0.0) || !std::isfinite(threshold))
    throw std::invalid_argument("onset threshold must be > 0, got " + std::to_string(threshold));
  if (!(min_shift > 0.0) || !std::isfinite(min_shift))
    throw std::invalid_argument("onset min_shift must be > 0, got " + std::to_string(min_shift));
}

OnsetDetector::OnsetDetector(const OnsetOptions& options, double baseline_cap) {
  options.validate();
  baseline_n_ = static_cast<std::uint8_t>(options.baseline_windows);
  persist_ = static_cast<std::uint8_t>(options.persist_windows);
  threshold_ = static_cast<float>(options.threshold);
  shift_ = static_cast<float>(std::log1p(options.min_shift));
  cap_ = baseline_cap >= 3.0e38 ? 3.0e38f : static_cast<float>(baseline_cap);
}

void OnsetDetector::add(std::int64_t step, double log_value) noexcept {
  if (!std::isfinite(log_value)) return;
  // Running median of 5, dated at the middle value: spikes of 1-2 values are removed before the
  // CUSUM sees them, while a lasting shift keeps its first step. The first values use what there
  // is (median of 1..4, dated at their middle).
  const std::size_t slot = raw_ % 5;
  ring_[slot] = static_cast<float>(log_value);
  ring_steps_[slot] = step;
  ++raw_;
  if (LAGGARD_LIKELY(raw_ >= 5)) {
    // The window is the whole ring (the order of its values does not matter to the median); its
    // middle value is the third newest, two slots after the oldest, which the next add replaces.
    const float median = detail::median_of_5(ring_[0], ring_[1], ring_[2], ring_[3], ring_[4]);
    add_filtered(ring_steps_[(raw_ + 2) % 5], median, log_value);
    return;
  }
  const std::uint32_t n = raw_;
  std::array<float, 5> w{};
  for (std::uint32_t i = 0; i < n; ++i) w[i] = ring_[i];
  for (std::uint32_t i = 1; i < n; ++i)
    for (std::uint32_t j = i; j > 0 && w[j - 1] > w[j]; --j) std::swap(w[j - 1], w[j]);
  // Up to n = 4 the window only grows: emit once it spans 1 or 3 values (odd, a true middle).
  if (n % 2 == 0) return;
  add_filtered(ring_steps_[(n - 1) / 2], w[n / 2], log_value);
}

void OnsetDetector::add_filtered(std::int64_t step, double log_value, double raw) noexcept {
  if (ready_) {
    ++values_;
    step_cusum(step, log_value, raw, /*learn=*/true);
    return;
  }
  if (values_ == 0) first_step_ = step;
  const std::int64_t offset = step - first_step_;
  // Steps of the buffered values are kept as offsets (small objects); a run whose first few
  // sampled steps span more than 2^31 steps has its baseline taken from what came before.
  if (offset < 0 || offset > INT32_MAX) {
    start_baseline();
    ++values_;
    step_cusum(step, log_value, raw, true);
    return;
  }
  buffer_[static_cast<std::size_t>(values_)] = static_cast<float>(log_value);
  raw_buffer_[static_cast<std::size_t>(values_)] = static_cast<float>(raw);
  buffer_offsets_[static_cast<std::size_t>(values_)] = static_cast<std::int32_t>(offset);
  ++values_;
  if (values_ >= baseline_n_) start_baseline();
}

void OnsetDetector::start_baseline() noexcept {
  const int n = std::min<int>(values_, baseline_n_);
  std::array<float, kMaxBaseline> v = buffer_;
  const auto median = [](float* a, int count) {
    for (int i = 1; i < count; ++i)  // insertion sort: at most kMaxBaseline values
      for (int j = i; j > 0 && a[j - 1] > a[j]; --j) std::swap(a[j - 1], a[j]);
    return count % 2 ? a[count / 2] : 0.5f * (a[count / 2 - 1] + a[count / 2]);
  };
  float mu = 0.0f, mad = 0.0f;
  if (n > 0) {
    mu = median(v.data(), n);  // level: of the running medians
    // Scale: of the raw values (the running median's own spread is smaller than the noise's),
    // from successive differences: a shift inside the baseline values is one large difference
    // and leaves their median alone. |a - b| of two noise values has the spread of sqrt(2) x one.
    if (n >= 3) {
      std::array<float, kMaxBaseline> d{};
      for (int i = 1; i < n; ++i)
        d[static_cast<std::size_t>(i - 1)] =
            std::fabs(raw_buffer_[static_cast<std::size_t>(i)] -
                      raw_buffer_[static_cast<std::size_t>(i - 1)]);
      mad = median(d.data(), n - 1) / 1.41421356f;
    }
  }
  mu_ = std::min(mu, cap_);
  // A floor on the scale: on noise-free data (MAD 0) any wiggle would otherwise be "significant";
  // a quarter of the smallest shift that counts keeps the test about shifts that matter.
  sigma_ = std::max(1.4826f * mad, shift_ / 4.0f);
  cap_step_ = threshold_ / static_cast<float>(persist_);
  // The baseline counts as n values already learnt from.
  learn_n_ = static_cast<float>(n);
  learn_sum_ = static_cast<double>(n) * mu_;
  learn_abs_ = static_cast<double>(n) * sigma_ / 1.2533;  // E|x - mu| = sigma * sqrt(2/pi)
  ready_ = true;
  for (int i = 0; i < n; ++i)
    step_cusum(first_step_ + buffer_offsets_[static_cast<std::size_t>(i)],
               buffer_[static_cast<std::size_t>(i)], raw_buffer_[static_cast<std::size_t>(i)],
               /*learn=*/false);
}

void OnsetDetector::step_cusum(std::int64_t step, double x, double raw, bool learn) noexcept {
  const bool first = first_value_;
  first_value_ = false;
  if (found_) {
    sum_since_ += x;
    ++count_since_;
    return;
  }
  const double mu = mu_, sigma = sigma_;
  const double shift = static_cast<double>(shift_);
  // Reference value: half the design shift, and at least one standard deviation so that noise
  // alone drifts S down fast (a shift smaller than 2 sigma is not told apart per value anyway).
  // Where shift <= 2 sigma the quotient is at most 1 and k is 1 without dividing.
  const double k = shift <= 2.0 * sigma ? 1.0 : std::max(1.0, shift / (2.0 * sigma));
  const bool in_control = s_ <= 0.0;
  // Clipped increment: one value moves S by at most h/m, so m high values are needed to reach h.
  // In control, a value below mu + k sigma (by a margin far above rounding, so that z <= k
  // however z rounds) leaves S at 0 whatever its z, and z is not computed: most values of a
  // healthy series, each a division saved.
  const bool quiet = in_control && sigma >= 1e-30 && x - mu <= k * sigma * (1.0 - 1e-12);
  const double inc =
      quiet ? 0.0 : std::min((x - mu) / sigma - k, static_cast<double>(cap_step_));
  if (in_control && inc > 0.0) {
    start_ = step;
    excursion_sum_ = 0.0;
    excursion_count_ = 0;
    excursion_from_first_ = first;
  }
  s_ = std::max(0.0, s_ + inc);
  if (inc > 0.0) {
    if (high_run_ == 0) run_start_ = step;
    high_run_ = static_cast<std::uint8_t>(std::min<int>(high_run_ + 1, persist_));
  } else {
    high_run_ = 0;
  }
  if (learn && in_control) {
    // The level learns from the running median, the scale from the raw value's deviation.
    const double d = std::clamp(x - mu, -3.0 * sigma, 3.0 * sigma);
    const double e = std::clamp(raw - mu, -3.0 * sigma, 3.0 * sigma);
    learn_n_ += 1.0f;
    learn_sum_ += mu + d;
    learn_abs_ += std::fabs(e);
    mu_ = std::min(static_cast<float>(learn_sum_ / learn_n_), cap_);
    sigma_ = std::max(static_cast<float>(1.2533 * learn_abs_ / learn_n_), shift_ / 4.0f);
  }
  if (s_ <= 0.0) return;
  excursion_sum_ += x;
  ++excursion_count_;
  // Tolerance: m values at the cap add up to h exactly, up to rounding.
  if (s_ >= static_cast<double>(threshold_) * (1.0 - 1e-6)) {
    if (high_run_ < persist_) {
      // Enough evidence in sum, but the shift has not persisted m values in a row (spikes and
      // noise after them): hold S at h until it does, or until the values settle back.
      s_ = static_cast<double>(threshold_);
      return;
    }
    if (excursion_from_first_ && cap_ >= 3.0e38f) {
      // Warm-up: with no earlier level to shift from, this excursion is no onset. Hold S at h
      // until the series settles back to its baseline and the excursion ends.
      s_ = static_cast<double>(threshold_);
      return;
    }
    found_ = true;
    onset_ = run_start_;
    sum_since_ = excursion_sum_;
    count_since_ = excursion_count_;
  }
}

std::optional<std::int64_t> OnsetDetector::onset() const noexcept {
  if (!ready_) {
    if (values_ < 3) return std::nullopt;
    OnsetDetector copy = *this;
    copy.start_baseline();
    return copy.onset();
  }
  if (!found_) return std::nullopt;
  return onset_;
}

double OnsetDetector::baseline() const noexcept {
  if (!ready_) {
    if (values_ < 3) return std::numeric_limits<double>::quiet_NaN();
    OnsetDetector copy = *this;
    copy.start_baseline();
    return copy.baseline();
  }
  return std::exp(static_cast<double>(mu_));
}

double OnsetDetector::since() const noexcept {
  if (!ready_) {
    if (values_ < 3) return std::numeric_limits<double>::quiet_NaN();
    OnsetDetector copy = *this;
    copy.start_baseline();
    return copy.since();
  }
  if (!found_ || count_since_ == 0) return std::numeric_limits<double>::quiet_NaN();
  return std::exp(sum_since_ / count_since_);
}

}  // namespace laggard
