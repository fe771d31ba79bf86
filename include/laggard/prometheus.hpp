// laggard — the Prometheus sink of the C++ Analyzer: each report's straggler/* metrics as a
// textfile for node-exporter's textfile collector (--collector.textfile.directory), written
// atomically, so a scrape never reads half a file.
//
//   laggard::AnalyzerOptions opt;
//   opt.sinks.push_back(laggard::prometheus_textfile_sink(
//       "/var/lib/node_exporter/textfile/laggard.prom", {rank, world_size, local_rank, host}));
//
// A textfile rather than an HTTP endpoint of its own: the node's exporter already serves it (no
// port per training job to allocate, open or collide on between ranks of one host), it adds no
// dependency to the library, and the last report stays readable after the job ends.
#pragma once

#include <cstdint>
#include <string>

#include "laggard/analyzer.hpp"
#include "laggard/detector.hpp"
#include "laggard/export.hpp"
#include "laggard/model.hpp"

namespace laggard {

/// The Prometheus text exposition (format 0.0.4) of one report's metrics:
///   laggard_stage_<field>{stage="..."}       straggler/<stage>/<field> (mean_ms, max_ms,
///                                           slowdown_ratio, relative_score, top_rank,
///                                           num_stragglers)
///   laggard_stage_local_ms{stage,rank,host}  straggler/<stage>/local_ms: `self`'s own time
///   laggard_<name>                          every other numeric straggler/<name>
///   laggard_report_step                     `step`
///   laggard_confirmed_straggler{rank,stage} 1 per item of straggler/confirmed
///   laggard_likely_bottleneck{stage}        1 for straggler/likely_bottleneck
/// (the names laggard.sinks.PrometheusSink serves). Characters a metric name cannot hold
/// become '_'; label values are escaped. Thread-safe (a pure function).
LAGGARD_API std::string prometheus_text(std::int64_t step, const Metrics& metrics,
                                        const RankInfo& self);

/// Writes `text` to `path` atomically: a temporary file beside it (a name node-exporter does
/// not read, since it does not end in .prom), flushed and renamed over `path`. False, with the
/// reason in `error`, when that fails; the temporary file is then removed.
LAGGARD_API bool write_file_atomically(const std::string& path, const std::string& text,
                                       std::string& error);

/// A MetricsSink writing prometheus_text() of every report to `path`, atomically. `self` is the
/// analysis rank (its rank and host label local_ms). Throws std::invalid_argument at setup if
/// `path` is empty or does not end in ".prom" (node-exporter reads only those). A failed write
/// throws std::runtime_error from the sink, which the Analyzer counts and warns about
/// (straggler/report_errors); the previous file stays whole. Cost: one file write and rename
/// per report, on the analysis rank's background thread.
LAGGARD_API MetricsSink prometheus_textfile_sink(std::string path, RankInfo self);

}  // namespace laggard
