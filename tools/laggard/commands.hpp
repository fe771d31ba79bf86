// The `laggard` command-line program: one function per subcommand.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "laggard/detector.hpp"

namespace laggard::cli {

/// Exit codes: 0 success, 2 bad usage or unreadable input (reason on stderr).
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;

/// Input that cannot be used; main prints "laggard: <what>" and exits with kExitUsage.
struct UsageError {
  std::string what;
};

struct AnalyzeArgs {
  std::string run_dir;
  std::string ref = "mean";
  DetectorOptions detector;
  bool json = false;
  bool quiet = false;
};

struct CompareArgs {
  std::string baseline_vector;
  std::string current_vector;
  std::string stages;
  double relative_threshold = 0.05;
  bool json = false;
};

void add_analyze(CLI::App& app, AnalyzeArgs& args);
void add_compare(CLI::App& app, CompareArgs& args);

int run_analyze(const AnalyzeArgs& args);
int run_compare(const CompareArgs& args);

}  // namespace laggard::cli
