// laggard — the offline outputs of a recorded run, in one place: the summary as text and JSON
// (`laggard analyze`), the triage chain as text and JSON (`laggard diagnose`) and the HTML report
// (`laggard report`, laggard/html_report.hpp). The `laggard` program, the Python package
// (`laggard.analyze_run`) and the demo all render through these; the live sinks are in
// laggard/sink.hpp. docs/design.md, "Sinks".
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "laggard/compare.hpp"
#include "laggard/diagnose.hpp"
#include "laggard/export.hpp"
#include "laggard/html_report.hpp"
#include "laggard/jsonl.hpp"
#include "laggard/source.hpp"
#include "laggard/summary.hpp"

namespace laggard {

/// What was read, and how it was analysed (the outputs' headers and input counters).
struct RunOutputInput {
  std::string run_dir;
  std::string baseline_dir;  ///< empty: no baseline
  DetectorOptions options;
  RunStats stats;
  RunFormat format = RunFormat::sample_logs;
  std::vector<std::string> files;  ///< the rank files or traces read
};

/// How analyze_run reads.
struct AnalyzeRunOptions {
  /// The detector's options for a run of `files` rank files or traces (a preset depends on the
  /// world size); unset: DetectorOptions{}.
  std::function<DetectorOptions(std::size_t files)> detector;
  std::string baseline_dir;  ///< also compare against this run (the regression layer)
  /// Called with (bytes done, bytes total) while the run is read.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
  bool report_data = true;  ///< keep what the HTML report draws (a few KB per rank and stage)
  bool triage = true;       ///< feed the triage chain (false: `diagnosis` is left empty)
};

/// A whole run read and analysed: what every offline output renders.
struct RunResult {
  RunOutputInput input;
  RunSummary summary;
  Diagnosis diagnosis;
  RunReportData report_data;
  std::int64_t baseline_windows = 0;  ///< sampled steps read from the baseline
};

/// Reads `dir` (rank logs or profiler traces) window by window into the run analysis, the triage
/// chain (with the traces' device timeline when `dir` holds traces) and the report's data; with a
/// baseline, compares the two. Throws InputError for input that cannot be read at all and
/// std::invalid_argument for invalid options. A run without one well-formed sample gives a
/// summary of 0 windows (the caller decides whether that is an error). Memory: bounded by ranks,
/// not steps.
LAGGARD_API RunResult analyze_run(const std::string& dir, const AnalyzeRunOptions& options = {});

/// `laggard analyze`'s text.
LAGGARD_API std::string summary_text(const RunSummary& summary, const RunOutputInput& input);
/// `laggard analyze --json`'s object (indented by 2, a newline at the end).
LAGGARD_API std::string summary_json(const RunSummary& summary, const RunOutputInput& input);
/// `laggard diagnose`'s text.
LAGGARD_API std::string diagnosis_text(const Diagnosis& diagnosis, const RunOutputInput& input);
/// `laggard diagnose --json`'s object (indented by 2, a newline at the end).
LAGGARD_API std::string diagnosis_json(const Diagnosis& diagnosis, const RunOutputInput& input);

/// The outputs by name.
enum class RunOutput : std::uint8_t { text = 0, json = 1, diagnosis_text = 2, diagnosis_json = 3,
                                      html = 4 };
/// One output of a run: the summary (text, json), the chain (diagnosis_text, diagnosis_json) or
/// the HTML report (html, with the chain as its first section).
LAGGARD_API std::string render(const RunResult& run, RunOutput what);

}  // namespace laggard
