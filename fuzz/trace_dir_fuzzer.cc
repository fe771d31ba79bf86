// libFuzzer target: a directory of profiler traces, plain or gzip-compressed (gzip bombs, broken
// gzip streams, cut files), through TraceRunReader and the `laggard analyze` command.
//
// The input is split at each run of four bytes 0x1e (compressed bytes hold a lone 0x1e often)
// into rank-0.json.gz, rank-1.json.gz, ... (at most 4 files; the name says gzip, the bytes
// decide: a piece that is not gzip is read as plain text, or named as damaged). Properties: no crash, no exception but the documented refusals
// (InputError, UsageError: exit 2 with a reason); with a record cap of 65,536 (the default's
// ratio at fuzz scale: an input of at most 64 KiB can inflate to about 64 MiB), the records kept
// stay under the cap whatever the input inflates to, so the run's memory stays far below the
// fuzzer's -rss_limit_mb.
#include <cstdint>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "commands.hpp"
#include "fuzz_common.hpp"
#include "laggard/trace.hpp"

namespace {

constexpr std::string_view kSeparator = "\x1e\x1e\x1e\x1e";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  const fs::path dir = laggard::fuzz::scratch_dir() / "traces";
  laggard::fuzz::split_into_files(
      dir, std::string_view(reinterpret_cast<const char*>(data), size), kSeparator, 4,
      [](int rank) { return "rank-" + std::to_string(rank) + ".json.gz"; });
  laggard::fuzz::Silence quiet;
  laggard::TraceOptions options;
  options.max_records = 1 << 16;
  options.jobs = 1;
  bool within_cap = false;
  try {
    laggard::TraceRunReader reader(dir.string(), options);
    laggard::Window w;
    while (reader.next(w)) {
    }
    for (const laggard::RankTrace& r : reader.ranks())
      if (r.samples.size() > options.max_records)
        laggard::fuzz::fail("more samples kept than the record cap");
    within_cap = true;
  } catch (const laggard::InputError& e) {
    if (std::string(e.what()).empty()) laggard::fuzz::fail("an input error without a reason");
  }
  // The program's own reading has the default cap (4M records): an input over the fuzz-scale
  // cap would only spend seconds per input under the sanitizers there, so it stops here.
  if (!within_cap) return 0;
  laggard::cli::AnalyzeArgs analyze;
  analyze.run_dir = dir.string();
  analyze.quiet = true;
  try {
    const int rc = laggard::cli::run_analyze(analyze);
    if (rc != laggard::cli::kExitOk && rc != laggard::cli::kExitUsage)
      laggard::fuzz::fail("exit status " + std::to_string(rc));
  } catch (const laggard::cli::UsageError& e) {
    if (e.what.empty()) laggard::fuzz::fail("a refusal without a reason");
  } catch (const laggard::InputError& e) {
    if (std::string(e.what()).empty()) laggard::fuzz::fail("an input error without a reason");
  }
  return 0;
}
