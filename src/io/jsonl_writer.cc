// Writes StepSamples as JSON Lines (schema "laggard.sample/1").
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "io/json_text.hpp"
#include "laggard/jsonl.hpp"

namespace laggard {
namespace detail {
namespace {

// Big enough for any int64 and for the longest shortest-round-trip double
// ("-2.2250738585072014e-308").
constexpr std::size_t kNumberChars = 32;

}  // namespace

void append_json_int(std::int64_t value, std::string& out) {
  char buf[kNumberChars];
  auto result = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, static_cast<std::size_t>(result.ptr - buf));
}

// JSON has no NaN or infinity. A non-finite figure is written as null so that the line stays valid
// JSON and the reader rejects it with an error that names the field, instead of the whole line
// failing to parse or a made-up number entering the analysis.
void append_json_number(double value, std::string& out) {
  if (LAGGARD_UNLIKELY(!std::isfinite(value))) {
    out += "null";
    return;
  }
  char buf[kNumberChars];
  // Without a format argument to_chars gives the shortest text that reads back to the same double.
  auto result = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, static_cast<std::size_t>(result.ptr - buf));
}

void append_json_value(double value, std::string& out) {
  if (LAGGARD_LIKELY(std::isfinite(value))) {
    append_json_number(value, out);
  } else if (std::isnan(value)) {
    out += "\"NaN\"";
  } else {
    out += value > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  }
}

namespace {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if it is malformed
// (overlong forms, surrogates and code points above U+10FFFF are malformed, as in RFC 3629).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  std::size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

void append_json_string(std::string_view s, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  std::size_t run = 0;  // start of the pending stretch that needs no escaping
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (LAGGARD_LIKELY(c >= 0x20 && c < 0x80 && c != '"' && c != '\\')) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      const std::size_t n = utf8_sequence_length(s, i);
      if (n != 0) {
        i += n;
        continue;
      }
    }
    out.append(s.data() + run, i - run);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
          out.append(esc, sizeof esc);
        } else {
          out += "\\ufffd";  // a byte that does not start a valid UTF-8 sequence
        }
    }
    ++i;
    run = i;
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

}  // namespace detail

using detail::append_json_int;
using detail::append_json_number;
using detail::append_json_string;
using detail::append_json_value;

namespace {
// `"key":{"name":value,...}`, nothing when `list` is empty.
void append_named_values(const char* key, const std::vector<NamedValue>& list, std::string& out) {
  if (list.empty()) return;
  out += key;
  char sep = '{';
  for (const NamedValue& v : list) {
    out += sep;
    sep = ',';
    append_json_string(v.name, out);
    out += ':';
    append_json_value(v.value, out);
  }
  out += '}';
}
}  // namespace

std::size_t append_sample_json(const StepSample& sample, std::string& out) {
  out += "{\"schema\":\"";
  out.append(kSampleSchema.data(), kSampleSchema.size());
  out += "\",\"rank\":";
  append_json_int(sample.rank, out);
  out += ",\"world_size\":";
  append_json_int(sample.world_size, out);
  out += ",\"step\":";
  append_json_int(sample.step, out);
  out += ",\"host\":";
  append_json_string(sample.host, out);
  out += ",\"cohort\":";
  append_json_string(sample.cohort, out);
  out += ",\"step_ms\":";
  append_json_number(sample.step_ms, out);
  if (std::isfinite(sample.work)) {  // NaN means "not recorded": the field is left out
    out += ",\"work\":";
    append_json_number(sample.work, out);
  }
  out += ",\"stages\":[";
  bool first = true;
  std::size_t left_out = 0;
  for (const StageTime& stage : sample.stages) {
    // A non-finite time (an add() of infinity, a sum that overflowed) would be written as null,
    // which the reader refuses, losing the whole step: the stage is left out instead, and the
    // caller counts it from the result.
    if (LAGGARD_UNLIKELY(!std::isfinite(stage.ms))) {
      ++left_out;
      continue;
    }
    out += first ? "{\"name\":" : ",{\"name\":";
    first = false;
    append_json_string(stage.name, out);
    out += ",\"kind\":\"";
    out += to_string(stage.kind);
    out += "\",\"ms\":";
    append_json_number(stage.ms, out);
    out += ",\"calls\":";
    append_json_int(stage.calls, out);
    out += '}';
  }
  out += ']';
  append_named_values(",\"values\":", sample.values, out);
  append_named_values(",\"resources\":", sample.resources, out);
  out += "}\n";
  return left_out;
}

}  // namespace laggard
