// JSON text pieces shared by laggard's writers (sample lines, live report lines).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace laggard::detail {

/// Shortest text that reads back to the same double; JSON has no NaN or infinity, so a
/// non-finite value becomes null (a reader then names the field instead of guessing a number).
void append_json_number(double value, std::string& out);
void append_json_int(std::int64_t value, std::string& out);
/// Any double, bit for bit: finite ones as append_json_number writes them (-0 as "-0"), NaN and
/// the infinities as the strings "NaN", "Infinity" and "-Infinity" (JSON has no such numbers).
void append_json_value(double value, std::string& out);
/// `s` as a JSON string. Bytes that are not valid UTF-8 become U+FFFD: every line laggard writes
/// must parse, and simdjson rejects invalid UTF-8.
void append_json_string(std::string_view s, std::string& out);

}  // namespace laggard::detail
