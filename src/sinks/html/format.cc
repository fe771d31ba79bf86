// The HTML report's text pieces (format.hpp) and html_escape.
#include "sinks/html/format.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

#include "laggard/html_report.hpp"

namespace laggard {
namespace html {
namespace {

struct Rgb {
  int r, g, b;
};

std::string mix(Rgb a, Rgb b, double t) {
  t = std::clamp(t, 0.0, 1.0);
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(a.r + (b.r - a.r) * t),
                static_cast<int>(a.g + (b.g - a.g) * t), static_cast<int>(a.b + (b.b - a.b) * t));
  return buf;
}

constexpr Rgb kNeutral{247, 247, 247};
constexpr Rgb kRed{178, 24, 43};
constexpr Rgb kBlue{33, 102, 172};

}  // namespace

std::string num(double v, int digits) {
  if (!std::isfinite(v)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A number for SVG coordinates (no locale, no exponent).
std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", std::isfinite(v) ? v : 0.0);
  return buf;
}

std::string p_text(double p) {
  if (!std::isfinite(p)) return "n/a";
  if (p < 1e-4) return "&lt; 0.0001";
  return num(p, 4);
}

// "a, b, c" from escaped items.
std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

// Slowdown 1 → neutral, 1.5 and above → full colour; red for own work, blue for waiting.
std::string slowdown_fill(double s, bool waiting) {
  if (!std::isfinite(s)) return "#ffffff";
  const double t = (s - 1.0) / 0.5;
  return mix(kNeutral, waiting ? kBlue : kRed, t);
}

// Ratio current/baseline: above 1 red, below 1 blue, ±50% full colour.
std::string ratio_fill(double r) {
  if (!std::isfinite(r)) return "#ffffff";
  return r >= 1.0 ? mix(kNeutral, kRed, (r - 1.0) / 0.5) : mix(kNeutral, kBlue, (1.0 - r) / 0.5);
}

std::string text_on(double t) { return t > 0.55 ? "#ffffff" : "#222222"; }

const char* verdict_class(Verdict v) {
  switch (v) {
    case Verdict::regressed:
      return "v-regressed";
    case Verdict::improved:
      return "v-improved";
    case Verdict::same:
      return "v-same";
    case Verdict::unknown:
      return "v-unknown";
  }
  return "v-unknown";
}

const char* verdict_colour(Verdict v) {
  switch (v) {
    case Verdict::regressed:
      return "#b2182b";
    case Verdict::improved:
      return "#2166ac";
    case Verdict::same:
      return "#4d9221";
    case Verdict::unknown:
      return "#888888";
  }
  return "#888888";
}

std::string who(int rank, const std::string& host) {
  return "rank " + std::to_string(rank) + (host.empty() ? "" : " · " + host);
}

}  // namespace html

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters other than tab and newline have no business in a page.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n')
          out += "&#xfffd;";
        else
          out += c;
    }
  }
  return out;
}

}  // namespace laggard
