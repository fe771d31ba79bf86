// Onset detectors stepped together: the in-control, learning step of OnsetDetector (nearly every
// value of a healthy series) for four series at a time, with the same operations in the same
// order, so the same bits; every other step is OnsetDetector::add itself.
#include "laggard/detail/onset_columns.hpp"

#include <cmath>
#include <limits>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define LAGGARD_ONSET_AVX2 1
#endif

namespace laggard::detail {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::size_t padded(std::size_t n) { return (n + 3) / 4 * 4; }

#if LAGGARD_ONSET_AVX2
bool has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#else
bool has_avx2() { return false; }
#endif

struct WarmLanes {
  float* ring[5];
  std::int64_t* ring_steps[5];
  std::int32_t* phase;
  std::uint32_t* raw;
  std::int32_t* values;
  float *mu, *sigma, *learn_n;
  double *learn_sum, *learn_abs;
  const std::int64_t* warm;
  double* staged;
};

#if LAGGARD_ONSET_AVX2
// The quiet step of every warm series with a staged value (OnsetDetector::add, add_filtered and
// step_cusum with ready_, !found_, s_ = 0 and z <= k): the value into the ring, the median of
// 5, z's test, the learning sums, mu and sigma; their staged values are cleared. Series whose
// value is not quiet, and cold ones with a value, are left in `later` (bit i of later[b]: lane i
// of block b) for add() itself, their values staged.
__attribute__((target("avx2"))) void quiet_steps(const WarmLanes& w, std::size_t n,
                                                 std::int64_t step, double shift, float shift4,
                                                 float cap, unsigned char* later) {
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d two = _mm256_set1_pd(2.0);
  const __m256d three = _mm256_set1_pd(3.0);
  const __m256d minus_three = _mm256_set1_pd(-3.0);
  const __m256d margin = _mm256_set1_pd(1.0 - 1e-12);
  const __m256d tiny = _mm256_set1_pd(1e-30);
  const __m256d scale = _mm256_set1_pd(1.2533);
  const __m256d vshift = _mm256_set1_pd(shift);
  const __m256d sign = _mm256_set1_pd(-0.0);
  const __m256d nan = _mm256_set1_pd(kNaN);
  const __m128 onef = _mm_set1_ps(1.0f);
  const __m128 vcap = _mm_set1_ps(cap);
  const __m128 vshift4 = _mm_set1_ps(shift4);
  const __m256i vstep = _mm256_set1_epi64x(step);
  const __m128i bits32 = _mm_setr_epi32(1, 2, 4, 8);
  const __m256i bits64 = _mm256_setr_epi64x(1, 2, 4, 8);
  // std::min(a, b) is (b < a ? b : a), which MINPS(b, a) is; std::max(a, b) is (a < b ? b : a),
  // MAXPS(b, a). Operands in that order give the scalar code's bits, signed zeros included.
  const auto lo = [](__m128 x, __m128 y) { return _mm_min_ps(y, x); };
  const auto hi = [](__m128 x, __m128 y) { return _mm_max_ps(y, x); };
  for (std::size_t i = 0, b = 0; i < n; i += 4, ++b) {
    const __m256d v = _mm256_loadu_pd(w.staged + i);
    const __m256d present = _mm256_cmp_pd(v, v, _CMP_ORD_Q);
    const __m256d warm = _mm256_castsi256_pd(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.warm + i)));
    const int present_bits = _mm256_movemask_pd(present);
    const int warm_bits = _mm256_movemask_pd(_mm256_and_pd(present, warm));
    later[b] = static_cast<unsigned char>(present_bits & ~warm_bits);
    if (warm_bits == 0) continue;
    const __m128i elig32 =
        _mm_cmpeq_epi32(_mm_and_si128(_mm_set1_epi32(warm_bits), bits32), bits32);
    // The value into its ring slot, the median of the five (median_of_5's network).
    const __m128 vf = _mm256_cvtpd_ps(v);
    const __m128i ph = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.phase + i));
    __m128 old[5], r[5];
    for (int k = 0; k < 5; ++k) {
      old[k] = _mm_loadu_ps(w.ring[k] + i);
      const __m128i at = _mm_and_si128(elig32, _mm_cmpeq_epi32(ph, _mm_set1_epi32(k)));
      r[k] = _mm_blendv_ps(old[k], vf, _mm_castsi128_ps(at));
    }
    const __m128 low = hi(lo(r[0], r[1]), lo(r[2], r[3]));
    const __m128 high = lo(hi(r[0], r[1]), hi(r[2], r[3]));
    const __m128 median = hi(lo(r[4], low), lo(hi(r[4], low), high));
    // step_cusum: k, the quiet test.
    const __m256d x = _mm256_cvtps_pd(median);
    const __m128 mu_f = _mm_loadu_ps(w.mu + i);
    const __m128 sigma_f = _mm_loadu_ps(w.sigma + i);
    const __m256d mu = _mm256_cvtps_pd(mu_f);
    const __m256d sigma = _mm256_cvtps_pd(sigma_f);
    const __m256d two_sigma = _mm256_mul_pd(two, sigma);
    const __m256d small_shift = _mm256_cmp_pd(vshift, two_sigma, _CMP_LE_OQ);
    __m256d k = one;
    if ((_mm256_movemask_pd(small_shift) & warm_bits) != warm_bits) {
      const __m256d q = _mm256_div_pd(vshift, two_sigma);
      k = _mm256_blendv_pd(_mm256_max_pd(q, one), one, small_shift);
    }
    const __m256d diff = _mm256_sub_pd(x, mu);
    const __m256d limit = _mm256_mul_pd(_mm256_mul_pd(k, sigma), margin);
    const __m256d quiet = _mm256_and_pd(_mm256_cmp_pd(diff, limit, _CMP_LE_OQ),
                                        _mm256_cmp_pd(sigma, tiny, _CMP_GE_OQ));
    const int ok_bits = _mm256_movemask_pd(quiet) & warm_bits;
    later[b] = static_cast<unsigned char>(present_bits & ~ok_bits);
    if (ok_bits == 0) continue;
    const __m128 ok32 = _mm_castsi128_ps(
        _mm_cmpeq_epi32(_mm_and_si128(_mm_set1_epi32(ok_bits), bits32), bits32));
    const __m256d ok64 = _mm256_castsi256_pd(
        _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_set1_epi64x(ok_bits), bits64), bits64));
    // The learning: winsorized deviations, the sums, mu and sigma.
    const __m256d top = _mm256_mul_pd(three, sigma);
    const __m256d bottom = _mm256_mul_pd(minus_three, sigma);
    // std::clamp(v, lo, hi): v < lo ? lo : hi < v ? hi : v.
    const __m256d d = _mm256_min_pd(top, _mm256_max_pd(bottom, diff));
    const __m256d e = _mm256_min_pd(top, _mm256_max_pd(bottom, _mm256_sub_pd(v, mu)));
    const __m128 n_old = _mm_loadu_ps(w.learn_n + i);
    const __m128 n_new = _mm_add_ps(n_old, onef);
    const __m256d sum_old = _mm256_loadu_pd(w.learn_sum + i);
    const __m256d abs_old = _mm256_loadu_pd(w.learn_abs + i);
    const __m256d sum_new = _mm256_add_pd(sum_old, _mm256_add_pd(mu, d));
    const __m256d abs_new = _mm256_add_pd(abs_old, _mm256_andnot_pd(sign, e));
    const __m256d count = _mm256_cvtps_pd(n_new);
    const __m128 mu_new = _mm_min_ps(vcap, _mm256_cvtpd_ps(_mm256_div_pd(sum_new, count)));
    const __m128 sigma_new = _mm_max_ps(
        vshift4, _mm256_cvtpd_ps(_mm256_div_pd(_mm256_mul_pd(scale, abs_new), count)));
    // Commit the quiet lanes (their staged values taken).
    _mm256_storeu_pd(w.staged + i, _mm256_blendv_pd(v, nan, ok64));
    for (int k5 = 0; k5 < 5; ++k5) {
      _mm_storeu_ps(w.ring[k5] + i, _mm_blendv_ps(old[k5], r[k5], ok32));
      const __m256i at = _mm256_and_si256(
          _mm256_castpd_si256(ok64),
          _mm256_cmpeq_epi64(_mm256_cvtepi32_epi64(ph), _mm256_set1_epi64x(k5)));
      __m256i* steps = reinterpret_cast<__m256i*>(w.ring_steps[k5] + i);
      _mm256_storeu_si256(steps, _mm256_blendv_epi8(_mm256_loadu_si256(steps), vstep, at));
    }
    const __m128i ok32i = _mm_castps_si128(ok32);
    const __m128i next = _mm_andnot_si128(_mm_cmpeq_epi32(ph, _mm_set1_epi32(4)),
                                          _mm_add_epi32(ph, _mm_set1_epi32(1)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(w.phase + i), _mm_blendv_epi8(ph, next, ok32i));
    const __m128i inc = _mm_and_si128(ok32i, _mm_set1_epi32(1));
    __m128i* raw = reinterpret_cast<__m128i*>(w.raw + i);
    _mm_storeu_si128(raw, _mm_add_epi32(_mm_loadu_si128(raw), inc));
    __m128i* values = reinterpret_cast<__m128i*>(w.values + i);
    _mm_storeu_si128(values, _mm_add_epi32(_mm_loadu_si128(values), inc));
    _mm_storeu_ps(w.learn_n + i, _mm_blendv_ps(n_old, n_new, ok32));
    _mm_storeu_ps(w.mu + i, _mm_blendv_ps(mu_f, mu_new, ok32));
    _mm_storeu_ps(w.sigma + i, _mm_blendv_ps(sigma_f, sigma_new, ok32));
    _mm256_storeu_pd(w.learn_sum + i, _mm256_blendv_pd(sum_old, sum_new, ok64));
    _mm256_storeu_pd(w.learn_abs + i, _mm256_blendv_pd(abs_old, abs_new, ok64));
  }
}
#endif

}  // namespace

OnsetColumns::OnsetColumns(const OnsetOptions& options, double baseline_cap)
    : prototype_(options, baseline_cap) {}

std::int32_t OnsetColumns::add_series() {
  const std::size_t i = cold_.size();
  cold_.push_back(prototype_);
  const std::size_t size = padded(i + 1);
  if (size > staged_.size()) {
    staged_.resize(size, kNaN);
    warm_.resize(size, 0);
    for (int k = 0; k < 5; ++k) {
      ring_[k].resize(size, 0.0f);
      ring_steps_[k].resize(size, 0);
    }
    phase_.resize(size, 0);
    raw_.resize(size, 0);
    values_.resize(size, 0);
    mu_.resize(size, 0.0f);
    sigma_.resize(size, 0.0f);
    learn_n_.resize(size, 0.0f);
    learn_sum_.resize(size, 0.0);
    learn_abs_.resize(size, 0.0);
  }
  return static_cast<std::int32_t>(i);
}

// stage()'s other cases: a value of another step than those staged, or a second value.
void OnsetColumns::stage_again(std::int32_t series, std::int64_t step, double log_value) noexcept {
  const auto i = static_cast<std::size_t>(series);
  if (any_staged_ && step != staged_step_) add_window();
  if (!std::isnan(staged_[i])) {
    add_one(i, staged_step_, staged_[i]);
  }
  staged_[i] = log_value;
  staged_step_ = step;
  any_staged_ = true;
}

void OnsetColumns::spill(std::size_t i, OnsetDetector& d) const noexcept {
  for (int k = 0; k < 5; ++k) {
    d.ring_[static_cast<std::size_t>(k)] = ring_[k][i];
    d.ring_steps_[static_cast<std::size_t>(k)] = ring_steps_[k][i];
  }
  d.raw_ = raw_[i];
  d.values_ = values_[i];
  d.mu_ = mu_[i];
  d.sigma_ = sigma_[i];
  d.learn_n_ = learn_n_[i];
  d.learn_sum_ = learn_sum_[i];
  d.learn_abs_ = learn_abs_[i];
}

void OnsetColumns::try_warm(std::size_t i) noexcept {
  const OnsetDetector& d = cold_[i];
  // In control and learning, past the running median's warm-up: the state quiet_steps keeps.
  if (!has_avx2() || !d.ready_ || d.found_ || !(d.s_ <= 0.0) || d.first_value_ ||
      d.high_run_ != 0 || d.raw_ < 5)
    return;
  for (int k = 0; k < 5; ++k) {
    ring_[k][i] = d.ring_[static_cast<std::size_t>(k)];
    ring_steps_[k][i] = d.ring_steps_[static_cast<std::size_t>(k)];
  }
  phase_[i] = static_cast<std::int32_t>(d.raw_ % 5);
  raw_[i] = d.raw_;
  values_[i] = d.values_;
  mu_[i] = d.mu_;
  sigma_[i] = d.sigma_;
  learn_n_[i] = d.learn_n_;
  learn_sum_[i] = d.learn_sum_;
  learn_abs_[i] = d.learn_abs_;
  warm_[i] = -1;
  ++warm_count_;
}

void OnsetColumns::add_one(std::size_t i, std::int64_t step, double log_value) noexcept {
  OnsetDetector& d = cold_[i];
  if (warm_[i] != 0) {
    spill(i, d);
    warm_[i] = 0;
    --warm_count_;
  }
  d.add(step, log_value);
  try_warm(i);
}

void OnsetColumns::add_window() noexcept {
  if (!any_staged_) return;
  any_staged_ = false;
  const std::int64_t step = staged_step_;
  const std::size_t n = cold_.size();
#if LAGGARD_ONSET_AVX2
  if (warm_count_ > 0) {
    WarmLanes w;
    for (int k = 0; k < 5; ++k) {
      w.ring[k] = ring_[k].data();
      w.ring_steps[k] = ring_steps_[k].data();
    }
    w.phase = phase_.data();
    w.raw = raw_.data();
    w.values = values_.data();
    w.mu = mu_.data();
    w.sigma = sigma_.data();
    w.learn_n = learn_n_.data();
    w.learn_sum = learn_sum_.data();
    w.learn_abs = learn_abs_.data();
    w.warm = warm_.data();
    w.staged = staged_.data();
    const std::size_t blocks = padded(n) / 4;
    later_.resize(blocks);
    quiet_steps(w, padded(n), step, static_cast<double>(prototype_.shift_),
                prototype_.shift_ / 4.0f, prototype_.cap_, later_.data());
    for (std::size_t b = 0; b < blocks; ++b) {
      for (unsigned bits = later_[b]; bits != 0; bits &= bits - 1) {
        const std::size_t i = 4 * b + static_cast<std::size_t>(__builtin_ctz(bits));
        const double v = staged_[i];
        staged_[i] = kNaN;
        add_one(i, step, v);
      }
    }
    return;
  }
#endif
  for (std::size_t i = 0; i < n; ++i) {
    const double v = staged_[i];
    if (std::isnan(v)) continue;
    staged_[i] = kNaN;
    add_one(i, step, v);
  }
}

OnsetDetector OnsetColumns::detector(std::int32_t series) const noexcept {
  const auto i = static_cast<std::size_t>(series);
  OnsetDetector d = cold_[i];
  if (warm_[i] != 0) spill(i, d);
  return d;
}

}  // namespace laggard::detail
