#include "analysis/median.hpp"

#include <algorithm>
#include <cstdint>

namespace laggard::detail {
namespace {

// Places the k-th smallest of a[0, n) at a[k], no larger ones before it, no smaller ones after.
// Quickselect with random pivots and a branch-free partition. std::nth_element branches on
// every comparison, and on 16k timings (half above the pivot, at random) those branches
// mispredict: with it, a robust-mode window of 16k ranks x 16 stages took 1.4x the CPU time
// (bench/detector_bench.cc), and some input orders slowed it further.
void select_kth(double* a, std::ptrdiff_t n, std::ptrdiff_t k) {
  std::uint64_t rng = 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(n);
  auto random_below = [&rng](std::ptrdiff_t bound) {  // xorshift64: enough for pivots
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return static_cast<std::ptrdiff_t>(rng % static_cast<std::uint64_t>(bound));
  };
  std::ptrdiff_t lo = 0, hi = n;  // the k-th smallest is in a[lo, hi)
  while (hi - lo > 24) {
    const std::ptrdiff_t len = hi - lo;
    const double x = a[lo + random_below(len)];
    const double y = a[lo + random_below(len)];
    const double z = a[lo + random_below(len)];
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

}  // namespace

double median_inplace(double* buf, std::size_t count) {
  if (count == 0) return 0.0;
  const auto n = static_cast<std::ptrdiff_t>(count);
  const std::ptrdiff_t mid = n / 2;
  select_kth(buf, n, mid);
  const double hi = buf[mid];
  if (n % 2 == 1) return hi;
  const double lo = *std::max_element(buf, buf + mid);
  return 0.5 * (lo + hi);
}

}  // namespace laggard::detail
