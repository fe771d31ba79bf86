// laggard — PyTorch profiler (Kineto) traces as a source: one Chrome-trace JSON file per rank
// (`.json` or `.json.gz`), read as a stream into the same StepSample records as every other
// source, plus what the device did between kernels (the timeline's bubbles).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "laggard/export.hpp"
#include "laggard/jsonl.hpp"
#include "laggard/model.hpp"

namespace laggard {

/// How traces are read.
struct TraceOptions {
  /// Bytes of JSON scanned at a time. A file is never held whole: memory is this chunk (twice,
  /// for the batch handed to simdjson) plus compact records of the events laggard uses.
  std::size_t chunk_bytes = std::size_t{4} << 20;
  /// Trace files read at once by TraceRunReader: 0 = one per core, at most 8.
  int jobs = 0;
  /// The most compact records (steps, annotation spans, launch calls, device activities,
  /// collectives, distinct annotation names) kept of one file: past it the file is refused with
  /// an InputError naming it. Memory of reading a file stays within about 100 bytes per record
  /// (about 420 MB at the default) whatever the file inflates to (a gzip bomb: a few MB that
  /// inflate to gigabytes of kernel events). 0 = no limit.
  std::uint64_t max_records = std::uint64_t{1} << 22;
  /// Called with (bytes done, bytes total) of the files on disk while a directory is read; calls
  /// are serialized (never two at once) but may come from a reading thread.
  std::function<void(std::uint64_t, std::uint64_t)> progress;
};

/// What the device did during one step of one rank. Every figure is in ms; busy + copy +
/// data_wait + comm_idle + launch_wait + other_idle = window (docs/howto/traces.md defines each).
/// Idle time goes to the first of data_wait, comm_idle, launch_wait, other_idle that the trace
/// explains it by.
struct StepTimeline {
  std::int64_t step = 0;
  double step_ms = 0.0;         ///< the ProfilerStep annotation's duration on the host
  double window_ms = 0.0;       ///< the device time this step covers
  double busy_ms = 0.0;         ///< some kernel (or memset) running
  double copy_ms = 0.0;         ///< only copies running, none of them host-to-device
  double data_wait_ms = 0.0;    ///< idle while the host was loading data (a DataLoader's
                                ///< __next__, an annotation of kind data), or only
                                ///< host-to-device copies running
  double comm_idle_ms = 0.0;    ///< idle while the host was in a collective (an annotation of
                                ///< kind communication: nccl:*, c10d::*, ## sparse_data_dist ##)
  double launch_wait_ms = 0.0;  ///< idle before the next kernel's launch call had returned:
                                ///< the host too slow to feed the device
  double other_idle_ms = 0.0;   ///< idle for any other reason
  double comm_ms = 0.0;         ///< NCCL kernel time (included in busy_ms)
  /// The part of comm_ms spent waiting for ranks that reached the collective later: filled by
  /// analyze_timeline (0 straight from the reader).
  double comm_wait_ms = 0.0;
  std::uint32_t activities = 0;   ///< kernels, copies and memsets of the step
  std::uint32_t collectives = 0;  ///< NCCL kernels of the step
};

/// One NCCL kernel, for matching the same collective across ranks.
struct CollectiveKernel {
  std::int64_t step = 0;
  std::uint32_t ordinal = 0;    ///< its place among its process group's collectives in the step
  std::uint64_t group = 0;      ///< hash of the process group's name ("0", "default_pg")
  std::uint64_t signature = 0;  ///< hash of the collective's name and element counts
  double ms = 0.0;              ///< kernel duration
  std::string name;             ///< "allreduce", ... (the kernel's name when args lack one)
};

/// What reading one trace file met.
struct TraceFileStats {
  std::string path;
  std::uint64_t bytes = 0;       ///< size on disk (compressed, for .gz)
  std::uint64_t json_bytes = 0;  ///< JSON text scanned (after decompression)
  std::size_t events = 0;        ///< elements of traceEvents
  std::size_t malformed = 0;     ///< events skipped: not a JSON object, or a field of the wrong type
  std::size_t steps = 0;         ///< ProfilerStep#N annotations
  std::size_t activities = 0;    ///< device kernels, copies and memsets
  std::size_t launches = 0;      ///< host launch calls (cudaLaunchKernel, cudaMemcpyAsync, ...)
  std::size_t unmatched = 0;     ///< activities with no launch of their correlation id: placed by
                                 ///< their device time, their stage from device-side annotations
  std::size_t outside_steps = 0;  ///< activities launched outside every ProfilerStep: left out
  bool truncated = false;         ///< the file ended (or its gzip stream broke) inside the JSON
  std::vector<LineError> errors;  ///< the first few problems, with their line
};

/// Everything laggard keeps of one rank's trace: a few numbers per step and stage.
struct RankTrace {
  RankInfo info;
  bool rank_from_file_name = false;  ///< no distributedInfo.rank: the file name's number
  bool has_device_activity = false;  ///< stage times are device times (else host times)
  std::vector<StepSample> samples;   ///< one per ProfilerStep, ascending step
  std::vector<StepTimeline> timeline;         ///< the same steps; empty without device activity
  std::vector<CollectiveKernel> collectives;  ///< by step, then launch order
  TraceFileStats stats;
};

/// Reads one rank's trace (`.json`, or gzip-compressed whatever its name). Memory: the chunk
/// buffers, ~40 bytes per device activity, host launch call and annotation kept for the end of
/// the file (Kineto writes every host event before the device events, so a step is complete only
/// then), never the raw events. Throws InputError when the file cannot be opened or read, is not
/// a trace (no traceEvents), names no rank (no distributedInfo.rank and no rank-N in its name),
/// or has no ProfilerStep#N annotation. Malformed events are skipped and counted. Thread-safe
/// (no shared state).
LAGGARD_API RankTrace read_trace(const std::string& path, const TraceOptions& options = {});

/// The trace files of `dir`: regular files named *.json or *.json.gz whose first bytes look like
/// a profiler trace (a JSON object holding traceEvents, or a JSON array of events), sorted by
/// name. Throws InputError for a missing directory. Cost: one small read per candidate file.
LAGGARD_API std::vector<std::string> find_trace_files(const std::string& dir);

/// A directory of per-rank traces as Windows in step order, like RunReader for sample logs. The
/// files are read (several at once, TraceOptions::jobs) at the first next() or load(); then
/// every rank's samples are held (a few numbers per rank, step and stage). Not thread-safe.
class LAGGARD_API TraceRunReader {
 public:
  /// Throws InputError for a missing directory or one without trace files.
  explicit TraceRunReader(const std::string& dir, TraceOptions options = {});
  ~TraceRunReader();
  TraceRunReader(const TraceRunReader&) = delete;
  TraceRunReader& operator=(const TraceRunReader&) = delete;

  /// Reads every file (once). Throws InputError for a file read_trace refuses, or two files
  /// that claim the same rank.
  void load();
  /// Next window (every rank's sample of the smallest remaining step), or false at the end.
  bool next(Window& out);

  const RunStats& stats() const noexcept;
  std::uint64_t bytes_read() const noexcept;
  std::uint64_t bytes_total() const noexcept;
  const std::vector<std::string>& files() const noexcept;
  /// Every rank's trace, ascending rank (after load()).
  const std::vector<RankTrace>& ranks() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace laggard
