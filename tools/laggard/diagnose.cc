// `laggard diagnose RUN_DIR [--baseline RUN_DIR] [--json]`: the triage chain in order —
// correctness, resources, timeline, stragglers, regression — each layer pass / fail / not
// measured with its evidence, and the first failing layer named as where to look.
#include <iostream>

#include "commands.hpp"
#include "laggard/run_output.hpp"
#include "output.hpp"

namespace laggard::cli {

void add_diagnose(CLI::App& app, DiagnoseArgs& args) {
  auto* cmd = app.add_subcommand(
      "diagnose",
      "The triage chain of a run, in order: correctness (recorded values), resources (GPU, "
      "host, allocator), timeline (data, communication and untimed gaps), stragglers (with "
      "their reasons) and, with a baseline, the first regressed stage");
  cmd->add_option("RUN_DIR", args.run_dir,
                  "Directory holding rank-*.jsonl (laggard.sample/1) or PyTorch profiler traces "
                  "(*.json, *.json.gz)")
      ->required();
  cmd->add_option("--baseline", args.baseline_dir,
                  "A run of the same job to compare against (the regression layer)");
  add_detector_options(cmd, args.det);
  cmd->add_flag("--json", args.json, "Print one JSON object instead of text");
  cmd->add_flag("-q,--quiet", args.quiet, "No progress on stderr");
}

int run_diagnose(const DiagnoseArgs& args) {
  Progress progress("reading " + args.run_dir, !args.quiet);
  AnalyzeRunOptions how = read_options(args.det, progress);
  how.baseline_dir = args.baseline_dir;
  how.report_data = false;
  const RunResult run = analyze_run(args.run_dir, how);
  progress.finish();
  require_samples(args.run_dir, run.summary, run.input.stats);
  warn_input(args.run_dir, run.input.stats);
  if (!args.baseline_dir.empty() && run.baseline_windows == 0)
    throw UsageError{"no well-formed samples in the baseline " + args.baseline_dir};
  std::cout << render(run, args.json ? RunOutput::diagnosis_json : RunOutput::diagnosis_text);
  warn_skipped(run, args.quiet);
  return kExitOk;
}

}  // namespace laggard::cli
