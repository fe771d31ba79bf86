// The HTML report's SVG charts (charts.hpp).
#include "sinks/html/charts.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "laggard/html_report.hpp"

namespace laggard::html {

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> out;
  if (!std::isfinite(lo)) return out;
  if (!(hi > lo) || !std::isfinite(hi)) {
    out.push_back(lo);
    return out;
  }
  target = std::clamp(target, 1, 64);
  // In halves: hi - lo overflows to infinity for values near the largest double.
  const double half_raw = (hi / 2 - lo / 2) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(half_raw) + std::log10(2.0)));
  double step = std::numeric_limits<double>::infinity();
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag / 2 >= half_raw) {
      step = m * mag;
      break;
    }
  if (!std::isfinite(step) || !(step > 0)) return {lo, hi};  // a range near the largest double
  // Ticks k * step for whole k; at most target + 1 of them in exact arithmetic. Counted, not
  // stepped (v += step stops moving once step is below v's precision), and capped whatever the
  // rounding did.
  const double k0 = std::ceil(lo / step);
  const double k1 = std::floor(hi / step + 1e-9);
  const double count = k1 - k0 + 1;
  const int cap = 2 * target + 2;
  for (int i = 0; i < cap && i < count; ++i) {
    const double v = (k0 + i) * step;
    if (!std::isfinite(v) || v < lo - step * 1e-9 || v > hi + step * 1e-9) continue;
    if (!out.empty() && !(v > out.back())) continue;
    out.push_back(v);
  }
  if (out.empty()) out.push_back(lo);
  return out;
}

std::string tick_label(double v) {
  if (std::fabs(v) >= 1e12) {  // %.0f would print up to 309 digits
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
  }
  if (std::fabs(v) >= 100 || std::fabs(v - std::round(v)) < 1e-9) return num(v, 0);
  if (std::fabs(v * 10 - std::round(v * 10)) < 1e-9) return num(v, 1);
  return num(v, 2);
}

std::string line_chart(const std::vector<Line>& lines, const std::vector<Marker>& markers,
                       const std::string& y_label, const std::string& aria) {
  const double W = 960, H = 300, L = 64, R = 20, T = 28, B = 42;
  // Bounds from finite values only (an infinite one would make every scale infinite).
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  const auto widen = [](double& lo, double& hi, double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  };
  for (const auto& l : lines) {
    for (const auto& p : l.points) {
      if (!std::isfinite(p.first) || !std::isfinite(p.second)) continue;
      widen(x0, x1, p.first);
      widen(y0, y1, p.second);
    }
    for (const auto& b : l.band) {
      if (!std::isfinite(b.first)) continue;
      widen(y0, y1, b.second.first);
      widen(y0, y1, b.second.second);
    }
  }
  std::string out;
  out += "<div class=\"chart\"><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + px(W) +
         "\" height=\"" + px(H) + "\" viewBox=\"0 0 " + px(W) + " " + px(H) +
         "\" role=\"img\" aria-label=\"" + html_escape(aria) + "\">\n";
  if (!std::isfinite(x0)) {
    out += "<text x=\"20\" y=\"40\" fill=\"#5f6368\">no step times</text></svg></div>\n";
    return out;
  }
  constexpr double kMax = std::numeric_limits<double>::max();
  // x + d, no further than the largest double (a step or a time may be any finite double).
  const auto plus = [](double x, double d) { return x <= kMax - d ? x + d : kMax; };
  if (!(x1 > x0)) x1 = plus(x0, std::max(1.0, std::fabs(x0) * 1e-9));
  if (!(x1 > x0)) x0 = std::nextafter(x1, -kMax);
  // Start the axis at 0 unless the values sit far above it (then zero would flatten the line).
  if (y0 > 0.5 * y1) {
    const auto t = nice_ticks(y0 * 0.95, y1, 5);
    y0 = std::max(0.0, t.empty() ? y0 * 0.9 : t.front() - (t.size() > 1 ? t[1] - t[0] : 1.0));
  } else {
    y0 = std::min(y0, 0.0);
  }
  y1 = (std::fabs(y1) <= kMax / 1.05 ? y1 * 1.04 : kMax) + (y1 == y0 ? 1.0 : 0.0);
  if (!(y1 > y0)) y0 = std::nextafter(y1, -kMax);
  // Fractions of the range in halves: x1 - x0 overflows for a range wider than the largest double.
  const auto frac = [](double v, double lo, double hi) { return (v / 2 - lo / 2) / (hi / 2 - lo / 2); };
  const auto sx = [&](double x) { return L + frac(x, x0, x1) * (W - L - R); };
  const auto sy = [&](double y) { return H - B - frac(y, y0, y1) * (H - T - B); };

  for (double t : nice_ticks(y0, y1, 5)) {
    out += "<line x1=\"" + px(L) + "\" x2=\"" + px(W - R) + "\" y1=\"" + px(sy(t)) + "\" y2=\"" +
           px(sy(t)) + "\" stroke=\"#ececf0\"/>";
    out += "<text x=\"" + px(L - 6) + "\" y=\"" + px(sy(t) + 4) +
           "\" text-anchor=\"end\" font-size=\"11\" fill=\"#5f6368\">" + tick_label(t) +
           "</text>\n";
  }
  for (double t : nice_ticks(x0, x1, 8)) {
    out += "<line x1=\"" + px(sx(t)) + "\" x2=\"" + px(sx(t)) + "\" y1=\"" + px(H - B) +
           "\" y2=\"" + px(H - B + 4) + "\" stroke=\"#9aa0a6\"/>";
    out += "<text x=\"" + px(sx(t)) + "\" y=\"" + px(H - B + 16) +
           "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#5f6368\">" + tick_label(t) +
           "</text>\n";
  }
  out += "<line x1=\"" + px(L) + "\" x2=\"" + px(W - R) + "\" y1=\"" + px(H - B) + "\" y2=\"" +
         px(H - B) + "\" stroke=\"#9aa0a6\"/>\n";
  out += "<text x=\"" + px((L + W - R) / 2) + "\" y=\"" + px(H - 6) +
         "\" text-anchor=\"middle\" font-size=\"12\" fill=\"#5f6368\">step</text>\n";
  out += "<text transform=\"translate(14 " + px((T + H - B) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\" fill=\"#5f6368\">" +
         html_escape(y_label) + "</text>\n";

  for (const auto& l : lines) {
    if (l.band.size() >= 2) {
      std::string pts;
      for (const auto& b : l.band) pts += px(sx(b.first)) + "," + px(sy(b.second.second)) + " ";
      for (auto it = l.band.rbegin(); it != l.band.rend(); ++it)
        pts += px(sx(it->first)) + "," + px(sy(it->second.first)) + " ";
      out += "<polygon points=\"" + pts + "\" fill=\"" + l.colour + "\" fill-opacity=\"0.13\"/>\n";
    }
    std::string pts;
    for (const auto& p : l.points) pts += px(sx(p.first)) + "," + px(sy(p.second)) + " ";
    out += "<polyline class=\"series\" data-name=\"" + html_escape(l.name) + "\" points=\"" + pts +
           "\" fill=\"none\" stroke=\"" + l.colour + "\" stroke-width=\"" +
           (l.dashed ? "1.3\" stroke-dasharray=\"5 4\"" : "2\"") + "/>\n";
    if (l.points.size() == 1)
      out += "<circle cx=\"" + px(sx(l.points[0].first)) + "\" cy=\"" + px(sy(l.points[0].second)) +
             "\" r=\"3\" fill=\"" + l.colour + "\"/>\n";
  }
  int minor_index = 0;
  for (const auto& m : markers) {
    const double x = sx(std::clamp(m.x, x0, x1));
    out += "<g class=\"onset\"><title>" + html_escape(m.label) + "</title>";
    out += "<line x1=\"" + px(x) + "\" x2=\"" + px(x) + "\" y1=\"" + px(T - 6) + "\" y2=\"" +
           px(H - B) + "\" stroke=\"" + m.colour + "\" stroke-width=\"" +
           (m.major ? "2\"" : "1.2\" stroke-dasharray=\"3 3\"") + "/>";
    if (m.major) {
      const bool right = x < W - 260;
      out += "<text x=\"" + px(right ? x + 5 : x - 5) + "\" y=\"" + px(T - 10) +
             "\" font-size=\"12\" font-weight=\"600\" fill=\"" + m.colour + "\" text-anchor=\"" +
             (right ? "start" : "end") + "\">" + html_escape(m.label) + "</text>";
    } else {
      out += "<path d=\"M" + px(x - 5) + " " + px(H - B) + " L" + px(x + 5) + " " + px(H - B) +
             " L" + px(x) + " " + px(H - B - 8) + " Z\" fill=\"" + m.colour + "\"/>";
      if (minor_index < 6) {
        out += "<text x=\"" + px(x + 4) + "\" y=\"" + px(H - B - 12 - 13 * minor_index) +
               "\" font-size=\"11\" fill=\"" + m.colour + "\">" + html_escape(m.label) + "</text>";
      }
      ++minor_index;
    }
    out += "</g>\n";
  }
  out += "</svg></div>\n<div class=\"legend\">";
  for (const auto& l : lines)
    out += "<span><span class=\"swatch\" style=\"background:" + l.colour + "\"></span>" +
           html_escape(l.name) + "</span>";
  out += "</div>\n";
  return out;
}

std::string heatmap(const std::vector<std::string>& row_labels,
                    const std::vector<std::string>& col_labels,
                    const std::vector<std::vector<HeatCell>>& cells, const std::string& aria) {
  const std::size_t rows = row_labels.size(), cols = col_labels.size();
  std::size_t longest = 0;
  for (const auto& l : col_labels) longest = std::max(longest, l.size());
  // Column labels are rotated by 35 degrees: leave room for the longest one above the cells.
  const double label_w = 190, head_h = 24.0 + 7.0 * 0.574 * static_cast<double>(longest);
  const double cw =
      std::clamp(720.0 / static_cast<double>(std::max<std::size_t>(cols, 1)), 46.0, 96.0);
  const double ch = rows <= 48 ? 22.0 : (rows <= 128 ? 12.0 : 6.0);
  const bool with_text = rows <= 48;
  const double W = label_w + cw * static_cast<double>(cols) + 10;
  const double H = head_h + ch * static_cast<double>(rows) + 6;
  std::string out;
  out +=
      "<div class=\"chart\"><svg xmlns=\"http://www.w3.org/2000/svg\" class=\"heatmap\" width=\"" +
      px(W) + "\" height=\"" + px(H) + "\" viewBox=\"0 0 " + px(W) + " " + px(H) +
      "\" role=\"img\" aria-label=\"" + html_escape(aria) + "\">\n";
  for (std::size_t c = 0; c < cols; ++c) {
    const double x = label_w + cw * (static_cast<double>(c) + 0.5);
    out += "<text class=\"col\" transform=\"translate(" + px(x) + " " + px(head_h - 8) +
           ") rotate(-35)\" font-size=\"12\" fill=\"#1d1d1f\">" + html_escape(col_labels[c]) +
           "</text>\n";
  }
  for (std::size_t r = 0; r < rows; ++r) {
    const double y = head_h + ch * static_cast<double>(r);
    if (ch >= 12)
      out += "<text class=\"row\" x=\"" + px(label_w - 8) + "\" y=\"" + px(y + ch * 0.5 + 4) +
             "\" text-anchor=\"end\" font-size=\"" + (ch >= 20 ? "12" : "9") +
             "\" fill=\"#1d1d1f\">" + html_escape(row_labels[r]) + "</text>";
    for (std::size_t c = 0; c < cols; ++c) {
      const HeatCell& cell = cells[r][c];
      const double x = label_w + cw * static_cast<double>(c);
      if (cell.fill.empty()) continue;  // the rank has no such stage
      out += "<rect class=\"cell\" x=\"" + px(x + 1) + "\" y=\"" + px(y + 1) + "\" width=\"" +
             px(cw - 2) + "\" height=\"" + px(ch - 2) + "\" rx=\"2\" fill=\"" + cell.fill + "\"";
      if (cell.outline) out += " stroke=\"#000\" stroke-width=\"2\"";
      out += " data-tip=\"" + html_escape(cell.tip) + "\"><title>" + html_escape(cell.tip) +
             "</title></rect>";
      if (with_text && !cell.text.empty()) {
        out += "<text x=\"" + px(x + cw / 2) + "\" y=\"" + px(y + ch * 0.5 + 4) +
               "\" text-anchor=\"middle\" font-size=\"11\" pointer-events=\"none\" fill=\"" +
               text_on(cell.intensity) + "\">" + cell.text + "</text>";
      }
    }
    out += "\n";
  }
  out += "</svg></div>\n";
  return out;
}

std::vector<std::pair<double, double>> downsample(const std::vector<std::pair<double, double>>& v,
                                                  std::size_t limit) {
  if (v.size() <= limit) return v;
  const std::size_t group = (v.size() + limit - 1) / limit;
  std::vector<std::pair<double, double>> out;
  for (std::size_t i = 0; i < v.size(); i += group) {
    double sx = 0, sy = 0;
    std::size_t n = 0;
    for (std::size_t j = i; j < std::min(v.size(), i + group); ++j, ++n) {
      sx += v[j].first;
      sy += v[j].second;
    }
    double mx = sx / static_cast<double>(n), my = sy / static_cast<double>(n);
    if (!std::isfinite(mx) || !std::isfinite(my)) {  // a sum near the largest double overflowed
      mx = my = 0.0;
      for (std::size_t j = i; j < i + n; ++j) {
        mx += v[j].first / static_cast<double>(n);
        my += v[j].second / static_cast<double>(n);
      }
    }
    out.emplace_back(mx, my);
  }
  return out;
}

}  // namespace laggard::html
