// `laggard report RUN_DIR -o report.html`: the run analysis as one self-contained HTML page.
#include <iostream>

#include "commands.hpp"
#include "laggard/diagnose.hpp"
#include "laggard/html_report.hpp"
#include "laggard/jsonl.hpp"
#include "laggard/source.hpp"
#include "laggard/summary.hpp"
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
  const auto reader = open_run(args.run_dir, progress_options(progress));
  const DetectorOptions opt = args.det.resolve(reader->files().size());
  // The run's triage chain comes with it (its RunAnalysis is the report's).
  RunDiagnosis diagnosis(opt);
  RunReportData data;
  Window window;
  while (reader->next(window)) {
    data.add(window, diagnosis.add(window));
    progress.update(reader->bytes_read(), reader->bytes_total());
  }
  progress.finish();
  const RunStats& stats = reader->stats();
  const RunSummary sum = diagnosis.analysis().summary();
  require_samples(args.run_dir, sum, stats);
  warn_input(args.run_dir, stats);
  // Profiler traces: the chain's timeline from the samples' stages (`laggard diagnose` reads
  // the device timeline of the traces).
  write_file_replacing(args.output,
                       render_run_report(sum, data, {args.run_dir, opt, stats, diagnosis.finish()}),
                       reader->files());
  std::cout << "wrote " << args.output << ": " << sum.ranks << " ranks, " << sum.windows
            << " sampled steps, " << sum.stragglers.size() << " confirmed straggler"
            << (sum.stragglers.size() == 1 ? "" : "s") << ", step time onset "
            << (sum.step_time_onset ? "at step " + std::to_string(*sum.step_time_onset)
                                    : std::string("none"))
            << "\n";
  if (stats.malformed > 0 && !args.quiet)
    std::cerr << "laggard: skipped " << stats.malformed
              << (reader->format() == RunFormat::profiler_traces ? " malformed event(s) in "
                                                                 : " malformed line(s) in ")
              << args.run_dir
              << "\n";
  return kExitOk;
}

}  // namespace laggard::cli
