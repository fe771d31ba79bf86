// What the live analysis reports per window beyond the detector: its metrics and one line of
// reports.jsonl. Shared by the C++ Analyzer and the Python side channel. Private.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "laggard/detector.hpp"

namespace laggard {

/// Appends {"step":N,<metrics in name order>,"stragglers":[...],"waiting":[...]} and '\n' to
/// `out` (the layout the Python JsonlReportSink writes). Non-finite numbers become null.
void append_report_json(std::int64_t step, const Metrics& metrics, const Report& report,
                        std::string& out);

/// The report's confirmed stragglers, costliest first (cost_ms; ties in report order): the order
/// of straggler/confirmed and of the verdict that every other rank reads.
std::vector<const RankFinding*> confirmed_costliest_first(const Report& report);

/// Adds the live analysis's metrics to `metrics`: straggler/num_confirmed and
/// straggler/confirmed ("rank:stage,..." of the report's confirmed stragglers, costliest first),
/// and the counts
/// given as straggler/report_errors, straggler/dropped_samples, straggler/incomplete_windows.
void add_live_metrics(const Report& report, double report_errors, double dropped_samples,
                      double incomplete_windows, Metrics& metrics);

}  // namespace laggard
