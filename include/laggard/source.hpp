// laggard — a recorded run as one stream of Windows, whatever wrote it: laggard's own sample
// logs (RUN_DIR/rank-*.jsonl) or a directory of per-rank PyTorch profiler traces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "laggard/export.hpp"
#include "laggard/jsonl.hpp"
#include "laggard/model.hpp"
#include "laggard/trace.hpp"

namespace laggard {

enum class RunFormat : std::uint8_t { sample_logs = 0, profiler_traces = 1 };

/// "sample logs" or "profiler traces". Thread-safe.
LAGGARD_API const char* to_string(RunFormat format) noexcept;

/// What `dir` holds: sample logs when it has rank-*.jsonl files (they win when both are there),
/// else profiler traces when find_trace_files finds any. Throws InputError for a missing
/// directory or one with neither, saying what was looked for.
LAGGARD_API RunFormat detect_run_format(const std::string& dir);

/// One small interface over the run readers (RunReader, TraceRunReader). Not thread-safe.
class LAGGARD_API RunSource {
 public:
  virtual ~RunSource() = default;
  /// Next window in step order, or false at the end.
  virtual bool next(Window& out) = 0;
  virtual const RunStats& stats() const noexcept = 0;
  virtual std::uint64_t bytes_read() const noexcept = 0;
  virtual std::uint64_t bytes_total() const noexcept = 0;
  virtual const std::vector<std::string>& files() const noexcept = 0;
  virtual RunFormat format() const noexcept = 0;
  /// The traces read, for a profiler-trace run (after the first next()); nullptr otherwise.
  virtual const std::vector<RankTrace>* traces() const noexcept { return nullptr; }
};

/// Opens `dir` in the format detect_run_format names. Throws InputError as the readers do.
LAGGARD_API std::unique_ptr<RunSource> open_run(const std::string& dir,
                                                TraceOptions trace_options = {});

}  // namespace laggard
