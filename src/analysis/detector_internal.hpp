// laggard — what the detector's files share (detector.cc, detector_threshold.cc,
// detector_sequential.cc): the MAD-to-sigma factor, a finding's cost, and the keys of its tracks.
// Private to the library.
#pragma once

#include "laggard/detector.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

namespace laggard::detector_detail {

// MAD × 1.4826 estimates the standard deviation of normally distributed times
// (docs/detection.md, The constants).
constexpr double kMadToSigma = 1.4826;

// A finding's cost to the step (RankFinding::cost_ms, cost_share) from its times and the step
// time of its cohort in the window.
inline void set_cost(RankFinding& f, double step_ms) {
  f.cost_ms = std::max(0.0, f.ms - f.ref_ms);
  f.cost_share = step_ms > 0.0 ? std::min(1.0, f.cost_ms / step_ms) : 0.0;
}

inline int popcount(std::uint32_t v) {
  int n = 0;
  for (; v; v &= v - 1) ++n;
  return n;
}

// The key of a (cohort, stage) in tracks_, seq_tracks_ and confirmed_at_, written into `key`
// (a buffer the caller reuses).
inline const std::string& stage_key(std::string& key, std::string_view cohort,
                                    std::string_view stage) {
  key.assign(cohort);
  key += '\x1f';
  key += stage;
  return key;
}

}  // namespace laggard::detector_detail
