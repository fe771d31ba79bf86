// laggard — the lesson's first-regressed-stage rule over one vector of per-stage times.
#include <cmath>
#include <stdexcept>
#include <string>

#include "laggard/detector.hpp"

namespace laggard {

std::optional<Regression> first_regression(const std::vector<double>& baseline,
                                           const std::vector<double>& current,
                                           double relative_threshold) {
  if (baseline.size() != current.size())
    throw std::invalid_argument("first_regression: baseline has " +
                                std::to_string(baseline.size()) + " stages but current has " +
                                std::to_string(current.size()));
  if (!(relative_threshold >= 0.0))  // also rejects NaN
    throw std::invalid_argument("first_regression: relative_threshold must be >= 0, got " +
                                std::to_string(relative_threshold));
  for (std::size_t i = 0; i < baseline.size(); ++i) {
    const double before = baseline[i];
    const double after = current[i];
    // A zero baseline has no scale: the threshold is then an absolute one.
    const double limit = before != 0.0 ? before * (1.0 + relative_threshold) : relative_threshold;
    if (after > limit) return Regression{i, after - before};
  }
  return std::nullopt;
}

}  // namespace laggard
