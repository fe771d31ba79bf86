// laggard — sinks: where the live analysis's reports go.
//
// A sink receives each window's report on the analysis rank, on laggard's background thread
// (never the training thread), in step order. What it throws is counted in
// straggler/report_errors and logged, rate-limited; later reports still reach it. close() is
// called once, when the Analyzer closes. Built-in: callback_sink (a function of the metrics) and
// the reports.jsonl file (AnalyzerOptions::log_dir); Python's sinks plug in the same way
// (docs/design.md, "Extension points").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "laggard/detector.hpp"
#include "laggard/export.hpp"

namespace laggard {

/// Receives each report's `straggler/*` metrics, on the analysis rank, on laggard's background
/// thread (never the training thread). An exception it throws is counted and logged; later
/// reports still reach it.
using MetricsSink = std::function<void(std::int64_t step, const Metrics& metrics)>;

/// Where reports go. Called from one thread at a time (the Analyzer's background thread).
class LAGGARD_API Sink {
 public:
  virtual ~Sink();
  /// Names the sink in warnings (kind "sink NAME"; "" gives kind "sink").
  virtual std::string name() const = 0;
  /// One window: its metrics (with the live analysis's own keys) and its full report.
  virtual void write(std::int64_t step, const Metrics& metrics, const Report& report) = 0;
  /// No more reports.
  virtual void close() {}
};

/// A MetricsSink as a Sink (what AnalyzerOptions::sinks and Analyzer::add_sink take).
LAGGARD_API std::shared_ptr<Sink> callback_sink(MetricsSink fn, std::string name = "");

}  // namespace laggard
