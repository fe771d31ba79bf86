// libFuzzer target: a run directory through the `laggard` program's own commands: analyze (text
// and --json), compare (the run against itself), report (the HTML file) and diagnose (against
// itself as the baseline).
//
// The input is split at each byte 0x1e (ASCII record separator) into rank-0.jsonl,
// rank-1.jsonl, ... (at most 8 files). Properties: no crash, no exception other than the
// documented refusals (UsageError, InputError, std::invalid_argument: exit 2 with a reason).
#include <cstdint>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "commands.hpp"
#include "fuzz_common.hpp"

namespace {

template <typename Run>
void expect_result_or_refusal(Run run) {
  try {
    const int rc = run();
    if (rc != laggard::cli::kExitOk && rc != laggard::cli::kExitUsage)
      laggard::fuzz::fail("exit status " + std::to_string(rc));
  } catch (const laggard::cli::UsageError& e) {
    if (e.what.empty()) laggard::fuzz::fail("a refusal without a reason");
  } catch (const laggard::InputError& e) {
    if (std::string(e.what()).empty()) laggard::fuzz::fail("an input error without a reason");
  } catch (const std::invalid_argument& e) {
    if (std::string(e.what()).empty()) laggard::fuzz::fail("invalid_argument without a reason");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace fs = std::filesystem;
  const fs::path dir = laggard::fuzz::scratch_dir() / "run";
  laggard::fuzz::split_into_files(
      dir, std::string_view(reinterpret_cast<const char*>(data), size), "\x1e", 8,
      [](int rank) { return "rank-" + std::to_string(rank) + ".jsonl"; });
  laggard::fuzz::Silence quiet;
  laggard::cli::AnalyzeArgs analyze;
  analyze.run_dir = dir.string();
  analyze.quiet = true;
  expect_result_or_refusal([&] { return laggard::cli::run_analyze(analyze); });
  analyze.json = true;
  expect_result_or_refusal([&] { return laggard::cli::run_analyze(analyze); });
  laggard::cli::CompareArgs compare;
  compare.baseline_dir = compare.current_dir = dir.string();
  compare.resamples = 100;
  compare.quiet = true;
  expect_result_or_refusal([&] { return laggard::cli::run_compare(compare); });
  laggard::cli::DiagnoseArgs diagnose;
  diagnose.run_dir = diagnose.baseline_dir = dir.string();
  diagnose.json = true;
  diagnose.quiet = true;
  expect_result_or_refusal([&] { return laggard::cli::run_diagnose(diagnose); });
  laggard::cli::ReportArgs report;
  report.run_dir = dir.string();
  report.output = (laggard::fuzz::scratch_dir() / "report.html").string();
  report.quiet = true;
  expect_result_or_refusal([&] { return laggard::cli::run_report(report); });
  return 0;
}
