#include "analysis/median.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace laggard::detail {
namespace {

// xorshift64: enough to place pivots and samples where no input order can line up with them.
struct Xorshift {
  std::uint64_t state;
  std::ptrdiff_t below(std::ptrdiff_t bound) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<std::ptrdiff_t>(state % static_cast<std::uint64_t>(bound));
  }
};

// Places the k-th smallest of a[0, n) at a[k], no larger ones before it, no smaller ones after.
// Quickselect with random pivots and a branch-free partition. std::nth_element branches on
// every comparison, and on 16k timings (half above the pivot, at random) those branches
// mispredict: with it, a robust-mode window of 16k ranks x 16 stages took 1.4x the CPU time
// (bench/detector_bench.cc), and some input orders slowed it further.
void select_kth(double* a, std::ptrdiff_t n, std::ptrdiff_t k) {
  Xorshift rng{0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(n)};
  std::ptrdiff_t lo = 0, hi = n;  // the k-th smallest is in a[lo, hi)
  while (hi - lo > 24) {
    const std::ptrdiff_t len = hi - lo;
    const double x = a[lo + rng.below(len)];
    const double y = a[lo + rng.below(len)];
    const double z = a[lo + rng.below(len)];
    const double pivot = std::max(std::min(x, y), std::min(std::max(x, y), z));  // median of 3
    // Lomuto without branches: every element is swapped, the boundary moves by the comparison.
    std::ptrdiff_t less_end = lo;
    for (std::ptrdiff_t i = lo; i < hi; ++i) {
      const double v = a[i];
      a[i] = a[less_end];
      a[less_end] = v;
      less_end += v < pivot;
    }
    if (k < less_end) {
      hi = less_end;
      continue;
    }
    // Split the rest into == pivot and > pivot, so that many equal times cannot stall it.
    std::ptrdiff_t equal_end = less_end;
    for (std::ptrdiff_t i = less_end; i < hi; ++i) {
      const double v = a[i];
      a[i] = a[equal_end];
      a[equal_end] = v;
      equal_end += v <= pivot;
    }
    if (k < equal_end) return;  // a[k] == pivot
    lo = equal_end;
  }
  std::sort(a + lo, a + hi);
}

// The k_hi-th smallest of buf[0, n), or with `even` its mean with the (k_hi - 1)-th (k_hi >= 1
// then): the median when k_hi = n / 2. Reorders buf.
double middle_of(double* buf, std::ptrdiff_t n, std::ptrdiff_t k_hi, bool even) {
  select_kth(buf, n, k_hi);
  const double hi = buf[k_hi];
  if (!even) return hi;
  const double lo = *std::max_element(buf, buf + k_hi);
  const double mid = 0.5 * (lo + hi);
  // Two values near the largest double overflow their sum: halves first (the same bits
  // wherever the sum is finite).
  return std::isfinite(mid) || !std::isfinite(lo) || !std::isfinite(hi) ? mid : 0.5 * lo + 0.5 * hi;
}

// The values of a column the median is taken over: data[i], or |data[i] - center| for the MAD.
struct Values {
  const double* data;
  double center;
  bool deviations;
  double operator()(std::ptrdiff_t i) const {
    return deviations ? std::fabs(data[i] - center) : data[i];
  }
};

// One pass: counts the values below lo, and writes those in [lo, hi] to band[0, kept).
// Branch-free; every value is written to band[kept] and kept only advances past the kept ones.
std::ptrdiff_t band_pass(const Values& values, std::ptrdiff_t n, double lo, double hi,
                         double* band, std::ptrdiff_t& below_out) {
  std::ptrdiff_t below = 0, kept = 0, i = 0;
#if defined(__SSE2__)
  const __m128d lo2 = _mm_set1_pd(lo), hi2 = _mm_set1_pd(hi);
  const __m128d center = _mm_set1_pd(values.center);
  const __m128d sign = _mm_set1_pd(-0.0);
  for (; i + 2 <= n; i += 2) {
    __m128d x = _mm_loadu_pd(values.data + i);
    if (values.deviations) x = _mm_andnot_pd(sign, _mm_sub_pd(x, center));  // |x - center|
    const int lt = _mm_movemask_pd(_mm_cmplt_pd(x, lo2));
    const int in = _mm_movemask_pd(_mm_and_pd(_mm_cmpge_pd(x, lo2), _mm_cmple_pd(x, hi2)));
    below += (lt & 1) + (lt >> 1);
    _mm_storel_pd(band + kept, x);
    kept += in & 1;
    _mm_storeh_pd(band + kept, x);
    kept += in >> 1;
  }
#endif
  for (; i < n; ++i) {
    const double v = values(i);
    below += v < lo;
    band[kept] = v;
    kept += (v >= lo) & (v <= hi);
  }
  below_out = below;
  return kept;
}

// Below this size a copy and a quickselect are as fast as sampling.
constexpr std::size_t kSampleFrom = 2048;
constexpr std::ptrdiff_t kSample = 512;
// The pivots sit this many standard deviations of the sample median's position either side of
// it: the median falls between them except about once in 10^4 (then the plain path runs).
constexpr double kBandSigmas = 3.9;

// Floyd–Rivest's idea: two pivots from a random sample bracket the median closely; one pass
// counts the values below the lower pivot and keeps those between the pivots (a sixth of
// them), and the median is selected among the kept ones. ~3x faster than copying and
// selecting at 16k values (BM_Median in bench/detector_bench.cc).
double sampled_median(std::size_t count, const Values& value, std::vector<double>& scratch) {
  const auto n = static_cast<std::ptrdiff_t>(count);
  const std::ptrdiff_t k_hi = n / 2;  // the upper middle; the lower one is k_hi - 1 for even n
  const bool even = n % 2 == 0;
  if (scratch.size() < count + kSample) scratch.resize(count + kSample);
  double* sample = scratch.data() + count;
  Xorshift rng{0x2545F4914F6CDD1Dull ^ static_cast<std::uint64_t>(n)};
  for (std::ptrdiff_t i = 0; i < kSample; ++i) sample[i] = value(rng.below(n));
  const double spread = kBandSigmas * 0.5 * std::sqrt(static_cast<double>(kSample));
  const auto centre = static_cast<std::ptrdiff_t>(
      static_cast<double>(kSample) * static_cast<double>(k_hi) / static_cast<double>(n));
  const std::ptrdiff_t lo_at =
      std::max<std::ptrdiff_t>(0, centre - static_cast<std::ptrdiff_t>(spread));
  const std::ptrdiff_t hi_at =
      std::min<std::ptrdiff_t>(kSample - 1, centre + static_cast<std::ptrdiff_t>(spread));
  select_kth(sample, kSample, hi_at);
  const double hi_pivot = sample[hi_at];
  select_kth(sample, hi_at, lo_at);  // sample[0, hi_at) holds everything below sample[hi_at]
  const double lo_pivot = sample[lo_at];

  double* band = scratch.data();
  std::ptrdiff_t below = 0;
  const std::ptrdiff_t kept = band_pass(value, n, lo_pivot, hi_pivot, band, below);
  const std::ptrdiff_t first = even ? k_hi - 1 : k_hi;  // both middles must be in the band
  if (below <= first && k_hi < below + kept) return middle_of(band, kept, k_hi - below, even);
  // The sample missed (rare): copy everything and select.
  for (std::ptrdiff_t i = 0; i < n; ++i) band[i] = value(i);
  return middle_of(band, n, k_hi, even);
}

}  // namespace

double kth_inplace(double* buf, std::size_t n, std::size_t k) {
  select_kth(buf, static_cast<std::ptrdiff_t>(n), static_cast<std::ptrdiff_t>(k));
  return buf[k];
}

double median_inplace(double* buf, std::size_t count) {
  if (count == 0) return 0.0;
  const auto n = static_cast<std::ptrdiff_t>(count);
  return middle_of(buf, n, n / 2, n % 2 == 0);
}

namespace {

double median_of_values(std::size_t n, const Values& values, std::vector<double>& scratch) {
  if (n == 0) return 0.0;
  if (n >= kSampleFrom) return sampled_median(n, values, scratch);
  if (scratch.size() < n) scratch.resize(n);
  for (std::size_t i = 0; i < n; ++i) scratch[i] = values(static_cast<std::ptrdiff_t>(i));
  return median_inplace(scratch.data(), n);
}

}  // namespace

double median_of(const double* data, std::size_t n, std::vector<double>& scratch) {
  return median_of_values(n, Values{data, 0.0, false}, scratch);
}

double typical_of(const double* data, std::size_t n, std::vector<double>& scratch) {
  if (n == 0) return 0.0;
  if (scratch.size() < n) scratch.resize(n);
  std::copy(data, data + n, scratch.begin());
  std::sort(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(n));
  const std::size_t cut = n / 5;
  double sum = 0.0;
  for (std::size_t i = cut; i < n - cut; ++i) sum += scratch[i];
  return sum / static_cast<double>(n - 2 * cut);
}

double median_abs_deviation(const double* data, std::size_t n, double center,
                            std::vector<double>& scratch) {
  return median_of_values(n, Values{data, center, true}, scratch);
}

}  // namespace laggard::detail
