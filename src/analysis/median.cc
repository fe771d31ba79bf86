#include "analysis/median.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(LAGGARD_NO_CLONES)
#include <immintrin.h>
#define LAGGARD_SMALL_SORT 1
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

#if defined(LAGGARD_SMALL_SORT)
// Sorting up to 64 values with a sorting network in AVX registers (four doubles each), for the
// detector's per-stage medians at tens of ranks: ~45 selections of 64 values a window, where the
// quickselect's partitions and the final std::sort's mispredicted compares cost ~0.3-1 us each
// and the network ~0.1-0.2 us. A full sort places every order statistic, so the selection's
// contract holds; values with equal bits are interchangeable, so every order statistic and every
// sum over a range of them is what the quickselect gives, unless the values hold a NaN (no order)
// or a negative zero (equal to +0 with other bits): those keep the quickselect.
#define LAGGARD_AVX __attribute__((target("avx")))

// Batcher's odd-even merge sort: the compare-exchanges (lo < hi, the smaller to lo) that sort n
// (a power of two) inputs.
struct Network {
  int size = 0;
  unsigned char lo[64] = {}, hi[64] = {};
};
constexpr Network batcher_network(int n) {
  Network net;
  for (int p = 1; p < n; p += p)
    for (int k = p; k > 0; k /= 2)
      for (int j = k % p; j + k < n; j += k + k)
        for (int i = 0; i < k; ++i)
          if ((i + j) / (p + p) == (i + j + k) / (p + p)) {
            net.lo[net.size] = static_cast<unsigned char>(i + j);
            net.hi[net.size] = static_cast<unsigned char>(i + j + k);
            ++net.size;
          }
  return net;
}

LAGGARD_AVX inline void compare_exchange(__m256d& a, __m256d& b) {
  const __m256d lo = _mm256_min_pd(a, b);
  b = _mm256_max_pd(a, b);
  a = lo;
}

LAGGARD_AVX inline __m256d reverse4(__m256d x) {
  return _mm256_permute_pd(_mm256_permute2f128_pd(x, x, 1), 0b0101);
}

// Sorts the four lanes of x, which hold a bitonic sequence: the last two half-cleaners.
LAGGARD_AVX inline __m256d sort_bitonic4(__m256d x) {
  __m256d t = _mm256_permute2f128_pd(x, x, 1);  // lanes 2 3 0 1
  x = _mm256_blend_pd(_mm256_min_pd(x, t), _mm256_max_pd(x, t), 0b1100);
  t = _mm256_permute_pd(x, 0b0101);  // lanes 1 0 3 2
  return _mm256_blend_pd(_mm256_min_pd(x, t), _mm256_max_pd(x, t), 0b1010);
}

// Merges the ascending runs w[0, q) and w[q, 2q) of q registers into one: the second run
// reversed makes the whole a bitonic sequence; then the half-cleaners across registers and the
// last two within each.
template <int q>
LAGGARD_AVX inline void merge_runs(__m256d* w) {
#pragma GCC unroll 8
  for (int i = 0; i < q / 2; ++i) std::swap(w[q + i], w[2 * q - 1 - i]);
#pragma GCC unroll 8
  for (int i = q; i < 2 * q; ++i) w[i] = reverse4(w[i]);
#pragma GCC unroll 8
  for (int d = q; d >= 1; d /= 2) {
#pragma GCC unroll 16
    for (int i = 0; i < 2 * q; ++i)
      if ((i & d) == 0) compare_exchange(w[i], w[i + d]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 2 * q; ++i) w[i] = sort_bitonic4(w[i]);
}

// Merges the R / q runs of q registers in u pairwise, then the runs of 2q, up to one run.
template <int q, int R>
LAGGARD_AVX inline void merge_all(__m256d* u) {
#pragma GCC unroll 4
  for (int s = 0; s < R; s += 2 * q) merge_runs<q>(u + s);
  if constexpr (2 * q < R) merge_all<2 * q, R>(u);
}

// Sorts a[0, n) ascending (n <= 4R; R = 4, 8 or 16 registers, the lanes past n padded with
// +inf) and returns true, or returns false with a left as it is where it holds a NaN or a
// negative zero. Each lane's column across the R registers is sorted by Batcher's network, the
// 4 x 4 blocks are transposed into four sorted runs, and the runs are merged pairwise.
template <int R>
LAGGARD_AVX bool sort_network(double* a, std::ptrdiff_t n) {
  constexpr Network net = batcher_network(R);
  constexpr int Q = R / 4;  // registers per run after the transposition
  alignas(32) static constexpr std::int64_t kLanes[8] = {-1, -1, -1, -1, 0, 0, 0, 0};
  __m256d v[R], u[R];
  __m256d odd = _mm256_setzero_pd();
  const __m256d zero = _mm256_setzero_pd();
  const __m256d inf = _mm256_set1_pd(std::numeric_limits<double>::infinity());
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const std::ptrdiff_t left = n - 4 * r;  // values of a in this register
    if (left >= 4) {
      v[r] = _mm256_loadu_pd(a + 4 * r);
    } else if (left > 0) {  // the first `left` lanes from a (the rest not read), then +inf
      const __m256i mask =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 4 - left));
      v[r] = _mm256_blendv_pd(inf, _mm256_maskload_pd(a + 4 * r, mask), _mm256_castsi256_pd(mask));
    } else {
      v[r] = inf;
    }
    // NaN (unordered with itself), or a zero with the sign bit set.
    odd = _mm256_or_pd(odd, _mm256_cmp_pd(v[r], v[r], _CMP_UNORD_Q));
    odd = _mm256_or_pd(odd, _mm256_and_pd(_mm256_cmp_pd(v[r], zero, _CMP_EQ_OQ), v[r]));
  }
  if (_mm256_movemask_pd(odd) != 0) return false;
#pragma GCC unroll 64
  for (int c = 0; c < net.size; ++c) compare_exchange(v[net.lo[c]], v[net.hi[c]]);
#pragma GCC unroll 4
  for (int b = 0; b < Q; ++b) {
    const __m256d* x = v + 4 * b;
    const __m256d t0 = _mm256_unpacklo_pd(x[0], x[1]), t1 = _mm256_unpackhi_pd(x[0], x[1]);
    const __m256d t2 = _mm256_unpacklo_pd(x[2], x[3]), t3 = _mm256_unpackhi_pd(x[2], x[3]);
    u[0 * Q + b] = _mm256_permute2f128_pd(t0, t2, 0x20);  // lane 0 of the four registers
    u[1 * Q + b] = _mm256_permute2f128_pd(t1, t3, 0x20);
    u[2 * Q + b] = _mm256_permute2f128_pd(t0, t2, 0x31);
    u[3 * Q + b] = _mm256_permute2f128_pd(t1, t3, 0x31);
  }
  merge_all<Q, R>(u);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const std::ptrdiff_t left = n - 4 * r;
    if (left >= 4) {
      _mm256_storeu_pd(a + 4 * r, u[r]);
    } else if (left > 0) {
      const __m256i mask =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 4 - left));
      _mm256_maskstore_pd(a + 4 * r, mask, u[r]);
    }
  }
  return true;
}

// Sorts a[0, n) for n <= 64 with the network and returns true, or returns false (a left as it
// is) where the processor lacks AVX or the values hold a NaN or a negative zero.
bool sort_small(double* a, std::ptrdiff_t n) {
  static const bool has_avx = __builtin_cpu_supports("avx");
  if (!has_avx) return false;
  return n <= 16   ? sort_network<4>(a, n)
         : n <= 32 ? sort_network<8>(a, n)
                   : sort_network<16>(a, n);
}
#else
bool sort_small(double*, std::ptrdiff_t) { return false; }
#endif

// Below this many values the network is not worth its padding (std::sort's insertion sort
// takes them).
constexpr std::ptrdiff_t kNetworkFrom = 9;
constexpr std::ptrdiff_t kNetworkTo = 64;

// Places the k-th smallest of a[0, n) at a[k], no larger ones before it, no smaller ones after.
// Quickselect with random pivots and a branch-free partition. std::nth_element branches on
// every comparison, and on 16k timings (half above the pivot, at random) those branches
// mispredict: with it, a robust-mode window of 16k ranks x 16 stages took 1.4x the CPU time
// (bench/detector_bench.cc), and some input orders slowed it further. From kNetworkFrom to
// kNetworkTo values the network sorts them all instead, and it returns true (a[k - 1] is then
// the largest value before a[k], with the bits of every value equal to it).
bool select_kth(double* a, std::ptrdiff_t n, std::ptrdiff_t k) {
  if (n >= kNetworkFrom && n <= kNetworkTo && sort_small(a, n)) return true;
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
    if (k < equal_end) return false;  // a[k] == pivot
    lo = equal_end;
  }
  if (hi - lo < kNetworkFrom || !sort_small(a + lo, hi - lo)) std::sort(a + lo, a + hi);
  return false;
}

// The k_hi-th smallest of buf[0, n), or with `even` its mean with the (k_hi - 1)-th (k_hi >= 1
// then): the median when k_hi = n / 2. Reorders buf.
// The mean of the two middle values of an even count.
double mean_of_middles(double lo, double hi) {
  const double mid = 0.5 * (lo + hi);
  // Two values near the largest double overflow their sum: halves first (the same bits
  // wherever the sum is finite).
  return std::isfinite(mid) || !std::isfinite(lo) || !std::isfinite(hi) ? mid : 0.5 * lo + 0.5 * hi;
}

// `sorted`: whether the selection sorted all of buf (select_kth's result).
double middle_of(double* buf, std::ptrdiff_t n, std::ptrdiff_t k_hi, bool even, bool* sorted_out = nullptr) {
  const bool sorted = select_kth(buf, n, k_hi);
  if (sorted_out) *sorted_out = sorted;
  const double hi = buf[k_hi];
  if (!even) return hi;
  const double lo = sorted ? buf[k_hi - 1] : *std::max_element(buf, buf + k_hi);
  return mean_of_middles(lo, hi);
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

// The widest vector code the band pass and the selection use: 2 AVX-512, 1 AVX2, 0 neither
// (SSE2 and the scalar selection); what the processor has, or less (set_median_width).
int width_supported() {
#if defined(LAGGARD_SMALL_SORT)
  static const int width =
      !__builtin_cpu_supports("popcnt") ? 0
      : __builtin_cpu_supports("avx512f") ? 2
      : __builtin_cpu_supports("avx2")    ? 1
                                          : 0;
  return width;
#else
  return 0;
#endif
}
int& width_limit() {
  static int limit = 2;
  return limit;
}
int width_in_use() { return std::min(width_supported(), width_limit()); }

#if defined(LAGGARD_SMALL_SORT)
// The band pass below with four (AVX2) or eight (AVX-512) values a step: the kept values of a
// step are packed to the front of a register (a permutation from a table, or a compress) and the
// whole register is stored at band[kept]. The same values in the same order as the SSE2 loop
// (the pass is a quarter of a 16,384-value median there; here about a tenth). Both return the
// index they stopped at; the caller's loop takes the rest.
struct CompressTable {
  std::int32_t lanes[16][8] = {};
};
constexpr CompressTable compress_table() {
  CompressTable t;
  for (int m = 0; m < 16; ++m) {
    int out = 0;
    for (int lane = 0; lane < 4; ++lane)
      if (m & (1 << lane)) {
        t.lanes[m][2 * out] = 2 * lane;
        t.lanes[m][2 * out + 1] = 2 * lane + 1;
        ++out;
      }
  }
  return t;
}
alignas(32) constexpr CompressTable kCompress = compress_table();

__attribute__((target("avx2,popcnt"))) std::ptrdiff_t band_pass_avx2(
    const Values& values, std::ptrdiff_t n, double lo, double hi, double* band,
    std::ptrdiff_t& below_out, std::ptrdiff_t& kept_out) {
  std::ptrdiff_t below = 0, kept = 0, i = 0;
  const __m256d lo4 = _mm256_set1_pd(lo), hi4 = _mm256_set1_pd(hi);
  const __m256d center = _mm256_set1_pd(values.center);
  const __m256d sign = _mm256_set1_pd(-0.0);
  for (; i + 4 <= n; i += 4) {
    __m256d x = _mm256_loadu_pd(values.data + i);
    if (values.deviations) x = _mm256_andnot_pd(sign, _mm256_sub_pd(x, center));
    const int lt = _mm256_movemask_pd(_mm256_cmp_pd(x, lo4, _CMP_LT_OQ));
    const int in = _mm256_movemask_pd(
        _mm256_and_pd(_mm256_cmp_pd(x, lo4, _CMP_GE_OQ), _mm256_cmp_pd(x, hi4, _CMP_LE_OQ)));
    const __m256i perm =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(kCompress.lanes[in]));
    _mm256_storeu_pd(band + kept, _mm256_castsi256_pd(_mm256_permutevar8x32_epi32(
                                      _mm256_castpd_si256(x), perm)));
    below += __builtin_popcount(static_cast<unsigned>(lt));
    kept += __builtin_popcount(static_cast<unsigned>(in));
  }
  below_out = below;
  kept_out = kept;
  return i;
}

__attribute__((target("avx512f,popcnt"))) std::ptrdiff_t band_pass_avx512(
    const Values& values, std::ptrdiff_t n, double lo, double hi, double* band,
    std::ptrdiff_t& below_out, std::ptrdiff_t& kept_out) {
  std::ptrdiff_t below = 0, kept = 0, i = 0;
  const __m512d lo8 = _mm512_set1_pd(lo), hi8 = _mm512_set1_pd(hi);
  const __m512d center = _mm512_set1_pd(values.center);
  const __m512i magnitude = _mm512_set1_epi64(0x7fffffffffffffffll);
  for (; i + 8 <= n; i += 8) {
    __m512d x = _mm512_loadu_pd(values.data + i);
    if (values.deviations)  // |x - center|: the sign bit cleared
      x = _mm512_castsi512_pd(
          _mm512_and_si512(_mm512_castpd_si512(_mm512_sub_pd(x, center)), magnitude));
    const __mmask8 lt = _mm512_cmp_pd_mask(x, lo8, _CMP_LT_OQ);
    const __mmask8 in = _mm512_mask_cmp_pd_mask(_mm512_cmp_pd_mask(x, lo8, _CMP_GE_OQ), x, hi8,
                                                _CMP_LE_OQ);
    _mm512_storeu_pd(band + kept, _mm512_maskz_compress_pd(in, x));
    below += __builtin_popcount(static_cast<unsigned>(lt));
    kept += __builtin_popcount(static_cast<unsigned>(in));
  }
  below_out = below;
  kept_out = kept;
  return i;
}

// One three-way partition of a[0, n) around `pivot` with eight values a step: those under it
// packed to lt[0, nl) (lt does not overlap a), those over it packed in place to a[0, ng) (a
// store at a[ng] never reaches a value not yet read: ng <= i); those equal are dropped (n - nl -
// ng of them). Returns the largest value under the pivot (-inf where none).
__attribute__((target("avx512f,popcnt"))) double partition3_avx512(
    double* a, std::ptrdiff_t n, double pivot, double* lt, std::ptrdiff_t& nl_out,
    std::ptrdiff_t& ng_out) {
  std::ptrdiff_t nl = 0, ng = 0, i = 0;
  const __m512d p8 = _mm512_set1_pd(pivot);
  __m512d most = _mm512_set1_pd(-std::numeric_limits<double>::infinity());
  for (; i + 8 <= n; i += 8) {
    const __m512d x = _mm512_loadu_pd(a + i);
    const __mmask8 less = _mm512_cmp_pd_mask(x, p8, _CMP_LT_OQ);
    const __mmask8 more = _mm512_cmp_pd_mask(x, p8, _CMP_GT_OQ);
    most = _mm512_mask_max_pd(most, less, most, x);
    _mm512_storeu_pd(lt + nl, _mm512_maskz_compress_pd(less, x));
    _mm512_storeu_pd(a + ng, _mm512_maskz_compress_pd(more, x));
    nl += __builtin_popcount(static_cast<unsigned>(less));
    ng += __builtin_popcount(static_cast<unsigned>(more));
  }
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, most);
  double top = lanes[0];
  for (int l = 1; l < 8; ++l) top = std::max(top, lanes[l]);
  for (; i < n; ++i) {
    const double v = a[i];
    if (v < pivot) {
      lt[nl++] = v;
      top = std::max(top, v);
    } else if (v > pivot) {
      a[ng++] = v;
    }
  }
  nl_out = nl;
  ng_out = ng;
  return top;
}
#endif

// Below this many values the wide selection hands over to the sort.
constexpr std::ptrdiff_t kWideSelectTo = 64;

// The k-th smallest of a[0, n) (n <= 8 + room of a and tmp: both hold n + 8 values), and with
// `below` the (k - 1)-th (k >= 1 then), for values without a NaN: quickselect with three-way
// partitions out of place, eight values a step (AVX-512), where the branch-free partition in
// place (select_kth) takes a value a step. Both buffers are overwritten. Order statistics are
// values: the same as select_kth's wherever values that compare equal have equal bits, which
// fails only for zeros (-0 == +0): returns false where either result is a zero, or where the
// processor lacks AVX-512 (the caller then selects as before).
bool wide_select_available() { return width_in_use() == 2; }

bool select_wide(double* a, double* tmp, std::ptrdiff_t n, std::ptrdiff_t k, bool below,
                 double& kth, double& before) {
#if defined(LAGGARD_SMALL_SORT)
  if (!wide_select_available()) return false;
  Xorshift rng{0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(n)};
  double* cur = a;
  double* other = tmp;
  double lower = -std::numeric_limits<double>::infinity();  // largest value dropped below k
  while (n > kWideSelectTo) {
    const double x = cur[rng.below(n)], y = cur[rng.below(n)], z = cur[rng.below(n)];
    const double pivot = std::max(std::min(x, y), std::min(std::max(x, y), z));
    std::ptrdiff_t nl = 0, ng = 0;
    const double top = partition3_avx512(cur, n, pivot, other, nl, ng);
    const std::ptrdiff_t equal = n - nl - ng;
    if (k < nl) {  // among the values under the pivot (now in `other`)
      std::swap(cur, other);
      n = nl;
      continue;
    }
    if (k < nl + equal) {  // the pivot itself
      kth = pivot;
      before = k > nl ? pivot : std::max(lower, top);
      return kth != 0.0 && (!below || before != 0.0);
    }
    lower = equal > 0 ? pivot : std::max(lower, top);
    k -= nl + equal;
    n = ng;  // among the values over it (in place in `cur`)
  }
  if (n < kNetworkFrom || !sort_small(cur, n)) std::sort(cur, cur + n);
  kth = cur[k];
  before = k > 0 ? cur[k - 1] : lower;
  return kth != 0.0 && (!below || before != 0.0);
#else
  (void)a, (void)tmp, (void)n, (void)k, (void)below, (void)kth, (void)before;
  return false;
#endif
}

// One pass: counts the values below lo, and writes those in [lo, hi] to band[0, kept).
// Branch-free; every value is written to band[kept] and kept only advances past the kept ones
// (band has room for n values: the wide loops store a whole register at band[kept], kept <= i).
std::ptrdiff_t band_pass(const Values& values, std::ptrdiff_t n, double lo, double hi,
                         double* band, std::ptrdiff_t& below_out) {
  std::ptrdiff_t below = 0, kept = 0, i = 0;
#if defined(LAGGARD_SMALL_SORT)
  const int wide = width_in_use();
  if (wide == 2)
    i = band_pass_avx512(values, n, lo, hi, band, below, kept);
  else if (wide == 1)
    i = band_pass_avx2(values, n, lo, hi, band, below, kept);
#endif
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
  // The band (up to count values), the sample, and the wide selection's second buffer (count
  // values and one register's room past each).
  const std::size_t room = 2 * count + kSample + std::max<std::size_t>(16, kSample + 8);
  if (scratch.size() < room) scratch.resize(room);
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
  double lo_pivot, hi_pivot;
  bool nan = false;  // the wide selection orders values without a NaN only
  for (std::ptrdiff_t i = 0; i < kSample; ++i) nan |= sample[i] != sample[i];
  if (!nan && wide_select_available()) {
    // The same two order statistics of the sample, each from a copy (the wide selection leaves
    // its buffers unordered).
    double* copy = scratch.data() + count + kSample;
    double* tmp = copy + kSample + 8;
    double unused;
    std::copy(sample, sample + kSample, copy);
    select_wide(copy, tmp, kSample, hi_at, false, hi_pivot, unused);
    std::copy(sample, sample + kSample, copy);
    select_wide(copy, tmp, kSample, lo_at, false, lo_pivot, unused);
  } else {
    select_kth(sample, kSample, hi_at);
    hi_pivot = sample[hi_at];
    select_kth(sample, hi_at, lo_at);  // sample[0, hi_at) holds everything below sample[hi_at]
    lo_pivot = sample[lo_at];
  }

  double* band = scratch.data();
  std::ptrdiff_t below = 0;
  const std::ptrdiff_t kept = band_pass(value, n, lo_pivot, hi_pivot, band, below);
  const std::ptrdiff_t first = even ? k_hi - 1 : k_hi;  // both middles must be in the band
  if (below <= first && k_hi < below + kept) {
    double hi = 0.0, lo = 0.0;
    if (!wide_select_available()) return middle_of(band, kept, k_hi - below, even);
    if (select_wide(band, scratch.data() + count + kSample, kept, k_hi - below, even, hi, lo)) {
      return even ? mean_of_middles(lo, hi) : hi;
    }
    // A zero among the middles: the band again, selected as before.
    band_pass(value, n, lo_pivot, hi_pivot, band, below);
    return middle_of(band, kept, k_hi - below, even);
  }
  // The sample missed (rare): copy everything and select.
  for (std::ptrdiff_t i = 0; i < n; ++i) band[i] = value(i);
  return middle_of(band, n, k_hi, even);
}

}  // namespace

int median_width() { return width_in_use(); }

int set_median_width(int width) {
  const int before = width_limit();
  width_limit() = std::max(0, std::min(width, 2));
  return before;
}

double kth_inplace(double* buf, std::size_t n, std::size_t k) {
  select_kth(buf, static_cast<std::ptrdiff_t>(n), static_cast<std::ptrdiff_t>(k));
  return buf[k];
}

double median_inplace(double* buf, std::size_t count) {
  if (count == 0) return 0.0;
  const auto n = static_cast<std::ptrdiff_t>(count);
  return middle_of(buf, n, n / 2, n % 2 == 0);
}

double median_inplace(double* buf, std::size_t count, bool& sorted) {
  sorted = false;
  if (count == 0) return 0.0;
  const auto n = static_cast<std::ptrdiff_t>(count);
  return middle_of(buf, n, n / 2, n % 2 == 0, &sorted);
}

double median_abs_deviation_sorted(const double* x, std::size_t count, double center) {
  // |x[i] - center| falls while x[i] < center and rises after (x - center is monotone in x): the
  // deviations are two sorted runs, a(i) = |x[s - 1 - i] - center| below the center and
  // b(j) = |x[s + j] - center| from it on. The k + 1 smallest deviations are the first i of a and
  // the first k + 1 - i of b for the one i where neither run's next value is smaller than the
  // other's last: found by bisection (a merge of the runs branches on every value, at random).
  const auto n = static_cast<std::ptrdiff_t>(count);
  const std::ptrdiff_t k = n / 2;  // the upper middle
  const std::ptrdiff_t s = std::lower_bound(x, x + n, center) - x, m = n - s;
  const auto a = [&](std::ptrdiff_t i) { return std::fabs(x[s - 1 - i] - center); };
  const auto b = [&](std::ptrdiff_t j) { return std::fabs(x[s + j] - center); };
  std::ptrdiff_t lo = std::max<std::ptrdiff_t>(0, k + 1 - m), hi = std::min(s, k + 1);
  while (lo < hi) {
    const std::ptrdiff_t i = (lo + hi) / 2, j = k + 1 - i;  // i < s, j >= 1
    if (a(i) < b(j - 1))
      lo = i + 1;
    else
      hi = i;
  }
  const std::ptrdiff_t i = lo, j = k + 1 - lo;
  constexpr double none = -std::numeric_limits<double>::infinity();  // deviations are >= 0
  const double last_a = i > 0 ? a(i - 1) : none, last_b = j > 0 ? b(j - 1) : none;
  const double kth = std::max(last_a, last_b);
  if (n % 2 != 0) return kth;
  // The k - 1-th: the larger of what is left once the k-th is taken from its run.
  const double before = last_a >= last_b ? std::max(i > 1 ? a(i - 2) : none, last_b)
                                         : std::max(last_a, j > 1 ? b(j - 2) : none);
  return mean_of_middles(before, kth);
}

namespace {

double median_of_values(std::size_t n, const Values& values, std::vector<double>& scratch) {
  if (n == 0) return 0.0;
  if (n >= kSampleFrom) return sampled_median(n, values, scratch);
  if (static_cast<std::ptrdiff_t>(n) > kWideSelectTo && wide_select_available()) {
    // A copy and the wide selection (its second buffer after the copy), for values without a
    // NaN; else, or where a middle is a zero, as below.
    if (scratch.size() < 2 * n + 16) scratch.resize(2 * n + 16);
    double* copy = scratch.data();
    bool nan = false;
    for (std::size_t i = 0; i < n; ++i) {
      copy[i] = values(static_cast<std::ptrdiff_t>(i));
      nan |= copy[i] != copy[i];
    }
    const auto count = static_cast<std::ptrdiff_t>(n);
    const bool even = n % 2 == 0;
    double hi = 0.0, lo = 0.0;
    if (!nan && select_wide(copy, copy + n + 8, count, count / 2, even, hi, lo))
      return even ? mean_of_middles(lo, hi) : hi;
  }
  if (scratch.size() < n) scratch.resize(n);
  for (std::size_t i = 0; i < n; ++i) scratch[i] = values(static_cast<std::ptrdiff_t>(i));
  return median_inplace(scratch.data(), n);
}

}  // namespace

double kth_of(const double* data, std::size_t n, std::size_t k, std::vector<double>& scratch,
              double* before) {
  const auto count = static_cast<std::ptrdiff_t>(n);
  const auto at = static_cast<std::ptrdiff_t>(k);
  if (scratch.size() < 2 * n + 16) scratch.resize(2 * n + 16);
  double* copy = scratch.data();
  bool nan = false;
  for (std::size_t i = 0; i < n; ++i) {
    copy[i] = data[i];
    nan |= data[i] != data[i];
  }
  double kth = 0.0, below = 0.0;
  if (!nan && count > kWideSelectTo &&
      select_wide(copy, copy + n + 8, count, at, before != nullptr, kth, below)) {
    if (before) *before = below;
    return kth;
  }
  std::copy(data, data + n, copy);
  const bool sorted = select_kth(copy, count, at);
  if (before) *before = sorted ? copy[at - 1] : *std::max_element(copy, copy + at);
  return copy[at];
}

double median_of(const double* data, std::size_t n, std::vector<double>& scratch) {
  return median_of_values(n, Values{data, 0.0, false}, scratch);
}

double median_of(const double* data, std::size_t n, std::vector<double>& scratch, bool& sorted) {
  sorted = false;
  if (n == 0 || n >= kSampleFrom) return median_of(data, n, scratch);
  if (scratch.size() < n) scratch.resize(n);
  std::copy(data, data + n, scratch.begin());
  return median_inplace(scratch.data(), n, sorted);
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
