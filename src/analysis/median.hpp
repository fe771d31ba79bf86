// The median laggard's analyses share (detector, run summary, run comparison).
#pragma once

#include <cstddef>

namespace laggard::detail {

/// Median of buf[0, n), reordering the buffer; 0 when n is 0. The mean of the two middle values
/// for even n. O(n) expected, branch-free partition (see median.cc for why).
double median_inplace(double* buf, std::size_t n);

}  // namespace laggard::detail
