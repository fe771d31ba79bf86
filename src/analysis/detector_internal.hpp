// laggard — what the detector's files share (detector.cc, detector_threshold.cc,
// detector_sequential.cc): the MAD-to-sigma factor, a finding's cost, and the keys of its tracks.
// Private to the library.
#pragma once

#include "laggard/detector.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
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

// Stage names are short: compare them inline, eight bytes at a time, instead of calling memcmp.
inline bool same_name(std::string_view a, std::string_view b) {
  const std::size_t n = a.size();
  if (n != b.size()) return false;
  const char* p = a.data();
  const char* q = b.data();
  auto same8 = [](const char* x, const char* y) {
    std::uint64_t u, v;
    std::memcpy(&u, x, 8);
    std::memcpy(&v, y, 8);
    return u == v;
  };
  auto same4 = [](const char* x, const char* y) {
    std::uint32_t u, v;
    std::memcpy(&u, x, 4);
    std::memcpy(&v, y, 4);
    return u == v;
  };
  if (n >= 8) {
    for (std::size_t i = 0; i + 8 < n; i += 8)
      if (!same8(p + i, q + i)) return false;
    return same8(p + n - 8, q + n - 8);  // the last 8 bytes, overlapping the loop's
  }
  if (n >= 4) return same4(p, q) & same4(p + n - 4, q + n - 4);  // two overlapping halves
  if (n == 0) return true;
  return (p[0] == q[0]) & (p[n / 2] == q[n / 2]) & (p[n - 1] == q[n - 1]);  // 1 to 3 bytes
}

// Sets `text` to `value`, writing nothing where it holds it already: a finding reused from the
// report's previous window usually names the same host, cohort and stage (16,383 waiting
// findings a window at 16,384 ranks, three strings each).
inline void set_text(std::string& text, std::string_view value) {
  if (!same_name(text, value)) text.assign(value.data(), value.size());
}

// evaluate_window over columns; `take_times`: the columns are the caller's scratch, whose times'
// buffers the report may take (detector_threshold.cc).
void evaluate_columns(const ColumnarWindow& window, const DetectorOptions& options, Report& out,
                      bool take_times);

}  // namespace laggard::detector_detail
