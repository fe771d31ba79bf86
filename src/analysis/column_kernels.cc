#include "analysis/column_kernels.hpp"

#include <algorithm>

#include "laggard/export.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace laggard::detail {

ColumnExtent column_extent(const double* ms, std::size_t n) noexcept {
  std::size_t i = 0;
  double lo = ms[0], hi = ms[0], sum = 0.0;
#if defined(__SSE2__)
  if (n >= 4) {
    __m128d s0 = _mm_setzero_pd(), s1 = _mm_setzero_pd();
    __m128d mn = _mm_set1_pd(ms[0]), mx = mn;
    for (; i + 4 <= n; i += 4) {
      const __m128d a = _mm_loadu_pd(ms + i);
      const __m128d b = _mm_loadu_pd(ms + i + 2);
      s0 = _mm_add_pd(s0, a);
      s1 = _mm_add_pd(s1, b);
      mn = _mm_min_pd(mn, _mm_min_pd(a, b));
      mx = _mm_max_pd(mx, _mm_max_pd(a, b));
    }
    const __m128d s = _mm_add_pd(s0, s1);
    sum = _mm_cvtsd_f64(s) + _mm_cvtsd_f64(_mm_unpackhi_pd(s, s));
    lo = std::min(_mm_cvtsd_f64(mn), _mm_cvtsd_f64(_mm_unpackhi_pd(mn, mn)));
    hi = std::max(_mm_cvtsd_f64(mx), _mm_cvtsd_f64(_mm_unpackhi_pd(mx, mx)));
  }
#endif
  for (; i < n; ++i) {
    sum += ms[i];
    lo = ms[i] < lo ? ms[i] : lo;
    hi = ms[i] > hi ? ms[i] : hi;
  }
  return {sum, lo, hi};
}

std::size_t first_equal(const double* ms, std::size_t n, double value) noexcept {
  std::size_t i = 0;
#if defined(__SSE2__)
  // Four times per step, one branch on the combined mask: the scan costs a quarter of the
  // compare-and-branch loop it replaces.
  const __m128d v = _mm_set1_pd(value);
  for (; i + 4 <= n; i += 4) {
    const __m128d eq = _mm_or_pd(_mm_cmpeq_pd(_mm_loadu_pd(ms + i), v),
                                 _mm_cmpeq_pd(_mm_loadu_pd(ms + i + 2), v));
    if (_mm_movemask_pd(eq) != 0) break;
  }
#endif
  for (; i < n; ++i)
    if (ms[i] == value) return i;
  return n;
}

void flag_slow(const double* ms, std::size_t n, const SlowRule& rule, std::vector<int>& out) {
  std::size_t i = 0;
#if defined(__SSE2__)
  // Two times per compare; a mask of all four tests, and only a set bit takes a branch.
  const __m128d ref = _mm_set1_pd(rule.ref);
  const __m128d rel = _mm_set1_pd(rule.relative_limit);
  const __m128d abs = _mm_set1_pd(rule.absolute);
  const __m128d margin = _mm_set1_pd(rule.margin);
  for (; i + 2 <= n; i += 2) {
    const __m128d t = _mm_loadu_pd(ms + i);
    const __m128d excess = _mm_sub_pd(t, ref);
    const __m128d slow = _mm_and_pd(
        _mm_and_pd(_mm_cmpgt_pd(t, ref),
                   _mm_or_pd(_mm_cmpge_pd(t, rel), _mm_cmpge_pd(excess, abs))),
        _mm_cmpge_pd(excess, margin));
    const int bits = _mm_movemask_pd(slow);
    if (LAGGARD_UNLIKELY(bits != 0)) {
      if (bits & 1) out.push_back(static_cast<int>(i));
      if (bits & 2) out.push_back(static_cast<int>(i + 1));
    }
  }
#endif
  for (; i < n; ++i)
    if (rule.slow(ms[i])) out.push_back(static_cast<int>(i));
}

}  // namespace laggard::detail
