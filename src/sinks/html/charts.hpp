// The HTML report's SVG charts, drawn here (no script library): line charts over steps and
// heatmaps, with the tick marks and the down-sampling they share.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "sinks/html/format.hpp"

namespace laggard::html {

/// About `target` round tick values covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int target);
/// A tick's label: as few decimals as it needs (at most 2).
std::string tick_label(double v);

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
                       const std::string& y_label, const std::string& aria);

// One heatmap row or column header: label plus an optional title.
struct HeatCell {
  double value = kNaN;   // what colours the cell
  std::string fill;      // colour
  std::string text;      // in-cell text (escaped by caller: numbers only)
  std::string tip;       // hover text (raw; escaped here)
  bool outline = false;  // drawn with a dark border (e.g. REGRESSED)
  double intensity = 0;  // how saturated `fill` is, in [0, 1] (picks the text colour)
};

/// A heatmap: one row per label, one column per label, a cell each (`fill` empty: none drawn).
std::string heatmap(const std::vector<std::string>& row_labels,
                    const std::vector<std::string>& col_labels,
                    const std::vector<std::vector<HeatCell>>& cells, const std::string& aria);

/// Averages consecutive points so that at most `limit` remain (bounded page size).
std::vector<std::pair<double, double>> downsample(const std::vector<std::pair<double, double>>& v,
                                                  std::size_t limit);

}  // namespace laggard::html
