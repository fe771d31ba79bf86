#include "output.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

namespace laggard::cli {

std::string fixed(double value, int digits) {
  if (!std::isfinite(value)) return "n/a";
  char buf[64];
  if (std::fabs(value) >= 1e12)
    std::snprintf(buf, sizeof buf, "%.4g", value);
  else
    std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out += ch;
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

Json number_or_null(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

Json metrics_json(const Metrics& metrics) {
  Json out = Json::object();
  for (const auto& [name, value] : metrics) {
    if (const double* d = std::get_if<double>(&value))
      out[name] = number_or_null(*d);
    else
      out[name] = std::get<std::string>(value);
  }
  return out;
}

Progress::Progress(std::string what, bool enabled)
    : what_(std::move(what)), enabled_(enabled && isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { finish(); }

void Progress::update(std::uint64_t done, std::uint64_t total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && now - last_ < std::chrono::milliseconds(250)) return;
  last_ = now;
  shown_ = true;
  const double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 0.0;
  std::cerr << "\r" << what_ << " " << fixed(pct, 0) << "% (" << fixed(static_cast<double>(done) / 1e6, 1) << " of "
            << fixed(static_cast<double>(total) / 1e6, 1) << " MB)   " << std::flush;
}

void Progress::finish() {
  if (!enabled_ || !shown_) return;
  std::cerr << "\r" << std::string(what_.size() + 40, ' ') << "\r" << std::flush;
  shown_ = false;
}

}  // namespace laggard::cli
