// laggard — the HTML report sink: one self-contained file (inline CSS, SVG and a little JS; no
// network access needed to view it) for `laggard report` and `laggard compare --html`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "laggard/compare.hpp"
#include "laggard/detector.hpp"
#include "laggard/diagnose.hpp"
#include "laggard/export.hpp"
#include "laggard/jsonl.hpp"
#include "laggard/model.hpp"
#include "laggard/summary.hpp"

namespace laggard {

/// Streaming median (the P² algorithm of Jain and Chlamtac: five markers, O(1) per value, no
/// allocation). Exact for up to five values. Not thread-safe.
class LAGGARD_API StreamingMedian {
 public:
  void add(double x) noexcept;
  double value() const noexcept;  ///< NaN when empty
  std::int32_t count() const noexcept { return count_; }

 private:
  double q_[5] = {0, 0, 0, 0, 0};
  std::int32_t n_[5] = {1, 2, 3, 4, 5};
  std::int32_t count_ = 0;
};

/// What the run report draws beyond RunSummary, gathered window by window in memory bounded by
/// ranks × stages (not steps): per (rank, stage) the median over windows of t / ref (streaming),
/// the windows it was flagged in and its largest t / ref; and the job's step time over steps in
/// at most `max_points` buckets (neighbouring buckets merge as the run grows). Not thread-safe.
class LAGGARD_API RunReportData {
 public:
  explicit RunReportData(std::size_t max_points = 600);

  /// `report` is what RunAnalysis::add (or Detector::observe) returned for `window`.
  void add(const Window& window, const Report& report);

  struct Cell {
    int rank = 0;
    std::uint32_t stage = 0;   ///< into stages()
    StreamingMedian slowdown;  ///< t / ref per window
    float max_slowdown = 0.0f;
    std::int32_t flagged = 0;  ///< windows it was flagged in (straggler or waiting)
  };
  struct Stage {
    std::string name;
    StageKind kind = StageKind::compute;
  };
  /// Step time over the run: per bucket of consecutive windows, the slowest rank's step_ms
  /// (mean, min, max over the bucket) and the median rank's (mean).
  struct Point {
    std::int64_t first_step = 0;
    std::int64_t last_step = 0;
    std::int32_t windows = 0;
    double job_sum = 0.0, job_min = 0.0, job_max = 0.0, median_sum = 0.0;
  };

  /// In the order first seen (a Cell's `stage` indexes it); pipeline_order() gives the page's.
  const std::vector<Stage>& stages() const noexcept { return stages_; }
  /// Indices into stages() in pipeline order: each stage right after the stage it followed in
  /// the window that first held it (across cohorts). O(stages).
  std::vector<std::uint32_t> pipeline_order() const;
  const std::vector<Cell>& cells() const noexcept { return cells_; }
  const std::vector<Point>& points() const noexcept { return points_; }
  /// Host and cohort of a rank ("" when unknown).
  const std::string& host_of(int rank) const noexcept;
  const std::string& cohort_of(int rank) const noexcept;

 private:
  static constexpr std::uint32_t kNone = 0xffffffffu;
  // O(1) expected: a hash lookup; a new stage is linked after `previous` (kNone: first).
  std::uint32_t stage_index(const std::string& name, StageKind kind, std::uint32_t previous);
  Cell* cell(std::size_t stage, int rank);

  std::size_t max_points_;
  std::int32_t bucket_windows_ = 1;  // windows per bucket
  std::vector<Stage> stages_;
  std::unordered_map<std::string, std::uint32_t> stage_of_name_;
  std::vector<std::uint32_t> next_stage_;  // per stage: the next in pipeline order, or kNone
  std::uint32_t first_stage_ = kNone;
  std::vector<std::vector<std::int32_t>> slot_;  // per stage: rank → index into cells_
  std::vector<Cell> cells_;
  std::vector<std::string> host_, cohort_;  // per rank
  std::vector<Point> points_;
  std::vector<double> scratch_;
};

/// Where the report's figures came from (shown in its header).
struct RunReportInput {
  std::string run_dir;
  DetectorOptions options;
  RunStats stats;
  /// The triage chain (laggard diagnose), shown as the report's first section when given.
  std::optional<Diagnosis> triage;
};

/// The run report: summary cards, the triage chain (when given), the ranks × stages heatmap (median t / ref; at most 64 ranks
/// drawn, the slowest first, when the world is larger), the step time over steps with the
/// detected onsets marked, and the tables of confirmed stragglers (with their evidence), slow
/// hosts and waiting ranks. Every text from the logs is escaped. Thread-safe (pure).
LAGGARD_API std::string render_run_report(const RunSummary& summary, const RunReportData& data,
                                          const RunReportInput& input);

/// The comparison report: per-stage verdicts with the origin highlighted, a forest plot of the
/// ratios and their intervals, the step time of both runs, and the per-rank comparison.
LAGGARD_API std::string render_compare_report(const Comparison& comparison,
                                              const RunProfile& baseline, const RunProfile& current,
                                              const std::string& baseline_dir,
                                              const std::string& current_dir);

/// Text made safe for HTML element content and quoted attribute values (& < > " ').
LAGGARD_API std::string html_escape(std::string_view text);

}  // namespace laggard
