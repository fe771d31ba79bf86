// The HTML report's text pieces: numbers and colours as the page writes them, Verdict's classes
// and colours. (html_escape, which every text from the logs goes through, is public:
// laggard/html_report.hpp.)
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "laggard/compare.hpp"

namespace laggard::html {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// `v` with `digits` decimals ("n/a" when not finite).
std::string num(double v, int digits);
/// A number for SVG coordinates (no locale, no exponent; 0 when not finite).
std::string px(double v);
/// A p-value ("&lt; 0.0001" below that).
std::string p_text(double p);
/// "a, b, c" from escaped items.
std::string join(const std::vector<std::string>& items);

/// Slowdown 1 → neutral, 1.5 and above → full colour; red for own work, blue for waiting.
std::string slowdown_fill(double s, bool waiting);
/// Ratio current/baseline: above 1 red, below 1 blue, ±50% full colour.
std::string ratio_fill(double r);
/// Text colour on a fill of that intensity.
std::string text_on(double t);
const char* verdict_class(Verdict v);
const char* verdict_colour(Verdict v);

/// "rank 3 · host".
std::string who(int rank, const std::string& host);

}  // namespace laggard::html
