// The median laggard's analyses share (detector, run summary, run comparison).
#pragma once

#include <cstddef>
#include <vector>

namespace laggard::detail {

/// Median of buf[0, n), reordering the buffer; 0 when n is 0. The mean of the two middle values
/// for even n. O(n) expected, branch-free partition (see median.cc for why).
double median_inplace(double* buf, std::size_t n);

/// Median of data[0, n), which is left as it is; `scratch` is working space (grown as needed,
/// kept by the caller between calls). Same result as median_inplace on a copy. For large n it
/// reads the data once after a small sample instead of copying and partitioning it
/// (median.cc), the detector's cost per stage and window.
double median_of(const double* data, std::size_t n, std::vector<double>& scratch);

/// Median of |data[i] - center| over i in [0, n) (the MAD around `center`), same working space.
double median_abs_deviation(const double* data, std::size_t n, double center,
                            std::vector<double>& scratch);

}  // namespace laggard::detail
