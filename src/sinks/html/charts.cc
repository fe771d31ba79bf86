// The HTML report's SVG charts (charts.hpp).
#include "sinks/html/charts.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "laggard/html_report.hpp"

namespace laggard::html {

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> out;
  if (!(hi > lo)) {
    out.push_back(lo);
    return out;
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push_back(v);
  return out;
}

std::string tick_label(double v) {
  if (std::fabs(v) >= 100 || std::fabs(v - std::round(v)) < 1e-9) return num(v, 0);
  if (std::fabs(v * 10 - std::round(v * 10)) < 1e-9) return num(v, 1);
  return num(v, 2);
}

std::string line_chart(const std::vector<Line>& lines, const std::vector<Marker>& markers,
                       const std::string& y_label, const std::string& aria) {
  const double W = 960, H = 300, L = 64, R = 20, T = 28, B = 42;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& l : lines) {
    for (const auto& p : l.points) {
      x0 = std::min(x0, p.first);
      x1 = std::max(x1, p.first);
      y0 = std::min(y0, p.second);
      y1 = std::max(y1, p.second);
    }
    for (const auto& b : l.band) {
      y0 = std::min(y0, b.second.first);
      y1 = std::max(y1, b.second.second);
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
  if (x1 == x0) x1 = x0 + 1;
  // Start the axis at 0 unless the values sit far above it (then zero would flatten the line).
  if (y0 > 0.5 * y1) {
    const auto t = nice_ticks(y0 * 0.95, y1, 5);
    y0 = std::max(0.0, t.empty() ? y0 * 0.9 : t.front() - (t.size() > 1 ? t[1] - t[0] : 1.0));
  } else {
    y0 = 0.0;
  }
  y1 = y1 * 1.04 + (y1 == y0 ? 1.0 : 0.0);
  const auto sx = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  const auto sy = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };

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
    out.emplace_back(sx / static_cast<double>(n), sy / static_cast<double>(n));
  }
  return out;
}

}  // namespace laggard::html
