// Loops over one stage's per-rank times that the detector runs for every window: written once,
// with SSE2 on x86-64 (min/max and compare-and-count do not vectorize on their own without
// -ffast-math) and a plain loop elsewhere.
#pragma once

#include <cstddef>
#include <vector>

namespace laggard::detail {

struct ColumnExtent {
  double sum = 0.0;
  double min = 0.0;
  double max = 0.0;
};

/// Sum, min and max of ms[0, n), n >= 1, all finite. The sum runs in four interleaved partial
/// sums (pairwise order, not strictly left to right).
ColumnExtent column_extent(const double* ms, std::size_t n) noexcept;

/// The first position i in [0, n) with ms[i] == value, or n.
std::size_t first_equal(const double* ms, std::size_t n, double value) noexcept;

/// The RFC rule's test for one time, as the detector applies it:
///   t > ref  and  (t >= relative_limit  or  t - ref >= absolute)  and  t - ref >= margin.
struct SlowRule {
  double ref = 0.0;
  double relative_limit = 0.0;
  double absolute = 0.0;
  double margin = 0.0;  ///< -inf when unused

  bool slow(double t) const noexcept {
    const double excess = t - ref;
    // Non-short-circuit &, |: about half the ranks are above the mean, so branching on each
    // condition would mispredict.
    return (t > ref) & ((t >= relative_limit) | (excess >= absolute)) & (excess >= margin);
  }
};

/// Appends to `out` the positions i in [0, n) where rule.slow(ms[i]), ascending.
void flag_slow(const double* ms, std::size_t n, const SlowRule& rule, std::vector<int>& out);

}  // namespace laggard::detail
