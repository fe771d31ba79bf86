// laggard — test seam: the statistics behind run comparison (compare_runs) and the run summary,
// for their tests. Not part of the stable API. All are pure and thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "laggard/export.hpp"

namespace laggard::detail {

/// Median (mean of the two middle values for an even count); 0 for an empty input.
LAGGARD_API double median_of(std::vector<double> values);

/// Two-sided p-value of the Mann-Whitney U (Wilcoxon rank-sum) test that `a` and `b` come from
/// the same distribution. Exact when there are no ties and |a|·|b| <= 2500, otherwise the normal
/// approximation with tie and continuity corrections. 1 when either side is empty.
LAGGARD_API double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b);

/// Percentile bootstrap interval of median(current) / median(baseline): each resample draws both
/// sides with replacement. `level` is the coverage (0.95). Deterministic for a given `seed`.
/// A resample whose baseline median is 0 gives +inf (or 1 when both are 0).
struct Interval {
  double low = 0.0;
  double high = 0.0;
};
LAGGARD_API Interval bootstrap_ratio_of_medians(const std::vector<double>& baseline,
                                                const std::vector<double>& current, int resamples,
                                                double level, std::uint64_t seed);

/// Holm step-down adjusted p-values, in the input's order (monotone, at most 1).
LAGGARD_API std::vector<double> holm_adjust(const std::vector<double>& p);

}  // namespace laggard::detail
