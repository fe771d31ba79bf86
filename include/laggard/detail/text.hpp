// laggard — text helpers of the offline outputs (laggard/run_output.hpp) and the `laggard`
// program: numbers and names from the input made safe and short for a terminal. Not part of the
// stable API. Pure and thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "laggard/export.hpp"

namespace laggard::detail {

/// Fixed-point text with `digits` decimals ("12.30"). Absurd figures stay short: a magnitude of
/// 1e12 or more is written in 4 significant digits ("1.798e+308"), a non-finite one as "n/a".
LAGGARD_API std::string fixed(double value, int digits);
/// `text` (a host, stage or cohort name from the input) safe for a terminal: control characters
/// (ESC, BEL, NUL, ..., DEL) and bytes that are not UTF-8 become \xHH, the C1 controls
/// (U+0080-U+009F: CSI is ESC [ in one character) \u00HH, so that no input can move the cursor,
/// recolour or beep. Other UTF-8 is kept as it is.
LAGGARD_API std::string printable(std::string_view text);
/// A verdict's cost to the step (RankFinding::cost_ms, cost_share): "+20.1 ms per step, 15.3% of
/// the step"; without a step time (share 0 with a cost) only the first part.
LAGGARD_API std::string cost_phrase(double cost_ms, double cost_share);
/// "0,1,2"
LAGGARD_API std::string join_ints(const std::vector<int>& values, const char* sep = ",");

}  // namespace laggard::detail
