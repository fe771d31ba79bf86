// Shared output helpers of the `laggard` program: number formatting, JSON, progress.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "laggard/detail/text.hpp"
#include "laggard/detector.hpp"
#include "laggard/jsonl.hpp"
#include "laggard/trace.hpp"

namespace laggard::cli {

using Json = nlohmann::ordered_json;
/// How --json output writes strings that are not UTF-8 (a run directory's name, --stages):
/// each bad byte as U+FFFD. The default would throw, and abort the program.
inline constexpr auto kJsonReplace = Json::error_handler_t::replace;

// Numbers and names from the input, safe for a terminal (laggard/detail/text.hpp).
using detail::fixed;
using detail::join_ints;
using detail::printable;
/// A finite number, or null.
Json number_or_null(double value);

/// Writes `text` to `path` through a temporary file in the same directory (mkstemp: created
/// exclusively, never through a link), renamed over `path` once complete: a full disk or a crash
/// leaves `path` as it was, never empty or cut; a file replaced keeps its mode. A symbolic link
/// at `path` is followed only when owned by the user running laggard or by root: another user's
/// link is refused (docs/reference/security.md). Refuses a `path` that is one of `inputs` (the rank files
/// being read). Throws UsageError (exit 2) naming the file.
void write_file_replacing(const std::string& path, const std::string& text,
                          const std::vector<std::string>& inputs = {});
/// Warns on stderr about what the reader of `dir` met that is not a bad line (ranks disagreeing
/// on world_size).
void warn_input(const std::string& dir, const RunStats& stats);

/// Progress on stderr for long inputs: one rewritten line, at most 4 updates a second, and only
/// when stderr is a terminal (quiet in pipes and CI logs).
class Progress {
 public:
  Progress(std::string what, bool enabled);
  ~Progress();
  void update(std::uint64_t done, std::uint64_t total);
  void finish();

 private:
  std::string what_;
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

/// Trace-reading options that report to `progress` while a directory of traces is read.
TraceOptions progress_options(Progress& progress);

}  // namespace laggard::cli
