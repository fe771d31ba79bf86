// The HTML report: one self-contained page (inline CSS, SVG drawn here, a little JS for hover
// details and sortable tables). A Content-Security-Policy forbids every network load, so the page
// shows the same offline as online. Every text that came from the logs is escaped.
#include "laggard/html_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "laggard/version.hpp"

namespace laggard {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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

// ---- colours -------------------------------------------------------------------------------

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

// ---- page scaffolding ----------------------------------------------------------------------

const char* kCss = R"css(
:root{--fg:#1d1d1f;--muted:#5f6368;--line:#d9d9de;--bg:#ffffff;--card:#f6f7f9;--red:#b2182b;--blue:#2166ac;--green:#4d9221}
*{box-sizing:border-box}
body{margin:0;padding:24px 32px 48px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg);max-width:1200px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid var(--line)}
.sub{color:var(--muted);margin:0}
.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,monospace}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-top:16px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:190px}
.card .k{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:19px;font-weight:600;margin-top:2px}
.card .d{color:var(--muted);font-size:12px}
table{border-collapse:collapse;width:100%;margin:6px 0}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:12px;color:var(--muted);font-weight:600;white-space:nowrap}
table.sortable th{cursor:pointer}
table.sortable th:hover{color:var(--fg)}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.origin td{background:#fff1c2;font-weight:600}
tr.victim td{background:#fdf6f6}
.badge{display:inline-block;padding:1px 7px;border-radius:10px;font-size:12px;font-weight:600;color:#fff}
.v-regressed{background:var(--red)}.v-improved{background:var(--blue)}.v-same{background:var(--green)}.v-unknown{background:#888}
.role{display:inline-block;padding:1px 6px;border-radius:4px;font-size:11px;font-weight:700;border:1px solid currentColor;margin-left:6px}
.role.origin{color:#8a5a00}.role.victim{color:var(--red)}.role.unknown{color:#666}
.note{color:var(--muted);margin:6px 0}
.callout{border-left:4px solid #e0a800;background:#fffaf0;padding:8px 12px;margin:10px 0}
.callout.ok{border-color:var(--green);background:#f5fbf2}
.chart{overflow-x:auto}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
svg .cell:hover{stroke:#000;stroke-width:1.5}
#cell-info{min-height:1.4em;color:var(--muted);font-size:13px}
#js-errors{color:#fff;background:var(--red);padding:8px;white-space:pre-wrap}
#js-errors:empty{display:none}
td.why,th.why{font-size:12px;color:var(--muted);min-width:240px}
tr.origin td.why{color:var(--fg)}
footer{margin-top:36px;color:var(--muted);font-size:12px}
ul.errors{margin:4px 0;padding-left:20px;font-size:12px}
.legend{display:flex;gap:16px;align-items:center;color:var(--muted);font-size:12px;margin:4px 0}
.swatch{display:inline-block;width:26px;height:10px;vertical-align:middle;border:1px solid var(--line);margin-right:4px}
)css";

// Registered first, so that an error anywhere in the page is written into the page itself (the
// browser test reads it from the DOM).
const char* kErrorCapture = R"js(
window.addEventListener('error', function (e) {
  document.documentElement.setAttribute('data-error', '1');
  var box = document.getElementById('js-errors');
  var msg = (e && e.message) ? e.message : 'unknown error';
  if (box) box.textContent += 'JavaScript error: ' + msg + '\n';
});
)js";

// Hover details for heatmap cells, sortable tables, then the ready mark.
const char* kMainJs = R"js(
(function () {
  var info = document.getElementById('cell-info');
  var tips = document.querySelectorAll('[data-tip]');
  for (var i = 0; i < tips.length; i++) {
    tips[i].addEventListener('mouseenter', function (e) {
      if (info) info.textContent = e.currentTarget.getAttribute('data-tip');
    });
  }
  var tables = document.querySelectorAll('table.sortable');
  for (var t = 0; t < tables.length; t++) {
    (function (table) {
      if (!table.tHead || !table.tBodies.length) return;
      var heads = table.tHead.rows[0].cells;
      for (var c = 0; c < heads.length; c++) {
        (function (col, th) {
          th.title = 'sort';
          th.addEventListener('click', function () {
            var body = table.tBodies[0];
            var rows = Array.prototype.slice.call(body.rows);
            var asc = th.getAttribute('data-dir') !== 'asc';
            rows.sort(function (a, b) {
              var x = a.cells[col].getAttribute('data-v') || a.cells[col].textContent;
              var y = b.cells[col].getAttribute('data-v') || b.cells[col].textContent;
              var nx = parseFloat(x), ny = parseFloat(y);
              var r = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
              return asc ? r : -r;
            });
            th.setAttribute('data-dir', asc ? 'asc' : 'desc');
            rows.forEach(function (r) { body.appendChild(r); });
          });
        })(c, heads[c]);
      }
    })(tables[t]);
  }
  document.body.setAttribute('data-ready', '1');
})();
)js";

void page_begin(std::string& out, const std::string& title) {
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  // No network: nothing but the page's own inline style, script and data: images.
  out +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + html_escape(title) + "</title>\n<style>" + kCss + "</style>\n";
  out += "<script>" + std::string(kErrorCapture) + "</script>\n</head>\n<body>\n";
  out += "<div id=\"js-errors\"></div>\n";
}

void page_end(std::string& out) {
  out += "<footer>Generated by laggard ";
  out += kVersion;
  out += ". One self-contained file: no network access is needed to view it.</footer>\n";
  out += "<script>" + std::string(kMainJs) + "</script>\n</body>\n</html>\n";
}

void card(std::string& out, const std::string& key, const std::string& value_html,
          const std::string& detail_html) {
  out += "<div class=\"card\"><div class=\"k\">" + html_escape(key) + "</div><div class=\"v\">" +
         value_html + "</div>";
  if (!detail_html.empty()) out += "<div class=\"d\">" + detail_html + "</div>";
  out += "</div>\n";
}

// ---- charts --------------------------------------------------------------------------------

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

struct Line {
  std::string name;
  std::string colour;
  bool dashed = false;
  std::vector<std::pair<double, double>> points;                   // (step, ms)
  std::vector<std::pair<double, std::pair<double, double>>> band;  // (step, (lo, hi))
};

struct Marker {
  double x = 0.0;
  std::string label;  // escaped by the chart
  std::string colour;
  bool major = false;
};

// A line chart over steps: lines, an optional min-max band, vertical onset markers.
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

// One heatmap row or column header: label plus an optional title.
struct HeatCell {
  double value = kNaN;   // what colours the cell
  std::string fill;      // colour
  std::string text;      // in-cell text (escaped by caller: numbers only)
  std::string tip;       // hover text (raw; escaped here)
  bool outline = false;  // drawn with a dark border (e.g. REGRESSED)
  double intensity = 0;  // how saturated `fill` is, in [0, 1] (picks the text colour)
};

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

std::string who(int rank, const std::string& host) {
  return "rank " + std::to_string(rank) + (host.empty() ? "" : " · " + host);
}

// Averages consecutive points so that at most `limit` remain (bounded page size).
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

}  // namespace

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

// ---- StreamingMedian (P²) --------------------------------------------------------------------

void StreamingMedian::add(double x) noexcept {
  if (!std::isfinite(x)) return;
  if (count_ < 5) {
    int i = count_;
    while (i > 0 && q_[i - 1] > x) {
      q_[i] = q_[i - 1];
      --i;
    }
    q_[i] = x;
    ++count_;
    return;
  }
  int k = 0;
  if (x < q_[0]) {
    q_[0] = x;
  } else if (x >= q_[4]) {
    q_[4] = x;
    k = 3;
  } else {
    while (k < 3 && x >= q_[k + 1]) ++k;
  }
  for (int i = k + 1; i < 5; ++i) ++n_[i];
  ++count_;
  static constexpr double kFraction[5] = {0.0, 0.25, 0.5, 0.75, 1.0};
  for (int i = 1; i <= 3; ++i) {
    const double desired = 1.0 + (count_ - 1) * kFraction[i];
    const double d = desired - n_[i];
    if ((d >= 1.0 && n_[i + 1] - n_[i] > 1) || (d <= -1.0 && n_[i - 1] - n_[i] < -1)) {
      const int s = d > 0 ? 1 : -1;
      const double np = n_[i + 1], nm = n_[i - 1], ni = n_[i];
      // Piecewise-parabolic prediction of the marker height; linear if it would leave order.
      const double parabolic = q_[i] + s / (np - nm) *
                                           ((ni - nm + s) * (q_[i + 1] - q_[i]) / (np - ni) +
                                            (np - ni - s) * (q_[i] - q_[i - 1]) / (ni - nm));
      if (q_[i - 1] < parabolic && parabolic < q_[i + 1])
        q_[i] = parabolic;
      else
        q_[i] += s * (q_[i + s] - q_[i]) / (n_[i + s] - n_[i]);
      n_[i] += s;
    }
  }
}

double StreamingMedian::value() const noexcept {
  if (count_ == 0) return kNaN;
  if (count_ >= 5) return q_[2];
  return count_ % 2 ? q_[count_ / 2] : 0.5 * (q_[count_ / 2 - 1] + q_[count_ / 2]);
}

// ---- RunReportData ---------------------------------------------------------------------------

RunReportData::RunReportData(std::size_t max_points)
    : max_points_(std::max<std::size_t>(max_points, 16)) {}

const std::string& RunReportData::host_of(int rank) const noexcept {
  static const std::string kEmpty;
  return rank >= 0 && static_cast<std::size_t>(rank) < host_.size()
             ? host_[static_cast<std::size_t>(rank)]
             : kEmpty;
}

const std::string& RunReportData::cohort_of(int rank) const noexcept {
  static const std::string kEmpty;
  return rank >= 0 && static_cast<std::size_t>(rank) < cohort_.size()
             ? cohort_[static_cast<std::size_t>(rank)]
             : kEmpty;
}

std::size_t RunReportData::stage_index(const std::string& name, StageKind kind,
                                       const std::string* previous) {
  for (std::size_t i = 0; i < stages_.size(); ++i)
    if (stages_[i].name == name) return i;
  // A new stage goes right after the stage it follows (pipeline order across cohorts).
  std::size_t pos = 0;
  if (previous)
    for (std::size_t i = 0; i < stages_.size(); ++i)
      if (stages_[i].name == *previous) pos = i + 1;
  stages_.insert(stages_.begin() + static_cast<std::ptrdiff_t>(pos), Stage{name, kind});
  slot_.insert(slot_.begin() + static_cast<std::ptrdiff_t>(pos), std::vector<std::int32_t>{});
  for (Cell& c : cells_)
    if (c.stage >= pos) ++c.stage;
  return pos;
}

RunReportData::Cell* RunReportData::cell(std::size_t stage, int rank) {
  if (rank < 0 || rank >= (1 << 22)) return nullptr;
  auto& slots = slot_[stage];
  if (static_cast<std::size_t>(rank) >= slots.size())
    slots.resize(static_cast<std::size_t>(rank) + 1, -1);
  std::int32_t& s = slots[static_cast<std::size_t>(rank)];
  if (s < 0) {
    s = static_cast<std::int32_t>(cells_.size());
    Cell c;
    c.rank = rank;
    c.stage = static_cast<std::uint32_t>(stage);
    cells_.push_back(c);
  }
  return &cells_[static_cast<std::size_t>(s)];
}

void RunReportData::add(const Window& window, const Report& report) {
  scratch_.clear();
  double slowest = 0.0;
  for (const StepSample& s : window.samples) {
    if (s.rank >= 0 && s.rank < (1 << 22)) {
      const auto r = static_cast<std::size_t>(s.rank);
      if (r >= host_.size()) {
        host_.resize(r + 1);
        cohort_.resize(r + 1);
      }
      if (host_[r] != s.host) host_[r] = s.host;
      if (cohort_[r] != s.cohort) cohort_[r] = s.cohort;
    }
    slowest = std::max(slowest, s.step_ms);
    scratch_.push_back(s.step_ms);
  }
  if (!scratch_.empty()) {
    const auto mid = scratch_.begin() + static_cast<std::ptrdiff_t>(scratch_.size() / 2);
    std::nth_element(scratch_.begin(), mid, scratch_.end());
    const double median = *mid;
    if (points_.empty() || points_.back().windows >= bucket_windows_) {
      Point p;
      p.first_step = window.step;
      p.job_min = p.job_max = slowest;
      points_.push_back(p);
    }
    Point& p = points_.back();
    p.last_step = window.step;
    ++p.windows;
    p.job_sum += slowest;
    p.job_min = std::min(p.job_min, slowest);
    p.job_max = std::max(p.job_max, slowest);
    p.median_sum += median;
    if (points_.size() > max_points_) {  // merge neighbours: half the points, twice the width
      std::vector<Point> merged;
      for (std::size_t i = 0; i < points_.size(); i += 2) {
        Point a = points_[i];
        if (i + 1 < points_.size()) {
          const Point& b = points_[i + 1];
          a.last_step = b.last_step;
          a.windows += b.windows;
          a.job_sum += b.job_sum;
          a.median_sum += b.median_sum;
          a.job_min = std::min(a.job_min, b.job_min);
          a.job_max = std::max(a.job_max, b.job_max);
        }
        merged.push_back(a);
      }
      points_.swap(merged);
      bucket_windows_ *= 2;
    }
  }

  const std::string* previous = nullptr;
  const std::string* previous_cohort = nullptr;
  for (const StageFigures& st : report.stages) {
    if (previous_cohort && *previous_cohort != st.cohort) previous = nullptr;
    const std::size_t stage = stage_index(st.stage, st.kind, previous);
    previous = &st.stage;
    previous_cohort = &st.cohort;
    if (!(st.ref_ms > 0.0)) continue;
    for (std::size_t i = 0; i < st.rank_ids.size() && i < st.rank_ms.size(); ++i) {
      Cell* c = cell(stage, st.rank_ids[i]);
      if (!c) continue;
      const double s = st.rank_ms[i] / st.ref_ms;
      c->slowdown.add(s);
      c->max_slowdown = std::max(c->max_slowdown, static_cast<float>(s));
    }
  }
  for (const auto* list : {&report.stragglers, &report.waiting})
    for (const RankFinding& f : *list) {
      for (std::size_t i = 0; i < stages_.size(); ++i)
        if (stages_[i].name == f.stage) {
          if (Cell* c = cell(i, f.rank)) ++c->flagged;
          break;
        }
    }
}

// ---- the run report --------------------------------------------------------------------------

std::string render_run_report(const RunSummary& sum, const RunReportData& data,
                              const RunReportInput& input) {
  const DetectorOptions& opt = input.options;
  std::string out;
  out.reserve(64 << 10);
  page_begin(out, "laggard report: " + input.run_dir);
  out += "<header><h1>laggard report</h1><p class=\"sub\"><span class=\"mono\">" +
         html_escape(input.run_dir) + "</span> · " + std::to_string(sum.ranks) +
         " ranks (world size " + std::to_string(sum.world_size) + ") · " +
         std::to_string(sum.windows) + " sampled steps (" + std::to_string(sum.first_step) + "–" +
         std::to_string(sum.last_step) + ") · " + std::to_string(sum.samples) +
         " samples</p><p class=\"sub\">rule: " + html_escape(describe_rule(opt)) +
         "</p></header>\n";

  out += "<section class=\"cards\">\n";
  {
    std::string detail;
    for (std::size_t i = 0; i < sum.stragglers.size() && i < 3; ++i) {
      const auto& s = sum.stragglers[i];
      if (!detail.empty()) detail += "; ";
      detail += "rank " + std::to_string(s.rank) + " in " + html_escape(s.stage);
    }
    if (sum.stragglers.size() > 3) detail += "; …";
    card(out, "Confirmed stragglers", std::to_string(sum.stragglers.size()),
         detail.empty() ? "none" : detail);
  }
  card(out, "Likely bottleneck",
       sum.likely_bottleneck.empty() ? "none" : html_escape(sum.likely_bottleneck),
       sum.likely_bottleneck.empty()
           ? "no persistent finding"
           : std::to_string(sum.bottleneck_windows.at(sum.likely_bottleneck)) + " of " +
                 std::to_string(sum.windows) + " windows");
  card(out, "What-if saving", num(sum.mean_whatif_saving_ms, 1) + " ms/step",
       sum.mean_step_ms > 0 ? num(100.0 * sum.mean_whatif_saving_ms / sum.mean_step_ms, 1) +
                                  "% of the " + num(sum.mean_step_ms, 1) + " ms step"
                            : std::string());
  if (sum.step_time_onset)
    card(out, "Step time slower since", "step " + std::to_string(*sum.step_time_onset),
         num(sum.step_time_before_ms, 1) + " ms before, " + num(sum.step_time_since_ms, 1) +
             " ms since");
  else
    card(out, "Step time onset", "none", "no persistent rise of the step time");
  out += "</section>\n";

  // Stragglers table.
  out += "<section id=\"stragglers\"><h2>Confirmed stragglers</h2>\n";
  if (sum.stragglers.empty()) {
    out += "<p class=\"callout ok\">No rank was slow in its own work in " +
           std::to_string(opt.confirm_k) + " of " + std::to_string(opt.confirm_n) +
           " consecutive windows.</p>\n";
  } else {
    out +=
        "<table class=\"sortable\"><thead><tr><th>rank</th><th>host</th><th>cohort</th>"
        "<th>stage</th><th>slow in windows</th><th>typical slowdown</th><th>last ms vs ref</th>"
        "<th>first flagged</th><th>confirmed</th><th>since step (onset)</th></tr></thead><tbody>\n";
    for (const auto& s : sum.stragglers) {
      out += "<tr><td class=\"n\">" + std::to_string(s.rank) + "</td><td>" + html_escape(s.host) +
             "</td><td>" + html_escape(s.cohort) + "</td><td>" + html_escape(s.stage) +
             "</td><td class=\"n\" data-v=\"" + std::to_string(s.windows_flagged) + "\">" +
             std::to_string(s.windows_flagged) + " of " + std::to_string(s.windows_seen) +
             "</td><td class=\"n\">" + num(s.typical_slowdown, 2) +
             "×</td><td class=\"n\" data-v=\"" + num(s.last_ms, 3) + "\">" + num(s.last_ms, 1) +
             " vs " + num(s.last_ref_ms, 1) + "</td><td class=\"n\">" +
             std::to_string(s.first_flagged_step) + "</td><td class=\"n\">" +
             std::to_string(s.confirmed_step) + "</td><td class=\"n\">" +
             (s.onset_step ? std::to_string(*s.onset_step) : std::string("–")) + "</td></tr>\n";
    }
    out +=
        "</tbody></table>\n<p class=\"note\">Evidence: slow in <i>k</i> of <i>n</i> "
        "windows is the detector's count of windows in which the rank's own time met the rule; "
        "the slowdown is the median of t / ref over those windows; the onset is where a CUSUM "
        "on log(t / ref) found the shift to begin.</p>\n";
  }
  out += "</section>\n";

  // Heatmap.
  out += "<section id=\"heatmap\"><h2>Slowdown by rank and stage</h2>\n";
  {
    const auto& stages = data.stages();
    std::map<int, std::vector<const RunReportData::Cell*>> by_rank;
    for (const auto& c : data.cells()) by_rank[c.rank].push_back(&c);
    std::vector<int> ranks;
    for (const auto& [r, v] : by_rank) ranks.push_back(r);
    const std::size_t total = ranks.size();
    constexpr std::size_t kMaxRows = 64;
    if (ranks.size() > kMaxRows) {
      // Keep the confirmed stragglers, then the ranks with the largest median slowdown.
      std::map<int, double> worst;
      for (const auto& [r, v] : by_rank) {
        double w = 0.0;
        for (const auto* c : v)
          if (stages[c->stage].kind != StageKind::communication)
            w = std::max(w, c->slowdown.value());
        worst[r] = w;
      }
      for (const auto& s : sum.stragglers) worst[s.rank] = 1e9;
      std::sort(ranks.begin(), ranks.end(),
                [&](int a, int b) { return worst[a] != worst[b] ? worst[a] > worst[b] : a < b; });
      ranks.resize(kMaxRows);
      std::sort(ranks.begin(), ranks.end());
    }
    std::vector<std::string> rows, cols;
    for (const auto& st : stages)
      cols.push_back(st.name + (st.kind == StageKind::communication ? " (wait)" : ""));
    std::vector<std::vector<HeatCell>> cells;
    for (int r : ranks) {
      rows.push_back(who(r, data.host_of(r)));
      std::vector<HeatCell> row(stages.size());
      for (const auto* c : by_rank[r]) {
        HeatCell& h = row[c->stage];
        const double v = c->slowdown.value();
        const bool waiting = stages[c->stage].kind == StageKind::communication;
        h.value = v;
        h.fill = slowdown_fill(v, waiting);
        h.intensity = std::clamp((v - 1.0) / 0.5, 0.0, 1.0);
        h.text = num(v, 2);
        h.tip = "rank " + std::to_string(r) +
                (data.host_of(r).empty() ? "" : " (" + data.host_of(r) + ")") + " · " +
                stages[c->stage].name + ": median " + num(v, 2) + "× the cohort reference, max " +
                num(c->max_slowdown, 2) + "×, flagged in " + std::to_string(c->flagged) + " of " +
                std::to_string(c->slowdown.count()) + " windows" +
                (waiting ? " (waiting: evidence about others)" : "");
      }
      cells.push_back(std::move(row));
    }
    if (rows.empty()) {
      out += "<p class=\"note\">No stage times.</p>\n";
    } else {
      if (total > ranks.size())
        out += "<p class=\"note\">Showing " + std::to_string(ranks.size()) + " of " +
               std::to_string(total) +
               " ranks: the confirmed stragglers and the ranks with the largest slowdown.</p>\n";
      out += heatmap(rows, cols, cells, "slowdown of each rank in each stage");
      out += "<div class=\"legend\"><span><span class=\"swatch\" style=\"background:" +
             slowdown_fill(1.0, false) +
             "\"></span>1× reference</span><span><span class=\"swatch\" style=\"background:" +
             slowdown_fill(1.25, false) +
             "\"></span>1.25×</span><span><span class=\"swatch\" style=\"background:" +
             slowdown_fill(1.5, false) +
             "\"></span>≥ 1.5× (own work)</span><span><span class=\"swatch\" style=\"background:" +
             slowdown_fill(1.5, true) +
             "\"></span>≥ 1.5× in communication: waiting for someone else</span></div>\n";
      out +=
          "<div id=\"cell-info\">Median over the sampled steps of t / ref, ref being the "
          "cohort's reference in that step. Point at a cell for details.</div>\n";
    }
  }
  out += "</section>\n";

  // Step time.
  out += "<section id=\"steptime\"><h2>Step time</h2>\n";
  {
    Line job{"slowest rank (the job's step time)", "#b2182b", false, {}, {}};
    Line med{"median rank", "#5f6368", true, {}, {}};
    for (const auto& p : data.points()) {
      // In doubles: the sum of two steps near 2^63 overflows an int64 (undefined behaviour).
      const double x = 0.5 * (static_cast<double>(p.first_step) + static_cast<double>(p.last_step));
      job.points.emplace_back(x, p.job_sum / p.windows);
      med.points.emplace_back(x, p.median_sum / p.windows);
      if (p.windows > 1) job.band.push_back({x, {p.job_min, p.job_max}});
    }
    std::vector<Marker> markers;
    if (sum.step_time_onset)
      markers.push_back({static_cast<double>(*sum.step_time_onset),
                         "job slower since step " + std::to_string(*sum.step_time_onset), "#b2182b",
                         true});
    for (const auto& s : sum.stragglers)
      if (s.onset_step)
        markers.push_back({static_cast<double>(*s.onset_step),
                           "rank " + std::to_string(s.rank) + " " + s.stage + " since step " +
                               std::to_string(*s.onset_step),
                           "#8a5a00", false});
    out += line_chart({job, med}, markers, "ms per step", "step time over steps");
    if (!data.points().empty() && data.points().front().windows > 1)
      out += "<p class=\"note\">Long run: each point averages " +
             std::to_string(data.points().front().windows) +
             " sampled steps; the band spans their minimum and maximum.</p>\n";
  }
  out += "</section>\n";

  if (!sum.slow_hosts.empty()) {
    out +=
        "<section id=\"hosts\"><h2>Slow hosts</h2><p class=\"note\">Every rank of the host was "
        "slow in the same stage: look at the host (thermals, power, a noisy neighbour, the "
        "NIC), not one GPU.</p><table class=\"sortable\"><thead><tr><th>host</th><th>cohort</th>"
        "<th>stage</th><th>ranks</th><th>windows</th><th>typical "
        "slowdown</th></tr></thead><tbody>\n";
    for (const auto& h : sum.slow_hosts) {
      std::string ranks;
      for (int r : h.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      out += "<tr><td>" + html_escape(h.host) + "</td><td>" + html_escape(h.cohort) + "</td><td>" +
             html_escape(h.stage) + "</td><td>" + ranks + "</td><td class=\"n\">" +
             std::to_string(h.windows) + "</td><td class=\"n\">" + num(h.typical_slowdown, 2) +
             "×</td></tr>\n";
    }
    out += "</tbody></table></section>\n";
  }

  out +=
      "<section id=\"waiting\"><h2>Waiting only</h2><p class=\"note\">Excess time spent "
      "waiting in communication: evidence that these ranks wait for someone else, not a verdict "
      "on them.</p>\n";
  if (sum.waiting.empty()) {
    out += "<p>none</p>\n";
  } else {
    out +=
        "<table class=\"sortable\"><thead><tr><th>rank</th><th>host</th><th>cohort</th>"
        "<th>stage</th><th>windows</th><th>typical excess</th></tr></thead><tbody>\n";
    for (const auto& w : sum.waiting)
      out += "<tr><td class=\"n\">" + std::to_string(w.rank) + "</td><td>" + html_escape(w.host) +
             "</td><td>" + html_escape(w.cohort) + "</td><td>" + html_escape(w.stage) +
             "</td><td class=\"n\">" + std::to_string(w.windows) + "</td><td class=\"n\">+" +
             num(w.typical_excess_ms, 1) + " ms</td></tr>\n";
    out += "</tbody></table>\n";
  }
  out += "</section>\n";

  const RunStats& st = input.stats;
  out += "<section id=\"input\"><h2>Input</h2><p>" + std::to_string(st.files) + " files, " +
         std::to_string(st.samples) + " samples, " + std::to_string(st.malformed) +
         " malformed lines, " + std::to_string(st.duplicates) + " duplicates, " +
         std::to_string(st.out_of_order) + " out-of-order lines skipped.</p>\n";
  if (!st.errors.empty()) {
    out += "<ul class=\"errors mono\">";
    for (const auto& e : st.errors) out += "<li>" + html_escape(e.message()) + "</li>";
    if (st.malformed > st.errors.size())
      out += "<li>… and " + std::to_string(st.malformed - st.errors.size()) + " more</li>";
    out += "</ul>\n";
  }
  out += "</section>\n";
  page_end(out);
  return out;
}

// ---- the comparison report -------------------------------------------------------------------

std::string render_compare_report(const Comparison& cmp, const RunProfile& baseline,
                                  const RunProfile& current, const std::string& baseline_dir,
                                  const std::string& current_dir) {
  const CompareOptions& o = cmp.options;
  bool name_cohort = false;
  for (const auto& s : cmp.stages)
    if (s.cohort != cmp.stages.front().cohort) name_cohort = true;
  const auto label = [&](const StageComparison& s) {
    return stage_label(s.stage, s.cohort, name_cohort);
  };

  std::string out;
  out.reserve(64 << 10);
  page_begin(out, "laggard compare: " + baseline_dir + " vs " + current_dir);
  const auto run_line = [](const char* what, const std::string& dir, const RunOverview& r) {
    return std::string("<p class=\"sub\">") + what + ": <span class=\"mono\">" + html_escape(dir) +
           "</span> · " + std::to_string(r.ranks) + " ranks (world size " +
           std::to_string(r.world_size) + ") · " + std::to_string(r.windows) + " sampled steps (" +
           std::to_string(r.first_step) + "–" + std::to_string(r.last_step) + "), " +
           (r.warmup == 0 ? std::string("no warm-up skipped")
                          : "the first " + std::to_string(r.warmup) + " skipped as warm-up") +
           "</p>";
  };
  out += "<header><h1>laggard compare</h1>" + run_line("baseline", baseline_dir, cmp.baseline) +
         run_line("current", current_dir, cmp.current) +
         "<p class=\"sub\">per step the median over ranks; ratio of medians with a " +
         num(100 * (1 - o.alpha), 0) + "% bootstrap interval (" + std::to_string(o.resamples) +
         " resamples) and a Mann–Whitney U test, Holm-corrected over " +
         std::to_string(cmp.stages_tested) + " stages; REGRESSED when the interval lies above " +
         num(1 + o.relative_threshold, 2) + " and p &lt; " + num(o.alpha, 2) + "</p></header>\n";

  out += "<section class=\"cards\">\n";
  if (cmp.origin >= 0) {
    const auto& s = cmp.stages[static_cast<std::size_t>(cmp.origin)];
    card(out, "Origin (first regressed stage)", html_escape(label(s)),
         num(s.ratio, 3) + "×, +" + num(s.delta_ms, 2) + " ms per step");
  } else {
    card(out, "Origin", "none", "no stage regressed");
  }
  {
    int regressed = 0;
    for (const auto& s : cmp.stages) regressed += s.verdict == Verdict::regressed;
    card(out, "Stages regressed",
         std::to_string(regressed) + " of " + std::to_string(cmp.stages.size()),
         cmp.victims.empty() ? std::string("no later regressed stages")
                             : std::to_string(cmp.victims.size()) + " possible victim(s)");
  }
  card(out, "Step time (slowest rank)",
       "<span class=\"badge " + std::string(verdict_class(cmp.step_time.verdict)) + "\">" +
           to_string(cmp.step_time.verdict) + "</span>",
       num(cmp.step_time.baseline_ms, 1) + " → " + num(cmp.step_time.current_ms, 1) + " ms (" +
           num(cmp.step_time.ratio, 3) + "×)");
  if (cmp.rank_origin >= 0) {
    const auto& r = cmp.ranks[static_cast<std::size_t>(cmp.rank_origin)];
    card(out, "First rank regressed in own work",
         "rank " + std::to_string(r.rank) + " · " +
             html_escape(stage_label(r.stage, r.cohort, name_cohort)),
         num(r.ratio, 3) + "×, " + num(r.baseline_ms, 1) + " → " + num(r.current_ms, 1) + " ms");
  }
  card(out, "Rank-stage pairs regressed",
       cmp.per_rank ? std::to_string(cmp.ranks_regressed) : "n/a",
       cmp.per_rank ? "of " + std::to_string(cmp.rank_pairs_tested) + " tested"
                    : html_escape(cmp.per_rank_note));
  out += "</section>\n";

  // Verdict sentence(s).
  out += "<section id=\"verdicts\"><h2>Stages in pipeline order</h2>\n";
  if (cmp.origin >= 0) {
    const auto& s = cmp.stages[static_cast<std::size_t>(cmp.origin)];
    out += "<p class=\"callout\"><b>Origin: " + html_escape(label(s)) + "</b> regressed " +
           num(s.ratio, 3) + "× (interval " + num(s.ci_low, 3) + "–" + num(s.ci_high, 3) + "), +" +
           num(s.delta_ms, 2) + " ms per step for the median rank. Start there.";
    if (!cmp.victims.empty()) {
      std::vector<std::string> v;
      for (int i : cmp.victims)
        v.push_back(html_escape(label(cmp.stages[static_cast<std::size_t>(i)])));
      out += " Later regressed stages, possible victims: " + join(v) + ".";
    }
    out += "</p>\n";
  } else {
    out += "<p class=\"callout ok\">No stage regressed beyond " +
           num(100 * o.relative_threshold, 1) + "%.</p>\n";
  }
  if (!cmp.hint.empty())
    out += "<p class=\"callout\" id=\"hint\"><b>Hint:</b> " + html_escape(cmp.hint) + ".</p>\n";
  if (!cmp.unknown_before_origin.empty()) {
    std::vector<std::string> v;
    for (int i : cmp.unknown_before_origin)
      v.push_back(html_escape(label(cmp.stages[static_cast<std::size_t>(i)])));
    out += "<p class=\"note\">" + std::string(cmp.origin >= 0 ? "Earlier stages" : "Stages") +
           " without enough evidence (UNKNOWN): " + join(v) + ".</p>\n";
  }
  out +=
      "<table class=\"sortable\" id=\"verdict-table\"><thead><tr><th>stage</th><th>verdict</th>"
      "<th>ratio</th><th>interval</th><th>baseline ms</th><th>current ms</th><th>change</th>"
      "<th>p (Holm)</th><th>max ms (base → cur)</th><th>steps</th><th "
      "class=\"why\">why</th></tr></thead><tbody>\n";
  for (const auto& s : cmp.stages) {
    const char* row_class = s.role == StageComparison::Role::origin   ? " class=\"origin\""
                            : s.role == StageComparison::Role::victim ? " class=\"victim\""
                                                                      : "";
    std::string role;
    if (s.role == StageComparison::Role::origin) role = "<span class=\"role origin\">ORIGIN</span>";
    if (s.role == StageComparison::Role::victim)
      role = "<span class=\"role victim\">possible victim</span>";
    out += std::string("<tr") + row_class + " data-stage=\"" + html_escape(s.stage) + "\"><td>" +
           html_escape(label(s)) + role + "</td><td><span class=\"badge " +
           verdict_class(s.verdict) + "\">" + to_string(s.verdict) +
           "</span></td><td class=\"n\">" + num(s.ratio, 3) + "</td><td class=\"n\">" +
           (std::isfinite(s.ci_low) ? num(s.ci_low, 3) + "–" + num(s.ci_high, 3) : "–") +
           "</td><td class=\"n\">" + num(s.baseline_ms, 2) + "</td><td class=\"n\">" +
           num(s.current_ms, 2) + "</td><td class=\"n\" data-v=\"" + num(s.delta_ms, 4) + "\">" +
           (s.delta_ms >= 0 ? "+" : "") + num(s.delta_ms, 2) + " ms</td><td class=\"n\">" +
           p_text(s.p_adjusted) + "</td><td class=\"n\">" + num(s.baseline_max_ms, 2) + " → " +
           num(s.current_max_ms, 2) + "</td><td class=\"n\">" + std::to_string(s.baseline_steps) +
           " / " + std::to_string(s.current_steps) + "</td><td class=\"why\">" +
           html_escape(s.reason) + "</td></tr>\n";
  }
  out += "</tbody></table>\n";
  if (!cmp.only_in_baseline.empty() || !cmp.only_in_current.empty()) {
    std::vector<std::string> b, c;
    for (const auto& s : cmp.only_in_baseline) b.push_back(html_escape(s));
    for (const auto& s : cmp.only_in_current) c.push_back(html_escape(s));
    out += "<p class=\"note\">Not compared: only in the baseline: " +
           (b.empty() ? std::string("none") : join(b)) +
           "; only in the current run: " + (c.empty() ? std::string("none") : join(c)) + ".</p>\n";
  }

  // Forest plot of the ratios.
  {
    double lo = 1.0 - 2 * o.relative_threshold, hi = 1.0 + 2 * o.relative_threshold;
    for (const auto& s : cmp.stages) {
      for (double v : {s.ratio, s.ci_low, s.ci_high})
        if (std::isfinite(v)) {
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
    }
    lo = std::max(0.0, lo - 0.02);
    hi = std::min(hi + 0.02, 5.0);
    const double W = 960, L = 200, R = 30, row = 26, T = 26;
    const double H = T + row * static_cast<double>(cmp.stages.size()) + 36;
    const auto sx = [&](double v) {
      return L + (std::clamp(v, lo, hi) - lo) / (hi - lo) * (W - L - R);
    };
    out += "<div class=\"chart\"><svg xmlns=\"http://www.w3.org/2000/svg\" id=\"forest\" width=\"" +
           px(W) + "\" height=\"" + px(H) + "\" viewBox=\"0 0 " + px(W) + " " + px(H) +
           "\" role=\"img\" aria-label=\"ratio current/baseline per stage\">\n";
    out += "<rect x=\"" + px(sx(1 - o.relative_threshold)) + "\" y=\"" + px(T - 6) + "\" width=\"" +
           px(sx(1 + o.relative_threshold) - sx(1 - o.relative_threshold)) + "\" height=\"" +
           px(row * static_cast<double>(cmp.stages.size()) + 6) + "\" fill=\"#eef5ea\"/>\n";
    out += "<line x1=\"" + px(sx(1)) + "\" x2=\"" + px(sx(1)) + "\" y1=\"" + px(T - 10) +
           "\" y2=\"" + px(H - 30) + "\" stroke=\"#5f6368\"/>\n";
    for (double t : nice_ticks(lo, hi, 6)) {
      out += "<text x=\"" + px(sx(t)) + "\" y=\"" + px(H - 14) +
             "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#5f6368\">" + num(t, 2) +
             "×</text>";
    }
    out += "<text x=\"" + px(sx(1 + o.relative_threshold)) + "\" y=\"" + px(T - 12) +
           "\" font-size=\"11\" fill=\"#4d9221\" text-anchor=\"middle\">±" +
           num(100 * o.relative_threshold, 0) + "%</text>\n";
    for (std::size_t i = 0; i < cmp.stages.size(); ++i) {
      const auto& s = cmp.stages[i];
      const double y = T + row * (static_cast<double>(i) + 0.5);
      const std::string colour = verdict_colour(s.verdict);
      out += "<g class=\"forest-row\"><title>" + html_escape(label(s)) + ": " +
             to_string(s.verdict) + ", " + html_escape(s.reason) + "</title>";
      out += "<text x=\"" + px(L - 10) + "\" y=\"" + px(y + 4) +
             "\" text-anchor=\"end\" font-size=\"12\"" +
             (s.role == StageComparison::Role::origin ? " font-weight=\"700\" fill=\"#8a5a00\">"
                                                      : " fill=\"#1d1d1f\">") +
             html_escape(label(s)) + (s.role == StageComparison::Role::origin ? " (origin)" : "") +
             "</text>";
      if (std::isfinite(s.ci_low) && std::isfinite(s.ci_high))
        out += "<line x1=\"" + px(sx(s.ci_low)) + "\" x2=\"" + px(sx(s.ci_high)) + "\" y1=\"" +
               px(y) + "\" y2=\"" + px(y) + "\" stroke=\"" + colour + "\" stroke-width=\"3\"/>";
      if (std::isfinite(s.ratio))
        out += "<circle cx=\"" + px(sx(s.ratio)) + "\" cy=\"" + px(y) + "\" r=\"5\" fill=\"" +
               colour + "\"/>";
      out += "</g>\n";
    }
    out +=
        "</svg></div>\n<p class=\"note\">Ratio current/baseline of the per-step median over "
        "ranks, with its interval; the green band is the ±" +
        num(100 * o.relative_threshold, 0) + "% within which a change does not count.</p>\n";
  }
  out += "</section>\n";

  // Step time of both runs.
  out += "<section id=\"steptime\"><h2>Step time, both runs</h2>\n";
  {
    const auto series = [](const RunProfile& p) {
      std::vector<std::pair<double, double>> v;
      const auto& st = p.step_time();
      for (std::size_t i = 0; i < st.window.size(); ++i) {
        const std::int64_t step = p.step_of(st.window[i]);
        if (step >= 0) v.emplace_back(static_cast<double>(step), st.max[i]);
      }
      return downsample(v, 600);
    };
    Line b{"baseline (slowest rank)", "#5f6368", true, series(baseline), {}};
    Line c{"current (slowest rank)", "#b2182b", false, series(current), {}};
    std::vector<Marker> markers;
    if (cmp.current.warmup > 0 && !c.points.empty()) {
      const auto& st = current.step_time();
      std::int64_t step = -1;
      for (std::size_t i = 0; i < st.window.size(); ++i)
        if (st.window[i] >= static_cast<std::uint32_t>(cmp.current.warmup)) {
          step = current.step_of(st.window[i]);
          break;
        }
      if (step >= 0)
        markers.push_back({static_cast<double>(step), "warm-up ends (current)", "#5f6368", false});
    }
    out += line_chart({b, c}, markers, "ms per step", "step time of both runs");
    out += "<p class=\"note\">Step time: " + html_escape(cmp.step_time.reason) + ".</p>\n";
  }
  out += "</section>\n";

  // Per rank.
  out += "<section id=\"per-rank\"><h2>Per rank</h2>\n";
  if (!cmp.per_rank) {
    out += "<p class=\"callout\">" + html_escape(cmp.per_rank_note) + ".</p>\n";
  } else {
    out += "<p class=\"note\">" + html_escape(cmp.per_rank_note) + ": " +
           std::to_string(cmp.ranks_regressed) + " regressed, " +
           std::to_string(cmp.ranks_improved) +
           " improved. Each cell is the ratio of the rank's own median time (current / "
           "baseline); a black border marks REGRESSED.</p>\n";
    std::vector<std::string> stage_keys;
    for (const auto& s : cmp.stages) stage_keys.push_back(s.cohort + '\x1f' + s.stage);
    std::map<int, std::vector<const RankComparison*>> by_rank;
    for (const auto& r : cmp.ranks) by_rank[r.rank].push_back(&r);
    std::vector<int> ranks;
    for (const auto& [r, v] : by_rank) ranks.push_back(r);
    const std::size_t total = ranks.size();
    constexpr std::size_t kMaxRows = 64;
    if (ranks.size() > kMaxRows) {
      std::map<int, double> worst;
      for (const auto& [r, v] : by_rank) {
        double w = 0;
        for (const auto* x : v)
          w = std::max(w, (x->verdict == Verdict::regressed ? 100.0 : 0.0) + x->ratio);
        worst[r] = w;
      }
      std::sort(ranks.begin(), ranks.end(),
                [&](int a, int b) { return worst[a] != worst[b] ? worst[a] > worst[b] : a < b; });
      ranks.resize(kMaxRows);
      std::sort(ranks.begin(), ranks.end());
      out += "<p class=\"note\">Showing " + std::to_string(kMaxRows) + " of " +
             std::to_string(total) +
             " ranks: the regressed ones first, then the largest ratios.</p>\n";
    }
    std::vector<std::string> cols, rows;
    for (const auto& s : cmp.stages) cols.push_back(label(s));
    std::vector<std::vector<HeatCell>> cells;
    for (int r : ranks) {
      rows.push_back("rank " + std::to_string(r));
      std::vector<HeatCell> row(cmp.stages.size());
      for (const auto* x : by_rank[r]) {
        const auto k =
            std::find(stage_keys.begin(), stage_keys.end(), x->cohort + '\x1f' + x->stage);
        if (k == stage_keys.end()) continue;
        HeatCell& h = row[static_cast<std::size_t>(k - stage_keys.begin())];
        h.value = x->ratio;
        h.fill = ratio_fill(x->ratio);
        h.intensity =
            std::isfinite(x->ratio) ? std::clamp(std::fabs(x->ratio - 1.0) / 0.5, 0.0, 1.0) : 0.0;
        h.text = num(x->ratio, 2);
        h.outline = x->verdict == Verdict::regressed;
        h.tip = "rank " + std::to_string(r) + " · " + x->stage + ": " + to_string(x->verdict) +
                ", " + num(x->baseline_ms, 2) + " → " + num(x->current_ms, 2) + " ms (" +
                num(x->ratio, 3) + "×), p " +
                (std::isfinite(x->p_adjusted) ? num(x->p_adjusted, 4) : "n/a") +
                " (Holm); the stage's median rank: " + to_string(x->stage_verdict);
      }
      cells.push_back(std::move(row));
    }
    if (!rows.empty()) {
      out += heatmap(rows, cols, cells, "ratio current/baseline per rank and stage");
      out += "<div id=\"cell-info\">Point at a cell for details.</div>\n";
    }
    std::vector<const RankComparison*> reg;
    for (const auto& r : cmp.ranks)
      if (r.verdict == Verdict::regressed) reg.push_back(&r);
    // Own work first (a wait in communication is evidence about someone else), then the pairs
    // whose stage did not regress for the median rank, then by ratio.
    std::stable_sort(reg.begin(), reg.end(), [](const auto* a, const auto* b) {
      const bool wa = a->kind == StageKind::communication, wb = b->kind == StageKind::communication;
      if (wa != wb) return wb;
      const bool ma = a->stage_verdict == Verdict::regressed,
                 mb = b->stage_verdict == Verdict::regressed;
      if (ma != mb) return mb;
      return a->ratio > b->ratio;
    });
    if (!reg.empty()) {
      out +=
          "<table class=\"sortable\" id=\"rank-table\"><thead><tr><th>rank</th><th>stage</th>"
          "<th>ratio</th><th>interval</th><th>baseline ms</th><th>current ms</th><th>change</th>"
          "<th>p (Holm)</th><th>stage median rank</th></tr></thead><tbody>\n";
      for (std::size_t i = 0; i < reg.size() && i < 100; ++i) {
        const auto* x = reg[i];
        out += "<tr><td class=\"n\">" + std::to_string(x->rank) + "</td><td>" +
               html_escape(stage_label(x->stage, x->cohort, name_cohort)) +
               "</td><td class=\"n\">" + num(x->ratio, 3) + "</td><td class=\"n\">" +
               num(x->ci_low, 3) + "–" + num(x->ci_high, 3) + "</td><td class=\"n\">" +
               num(x->baseline_ms, 2) + "</td><td class=\"n\">" + num(x->current_ms, 2) +
               "</td><td class=\"n\">+" + num(x->delta_ms, 2) + " ms</td><td class=\"n\">" +
               p_text(x->p_adjusted) + "</td><td><span class=\"badge " +
               verdict_class(x->stage_verdict) + "\">" + to_string(x->stage_verdict) +
               "</span></td></tr>\n";
      }
      out += "</tbody></table>\n";
      if (reg.size() > 100)
        out += "<p class=\"note\">… and " + std::to_string(reg.size() - 100) + " more.</p>\n";
    }
  }
  out += "</section>\n";
  page_end(out);
  return out;
}

}  // namespace laggard
