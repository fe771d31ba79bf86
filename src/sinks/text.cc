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
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
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
