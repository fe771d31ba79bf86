// The median laggard's analyses share (detector, run summary, run comparison).
#pragma once

#include <cstddef>
#include <vector>

namespace laggard::detail {

/// Median of buf[0, n), reordering the buffer; 0 when n is 0. The mean of the two middle values
/// for even n. O(n) expected, branch-free partition (see median.cc for why).
double median_inplace(double* buf, std::size_t n);

/// As median_inplace; `sorted` tells whether buf[0, n) was left sorted (ascending, without NaN
/// or negative zero), so that other order statistics can be read off it.
double median_inplace(double* buf, std::size_t n, bool& sorted);

/// median_abs_deviation of sorted[0, n) (ascending, n >= 1) around `center`, both finite: the
/// same value, from a merge of the deviations below and above the center (each side already in
/// order) instead of a selection.
double median_abs_deviation_sorted(const double* sorted, std::size_t n, double center);

/// The k-th smallest of buf[0, n) (k < n), placed at buf[k] with no larger value before it and
/// no smaller one after; reorders the buffer. The same branch-free selection as median_inplace.
double kth_inplace(double* buf, std::size_t n, std::size_t k);

/// The k-th smallest of data[0, n) (k < n), which is left as it is, and with `before` the
/// (k - 1)-th (k >= 1 then); `scratch` is working space. The values kth_inplace places at buf[k]
/// and buf[k - 1] of a sorted buffer.
double kth_of(const double* data, std::size_t n, std::size_t k, std::vector<double>& scratch,
              double* before = nullptr);

/// Median of data[0, n), which is left as it is; `scratch` is working space (grown as needed,
/// kept by the caller between calls). Same result as median_inplace on a copy. For large n it
/// reads the data once after a small sample instead of copying and partitioning it
/// (median.cc), the detector's cost per stage and window.
double median_of(const double* data, std::size_t n, std::vector<double>& scratch);
/// As median_of; `sorted` tells whether scratch[0, n) was left holding data[0, n) sorted (as
/// median_inplace's `sorted`).
double median_of(const double* data, std::size_t n, std::vector<double>& scratch, bool& sorted);

/// The widest vector code the median's selections use now (2 AVX-512, 1 AVX2, 0 neither): with
/// 2, kth_of and median_of select out of place, eight values a step.
int median_width();

/// For tests: the widest vector code median_of, median_abs_deviation and kth_of may use (2
/// AVX-512, 1 AVX2, 0 neither; at most what the processor has). Returns the previous setting.
/// Every width gives the same values. Not thread-safe.
int set_median_width(int width);

/// The median of five values without a branch (the onset detector's running median, per rank,
/// stage and window, where a sort's compares on noisy values mispredicted often): the larger of
/// the pairs' minima and the smaller of their maxima drop the lowest and the highest of four, and
/// the median of those two and the fifth value is the median of all five, exactly the middle
/// element of the sorted five. No NaN.
inline float median_of_5(float a, float b, float c, float d, float e) {
  const auto lo = [](float x, float y) { return y < x ? y : x; };
  const auto hi = [](float x, float y) { return x < y ? y : x; };
  const float low = hi(lo(a, b), lo(c, d)), high = lo(hi(a, b), hi(c, d));
  return hi(lo(e, low), lo(hi(e, low), high));
}

/// The typical value of a verdict's windows (the materiality gate, the run summary): the mean of
/// data[0, n) without its lowest and highest floor(n / 5) values (a 20 % trimmed mean), 0 when n
/// is 0. Unlike a median it sees a slowdown present in a third of the windows; a few windows far
/// out on either side (pauses) do not move it.
double typical_of(const double* data, std::size_t n, std::vector<double>& scratch);

/// Median of |data[i] - center| over i in [0, n) (the MAD around `center`), same working space.
double median_abs_deviation(const double* data, std::size_t n, double center,
                            std::vector<double>& scratch);

}  // namespace laggard::detail
