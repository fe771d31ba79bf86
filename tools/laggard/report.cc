// `laggard report RUN_DIR -o report.html`: the run analysis as one self-contained HTML page.
#include <iostream>

#include "commands.hpp"
#include "laggard/run_output.hpp"
#include "output.hpp"

namespace laggard::cli {

void add_report(CLI::App& app, ReportArgs& args) {
  auto* cmd = app.add_subcommand(
      "report",
      "Write a self-contained HTML report of a run: ranks x stages heatmap, step time "
      "with onsets, confirmed stragglers");
  cmd->add_option("RUN_DIR", args.run_dir,
                  "Directory holding rank-*.jsonl (laggard.sample/1) or PyTorch profiler traces")
      ->required();
  cmd->add_option("-o,--output", args.output, "HTML file to write")->required();
  add_detector_options(cmd, args.det);
  cmd->add_flag("-q,--quiet", args.quiet, "No progress on stderr");
}

int run_report(const ReportArgs& args) {
  Progress progress("reading " + args.run_dir, !args.quiet);
  // The triage chain comes with it, as the page's first section.
  const RunResult run = analyze_run(args.run_dir, read_options(args.det, progress));
  progress.finish();
  const RunSummary& sum = run.summary;
  require_samples(args.run_dir, sum, run.input.stats);
  warn_input(args.run_dir, run.input.stats);
  write_file_replacing(args.output, render(run, RunOutput::html), run.input.files);
  std::cout << "wrote " << args.output << ": " << sum.ranks << " ranks, " << sum.windows
            << " sampled steps, " << sum.stragglers.size() << " confirmed straggler"
            << (sum.stragglers.size() == 1 ? "" : "s") << ", step time onset "
            << (sum.step_time_onset ? "at step " + std::to_string(*sum.step_time_onset)
                                    : std::string("none"))
            << "\n";
  warn_skipped(run, args.quiet);
  return kExitOk;
}

}  // namespace laggard::cli
