// The `laggard` command-line program: one function per subcommand.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "laggard/detector.hpp"
#include "laggard/jsonl.hpp"
#include "laggard/run_output.hpp"
#include "laggard/summary.hpp"

namespace laggard::cli {

class Progress;

/// Exit codes: 0 success, 2 bad usage or unreadable input (reason on stderr).
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;

/// Input that cannot be used; main prints "laggard: <what>" and exits with kExitUsage.
struct UsageError {
  std::string what;
};

/// Detector flags shared by analyze and report (one per row of laggard/detector_settings.hpp's
/// table): a preset, then the flags given on top of it.
struct DetectorArgs {
  std::string preset;  ///< "", "default", "recommended" (the same) or "rfc"
  DetectorOptions detector;          ///< numbers given are parsed into their members
  std::vector<std::string> choices;  ///< per setting: a choice's name as given (others unused)
  std::vector<CLI::Option*> options;  ///< per setting: its flag, to tell given from default
  /// The options to run with; throws std::invalid_argument for invalid ones.
  DetectorOptions resolve(std::size_t world_size) const;
};

struct AnalyzeArgs {
  std::string run_dir;
  DetectorArgs det;
  bool json = false;
  bool quiet = false;
};

struct CompareArgs {
  // Run mode: two run directories.
  std::string baseline_dir;
  std::string current_dir;
  int warmup = -1;  // -1: auto
  int min_steps = 5;
  double alpha = 0.05;
  int resamples = 1000;
  bool no_per_rank = false;
  std::string html;
  bool quiet = false;
  // Single-vector mode.
  std::string baseline_vector;
  std::string current_vector;
  std::string stages;
  double relative_threshold = 0.05;
  bool json = false;
};

struct ReportArgs {
  std::string run_dir;
  DetectorArgs det;
  std::string output;
  bool quiet = false;
};

struct TimelineArgs {
  std::string run_dir;
  bool per_step = false;
  bool json = false;
  bool quiet = false;
};

struct ScaleArgs {
  std::vector<std::string> runs;
  int baseline_size = 0;  ///< 0: the smallest
  std::string scaling = "auto";
  double relative_threshold = 0.05;
  double alpha = 0.05;
  int warmup = -1;
  int min_steps = 5;
  bool json = false;
  bool quiet = false;
};

struct DivergeArgs {
  std::string run_a, run_b;
  std::string value;   ///< empty: every value both runs recorded
  double rtol = 0.0;   ///< 0: bit for bit
  int context = 2;     ///< steps shown on each side of the divergent one
  bool json = false;
};

struct DiagnoseArgs {
  std::string run_dir;
  std::string baseline_dir;  ///< empty: no regression layer
  DetectorArgs det;
  bool json = false;
  bool quiet = false;
};

/// Exit code of `laggard diverge` when the runs differ (as diff(1)).
inline constexpr int kExitDiverged = 1;

/// `laggard demo ARGS...`: every argument after `demo`, for `python3 -m laggard.demo`.
struct DemoArgs {
  std::vector<std::string> args;
};

void add_analyze(CLI::App& app, AnalyzeArgs& args);
void add_compare(CLI::App& app, CompareArgs& args);
void add_report(CLI::App& app, ReportArgs& args);
void add_demo(CLI::App& app, DemoArgs& args);
void add_timeline(CLI::App& app, TimelineArgs& args);
void add_scale(CLI::App& app, ScaleArgs& args);
void add_diverge(CLI::App& app, DivergeArgs& args);
void add_diagnose(CLI::App& app, DiagnoseArgs& args);

int run_analyze(const AnalyzeArgs& args);
int run_compare(const CompareArgs& args);
int run_report(const ReportArgs& args);
int run_timeline(const TimelineArgs& args);
int run_scale(const ScaleArgs& args);
/// 0: the same values; kExitDiverged: they differ (the first step printed); 2: bad input.
int run_diverge(const DivergeArgs& args);
/// The triage chain; 0 whatever it finds, 2 on bad input.
int run_diagnose(const DiagnoseArgs& args);
/// Replaces the process with the Python demo (execv); returns only by throwing UsageError.
int run_demo(const DemoArgs& args);
/// Replaces the process with `python -m module ARGS...` of the package next to this program
/// (the interpreter and package found as for `demo`, see demo.cc), with $prog_env set to
/// "laggard <command>" for its usage line; returns only by throwing UsageError.
int exec_python_module(const std::string& module, const std::vector<std::string>& args,
                       const std::string& command, const char* prog_env);

/// `laggard exclude ARGS...` and `laggard fleet ARGS...`: every argument after the command, for
/// `python -m laggard.exclude` / `python -m laggard.fleet` (python_commands.cc).
struct PythonCommandArgs {
  std::vector<std::string> args;
};
void add_exclude(CLI::App& app, PythonCommandArgs& args);
void add_fleet(CLI::App& app, PythonCommandArgs& args);
int run_exclude(const PythonCommandArgs& args);
int run_fleet(const PythonCommandArgs& args);
void add_watch(CLI::App& app, PythonCommandArgs& args);  // `laggard watch ARGS...`: python -m laggard.watch
int run_watch(const PythonCommandArgs& args);

/// How analyze, report and diagnose read a run: the detector flags resolved for its size, the
/// progress shown on `progress`.
AnalyzeRunOptions read_options(const DetectorArgs& det, Progress& progress);
/// "laggard: skipped N malformed line(s) in DIR" on stderr, unless quiet.
void warn_skipped(const RunResult& run, bool quiet);
/// The detector's options (--ref, thresholds, persistence), shared by analyze and report.
void add_detector_options(CLI::App* cmd, DetectorArgs& args);
/// Throws UsageError (exit 2) naming the run and its first bad line when no window was read.
void require_samples(const std::string& run_dir, const RunSummary& sum, const RunStats& stats);
/// Writes `text` to `path`; throws UsageError naming the file when it cannot.
void write_file(const std::string& path, const std::string& text);

}  // namespace laggard::cli
