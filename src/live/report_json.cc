#include "live/report_json.hpp"

#include <charconv>
#include <cmath>
#include <string_view>
#include <variant>

namespace laggard {
namespace {

void append_number(double v, std::string& out) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  out.append(buf, static_cast<std::size_t>(r.ptr - buf));
}

void append_int(std::int64_t v, std::string& out) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<std::size_t>(r.ptr - buf));
}

// Length of the valid UTF-8 sequence at s[i], 0 if malformed (RFC 3629).
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

// Invalid UTF-8 becomes U+FFFD so that every line stays readable JSON.
void append_string(std::string_view s, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_length(s, i);
      if (n == 0) {
        out += "\xEF\xBF\xBD";
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xF];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

void append_findings(const char* key, const std::vector<RankFinding>& findings, std::string& out) {
  out += ",\"";
  out += key;
  out += "\":[";
  bool first = true;
  for (const RankFinding& f : findings) {
    if (!first) out += ',';
    first = false;
    out += "{\"rank\":";
    append_int(f.rank, out);
    out += ",\"stage\":";
    append_string(f.stage, out);
    out += ",\"kind\":";
    append_string(to_string(f.kind), out);
    out += ",\"ms\":";
    append_number(f.ms, out);
    out += ",\"ref_ms\":";
    append_number(f.ref_ms, out);
    out += ",\"slowdown\":";
    append_number(f.slowdown, out);
    out += ",\"windows_flagged\":";
    append_int(f.windows_flagged, out);
    out += ",\"confirmed\":";
    out += f.confirmed ? "true" : "false";
    out += '}';
  }
  out += ']';
}

}  // namespace

void append_report_json(std::int64_t step, const Metrics& metrics, const Report& report,
                        std::string& out) {
  out += "{\"step\":";
  append_int(step, out);
  for (const auto& [name, value] : metrics) {
    out += ',';
    append_string(name, out);
    out += ':';
    if (const double* d = std::get_if<double>(&value)) {
      append_number(*d, out);
    } else {
      append_string(std::get<std::string>(value), out);
    }
  }
  append_findings("stragglers", report.stragglers, out);
  append_findings("waiting", report.waiting, out);
  out += "}\n";
}

}  // namespace laggard
