// laggard — the detector's wording: the rule's description (describe_rule), numbers, rank lists
// and cohort names in findings and hints.
#include "analysis/detector_wording.hpp"

#include "laggard/detector.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace laggard {
namespace detector_detail {

std::string number(double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", value);
  return buf;
}

std::string fixed2(double value) {
  // std::to_chars with a precision writes what printf's "%.2f" writes (the standard defines it
  // so), without printf's format parsing and locale: hints are built every window.
  char buf[400];  // "%.2f" of the largest double: 309 digits, the sign, the point and two more
  const auto end = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::fixed, 2).ptr;
  return std::string(buf, end);
}

std::string cohort_label(std::string_view cohort) {
  return cohort.empty() ? std::string("default") : std::string(cohort);
}

// " of cohort 'x'" — left out for the default cohort, which most jobs only have.
std::string cohort_suffix(std::string_view cohort) {
  return cohort.empty() ? std::string() : " of cohort '" + std::string(cohort) + "'";
}

// "0,1,2", "0-63,70": runs of four or more become ranges; a long list ends in "and N more".
void append_ranks(std::string& out, const std::vector<int>& sorted) {
  constexpr int kMaxItems = 16;
  const std::size_t n = sorted.size();
  int items = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j + 1 < n && sorted[j + 1] == sorted[j] + 1) ++j;
    const std::size_t run = j - i + 1;
    if (run >= 4) {
      if (items == kMaxItems) {
        out += " and " + std::to_string(n - i) + " more";
        return;
      }
      if (items++) out += ',';
      out += std::to_string(sorted[i]) + '-' + std::to_string(sorted[j]);
    } else {
      for (std::size_t k = i; k <= j; ++k) {
        if (items == kMaxItems) {
          out += " and " + std::to_string(n - k) + " more";
          return;
        }
        if (items++) out += ',';
        out += std::to_string(sorted[k]);
      }
    }
    i = j + 1;
  }
}

std::string ranks_phrase(const std::vector<int>& sorted) {
  std::string out = sorted.size() == 1 ? "rank " : "ranks ";
  append_ranks(out, sorted);
  return out;
}
}  // namespace detector_detail

using namespace detector_detail;

std::string describe_rule(const DetectorOptions& o) {
  char buf[320];
  std::string flags = "ref " + std::string(to_string(o.ref)) + ", slow if t >= ref x " +
                      fixed2(o.relative_threshold);
  if (std::isfinite(o.absolute_ms_threshold)) {
    std::snprintf(buf, sizeof buf, " or t - ref >= %.1f ms", o.absolute_ms_threshold);
    flags += buf;
  } else {
    flags += " (no absolute rule)";
  }
  if (o.ref == Reference::robust) {
    std::snprintf(buf, sizeof buf, ", and MAD z >= %.1f", o.mad_z);
    flags += buf;
  }
  // The materiality gate, both methods.
  char gate[128];
  std::snprintf(gate, sizeof gate, "; a verdict also needs > %.2fx typical and >= %g%% of the step",
                o.healthy_spread, 100.0 * o.min_cost_share);
  if (o.method == Method::threshold) {
    std::snprintf(buf, sizeof buf, "; confirmed when slow in %d of the last %d windows",
                  o.confirm_k, o.confirm_n);
    return "threshold: " + flags + buf + gate;
  }
  std::snprintf(buf, sizeof buf,
                "sequential: confirmed on evidence over windows that a rank is %.2fx its "
                "cohort's median (healthy within %.2fx), at most %g%% false alarms per %g "
                "windows; window flags: ",
                o.relative_threshold, o.healthy_spread, 100.0 * o.false_alarm_budget,
                o.budget_windows);
  return buf + flags + gate;
}
}  // namespace laggard
