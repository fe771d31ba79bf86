// Onset detection: a clipped one-sided CUSUM on log-time against a robust early baseline.
#include "laggard/onset.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

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
  if (ready_) {
    ++values_;
    step_cusum(step, log_value);
    return;
  }
  buffer_[static_cast<std::size_t>(values_)] = static_cast<float>(log_value);
  buffer_steps_[static_cast<std::size_t>(values_)] = step;
  ++values_;
  if (values_ >= baseline_n_) start_baseline();
}

void OnsetDetector::start_baseline() noexcept {
  const int n = std::min<int>(values_, baseline_n_);
  std::array<float, kMaxBaseline> v = buffer_;
  const auto median = [](float* a, int count) {
    std::sort(a, a + count);
    return count % 2 ? a[count / 2] : 0.5f * (a[count / 2 - 1] + a[count / 2]);
  };
  const float mu = median(v.data(), n);
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = std::fabs(v[static_cast<std::size_t>(i)] - mu);
  const float mad = median(v.data(), n);
  mu_ = std::min(mu, cap_);
  // A floor on the scale: on noise-free data (MAD 0) any wiggle would otherwise be "significant";
  // a quarter of the smallest shift that counts keeps the test about shifts that matter.
  sigma_ = std::max(1.4826f * mad, shift_ / 4.0f);
  // CUSUM reference value: half the design shift (the optimal k for a shift of min_shift), and
  // at least half a standard deviation so that noise alone drifts S down.
  k_ = std::max(0.5f, shift_ / (2.0f * sigma_));
  cap_step_ = threshold_ / static_cast<float>(persist_);
  ready_ = true;
  for (int i = 0; i < n; ++i)
    step_cusum(buffer_steps_[static_cast<std::size_t>(i)], buffer_[static_cast<std::size_t>(i)]);
}

void OnsetDetector::step_cusum(std::int64_t step, double x) noexcept {
  const bool first = first_value_;
  first_value_ = false;
  if (found_) {
    sum_since_ += x;
    ++count_since_;
    return;
  }
  const double z = (x - mu_) / sigma_;
  // Clipped increment: one value moves S by at most h/m, so m high values are needed to reach h.
  const double inc = std::min(z - static_cast<double>(k_), static_cast<double>(cap_step_));
  if (s_ <= 0.0 && inc > 0.0) {
    start_ = step;
    excursion_sum_ = 0.0;
    excursion_count_ = 0;
    excursion_from_first_ = first;
  }
  s_ = std::max(0.0, s_ + inc);
  if (s_ <= 0.0) return;
  excursion_sum_ += x;
  ++excursion_count_;
  // Tolerance: m values at the cap add up to h exactly, up to rounding.
  if (s_ >= static_cast<double>(threshold_) * (1.0 - 1e-6)) {
    if (excursion_from_first_ && cap_ >= 3.0e38f) {
      // Warm-up: with no earlier level to shift from, this excursion is no onset. Hold S at h
      // until the series settles back to its baseline and the excursion ends.
      s_ = static_cast<double>(threshold_);
      return;
    }
    found_ = true;
    onset_ = start_;
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
