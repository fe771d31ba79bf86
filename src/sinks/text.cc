// Text helpers of the offline outputs and the `laggard` program (laggard/detail/text.hpp).
#include "laggard/detail/text.hpp"

#include <cmath>
#include <cstdio>

namespace laggard::detail {

std::string fixed(double value, int digits) {
  if (!std::isfinite(value)) return "n/a";
  char buf[64];
  if (std::fabs(value) >= 1e12)
    std::snprintf(buf, sizeof buf, "%.4g", value);
  else
    std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

namespace {

// The length of the valid UTF-8 sequence at the start of `s` (lead byte >= 0x80), or 0.
std::size_t utf8_length(std::string_view s) {
  const auto at = [&s](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = at(0);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < n || at(1) < lo || at(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if (at(i) < 0x80 || at(i) > 0xBF) return 0;
  return n;
}

// The code point of one well-formed UTF-8 sequence of 2 or 3 bytes (0 for others).
unsigned code_point(std::string_view s) {
  const auto b = [&s](std::size_t i) { return static_cast<unsigned>(static_cast<unsigned char>(s[i])); };
  if (s.size() == 2) return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (s.size() == 3) return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return 0;
}

// Invisible characters that change how a terminal lays out the rest of the line: the bidi marks,
// embeddings, overrides and isolates, and the line and paragraph separators.
bool is_format_control(unsigned cp) {
  return cp == 0x061C || cp == 0x200E || cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  const auto hex = [&out](const char* prefix, unsigned char c) {
    out += prefix;
    out += kHex[c >> 4];
    out += kHex[c & 0xF];
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F)
        hex("\\x", c);
      else
        out += static_cast<char>(c);
      ++i;
      continue;
    }
    const std::size_t n = utf8_length(text.substr(i));
    if (n == 0) {
      hex("\\x", c);  // not UTF-8: a lone 0x9B is CSI to an 8-bit terminal
      ++i;
    } else if (n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
      hex("\\u00", static_cast<unsigned char>(text[i + 1]));  // a C1 control (U+0080-U+009F)
      i += 2;
    } else if (const unsigned cp = code_point(text.substr(i, n)); is_format_control(cp)) {
      // Bidirectional overrides and isolates (U+202E turns the rest of the line around: a
      // stage name could make a report read backwards) and line separators: escaped.
      hex("\\u", static_cast<unsigned char>(cp >> 8));
      out += kHex[(cp >> 4) & 0xF];
      out += kHex[cp & 0xF];
      i += n;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string cost_phrase(double cost_ms, double cost_share) {
  std::string out = "+" + fixed(cost_ms, 1) + " ms per step";
  if (cost_share > 0.0 || cost_ms <= 0.0) out += ", " + fixed(100.0 * cost_share, 1) + "% of the step";
  return out;
}

std::string join_ints(const std::vector<int>& values, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += sep;
    out += std::to_string(values[i]);
  }
  return out;
}

}  // namespace laggard::detail
