// laggard — JSON Lines I/O for per-rank samples (schema "laggard.sample/1") and run directories.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "laggard/export.hpp"
#include "laggard/model.hpp"

namespace laggard {

inline constexpr std::string_view kSampleSchema = "laggard.sample/1";

/// The longest line a sample log may hold (16 MiB, without its '\n'). A longer line is skipped as
/// malformed without being held in memory: a reader's buffer never grows past this.
inline constexpr std::size_t kMaxLineBytes = std::size_t{16} << 20;

/// Appends `sample` as one JSON object and a '\n' to `out`. Numbers are written so that they
/// read back exactly (shortest round-trip form). A stage whose `ms` is not finite (infinity,
/// NaN) is left out of the line, so that the rest of the sample stays readable; the result is
/// the number of stages left out, for the caller to count. A non-finite `step_ms` is written as
/// null (the reader refuses the line). Thread-safe (no shared state).
LAGGARD_API std::size_t append_sample_json(const StepSample& sample, std::string& out);

/// Parses one line of a sample log into `out`, reusing its buffers. On failure returns false and
/// sets `error` to what was wrong ("field 'ms' of stage 2 is negative (-1)"); `out` is then
/// unspecified. Accepts extra fields; rejects a missing or wrong schema, a missing rank/step,
/// non-numeric, negative or non-finite ms, an unknown kind. Not thread-safe per parser.
class LAGGARD_API SampleParser {
 public:
  SampleParser();
  ~SampleParser();
  SampleParser(const SampleParser&) = delete;
  SampleParser& operator=(const SampleParser&) = delete;
  bool parse(std::string_view line, StepSample& out, std::string& error);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A bad line: where it is and what was wrong.
struct LineError {
  std::string file;
  std::size_t line = 0;  ///< 1-based
  std::string what;
  /// "FILE:LINE: WHAT"
  std::string message() const { return file + ":" + std::to_string(line) + ": " + what; }
};

/// Thrown for input that cannot be read at all (missing file or directory, no rank files).
class LAGGARD_API InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Streams one rank file line by line in fixed-size chunks (memory does not grow with the file).
/// Malformed lines are skipped and reported through `errors()`; a truncated last line (no '\n',
/// does not parse) counts as malformed. Not thread-safe.
class LAGGARD_API SampleFileReader {
 public:
  /// Throws InputError if the file cannot be opened.
  explicit SampleFileReader(std::string path, std::size_t chunk_bytes = 1 << 20);
  ~SampleFileReader();
  SampleFileReader(const SampleFileReader&) = delete;
  SampleFileReader& operator=(const SampleFileReader&) = delete;

  /// Next well-formed sample, or false at end of file.
  bool next(StepSample& out);

  const std::string& path() const noexcept;
  std::size_t lines() const noexcept;          ///< lines read so far (blank lines included)
  std::size_t malformed() const noexcept;      ///< lines skipped as malformed
  std::uint64_t bytes() const noexcept;        ///< bytes consumed so far
  /// The first malformed lines (at most 20 kept; `malformed()` counts them all).
  const std::vector<LineError>& errors() const noexcept;
  /// Asks the CPU to fetch the start of the next line into its caches (no effect on results).
  void prefetch() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// What reading a run directory met along the way.
struct RunStats {
  std::size_t files = 0;
  std::size_t samples = 0;        ///< well-formed samples used
  std::size_t malformed = 0;      ///< lines skipped as malformed
  std::size_t duplicates = 0;     ///< (rank, step) seen before: later copy skipped
  std::size_t out_of_order = 0;   ///< a step lower than the file's previous one: skipped
  std::size_t windows = 0;
  std::uint64_t bytes = 0;
  std::vector<LineError> errors;  ///< the first few malformed lines, all files together
  /// Samples whose world_size differs from the first sample's (they are still used), and the
  /// first such difference in words ("files disagree on world_size: rank 5 says 8 ...").
  std::size_t world_size_conflicts = 0;
  std::string world_size_conflict;
  /// Samples whose rank is not the one their file's name says (rank-0.jsonl holding rank 1:
  /// they are used as the rank they say), and the first such, in file order, with its file and
  /// line ("rank-0.jsonl:3 holds rank 1, not rank 0 as its name says").
  std::size_t rank_mismatches = 0;
  std::string rank_mismatch;
};

/// How a RunReader reads.
struct RunReaderOptions {
  static constexpr unsigned kAuto = ~0u;
  /// Worker threads that read and parse the files ahead of next(), each a range of them, while
  /// next() only merges their windows: 0 reads in the caller's thread, in next(). kAuto picks:
  /// none on one CPU, else one per CPU besides the caller's (at most 8): on two CPUs, one thread
  /// parses while the caller analyses. The windows, the statistics and the errors kept are the
  /// same whatever the number.
  unsigned workers = kAuto;
};

/// Reads RUN_DIR/rank-*.jsonl and yields one Window per step, in step order, merging the files
/// as they stream (memory bounded by ranks, not steps: with workers, at most 32 windows are read
/// ahead). Each file must be in ascending step order, as laggard writes it. Cost: the
/// parse, about 0.3 µs per sample line of 8 stages on one core. Not thread-safe (its workers
/// are its own business: one thread calls next()).
class LAGGARD_API RunReader {
 public:
  /// Throws InputError for a missing directory, one without rank-*.jsonl files (naming any
  /// rank-X.jsonl whose X is not a number), or a rank file that is not a readable regular file
  /// (a directory, a FIFO, a dangling or looping symbolic link), as for an unreadable file.
  explicit RunReader(const std::string& run_dir, RunReaderOptions options = {});
  ~RunReader();
  RunReader(const RunReader&) = delete;
  RunReader& operator=(const RunReader&) = delete;

  /// Next window (all samples with the smallest remaining step), or false when all files end.
  /// Rethrows an InputError a worker met (a read error) when the merge reaches it.
  bool next(Window& out);

  const RunStats& stats() const noexcept;
  /// Bytes consumed so far and total bytes of the rank files (for progress).
  std::uint64_t bytes_read() const noexcept;
  std::uint64_t bytes_total() const noexcept;
  const std::vector<std::string>& files() const noexcept;
  /// Worker threads reading (0: the caller's thread reads, in next()).
  unsigned workers() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace laggard
