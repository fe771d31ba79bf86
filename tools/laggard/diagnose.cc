// `laggard diagnose RUN_DIR [--baseline RUN_DIR] [--json]`: the triage chain in order —
// correctness, resources, timeline, stragglers, regression — each layer pass / fail / not
// measured with its evidence, and the first failing layer named as where to look.
#include <iostream>

#include "commands.hpp"
#include "laggard/compare.hpp"
#include "laggard/diagnose.hpp"
#include "laggard/source.hpp"
#include "laggard/trace.hpp"
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

namespace {

const char* marker(DiagnosisLayer::Status s) {
  switch (s) {
    case DiagnosisLayer::Status::pass:
      return "PASS";
    case DiagnosisLayer::Status::fail:
      return "FAIL";
    case DiagnosisLayer::Status::not_measured:
      return "not measured";
  }
  return "";
}

void print_text(const DiagnoseArgs& args, const Diagnosis& d) {
  std::cout << "laggard diagnose " << printable(args.run_dir);
  if (!args.baseline_dir.empty()) std::cout << " (baseline " << printable(args.baseline_dir) << ")";
  std::cout << "\n\n";
  for (std::size_t i = 0; i < d.layers.size(); ++i) {
    const DiagnosisLayer& l = d.layers[i];
    std::cout << i + 1 << ". " << l.name << ": " << marker(l.status) << " — "
              << printable(l.summary) << "\n";
    for (const DiagnosisFinding& f : l.findings)
      std::cout << "   - " << printable(f.text)
                << (f.explained_by_stragglers ? " [a wait: see stragglers]" : "") << "\n";
  }
  std::cout << "\n";
  if (d.first_failing < 0) {
    std::cout << "Look first at: nothing failed";
    bool unmeasured = false;
    for (const auto& l : d.layers) unmeasured |= l.status == DiagnosisLayer::Status::not_measured;
    std::cout << (unmeasured ? " (some layers were not measured)\n" : "\n");
    return;
  }
  const DiagnosisLayer& l = d.layers[static_cast<std::size_t>(d.first_failing)];
  std::cout << "Look first at: " << l.name;
  if (!l.findings.empty()) std::cout << " — " << printable(l.findings.front().text);
  std::cout << "\n";
  if (d.first_failing + 1 < static_cast<int>(d.layers.size()))
    std::cout << "(findings of later layers may be symptoms of this one)\n";
}

Json finding_json(const DiagnosisFinding& f) {
  Json j = {{"kind", f.kind}, {"text", f.text}};
  j["rank"] = f.rank >= 0 ? Json(f.rank) : Json(nullptr);
  if (!f.ranks.empty()) j["ranks"] = f.ranks;
  j["step"] = f.step >= 0 ? Json(f.step) : Json(nullptr);
  if (!f.stage.empty()) j["stage"] = f.stage;
  if (!f.value.empty()) j["value"] = f.value;
  if (f.kind == "straggler" || !f.reasons.empty()) {
    Json reasons = Json::array();
    for (const Reason& r : f.reasons) reasons.push_back({{"reason", r.code}, {"evidence", r.evidence}});
    j["reasons"] = reasons;
    if (f.kind == "straggler") j["reason"] = f.reasons.empty() ? "unknown" : f.reasons.front().code;
  }
  if (f.explained_by_stragglers) j["explained_by"] = "stragglers";
  return j;
}

Json to_json(const DiagnoseArgs& args, const Diagnosis& d, const RunStats& stats) {
  Json j;
  j["run_dir"] = args.run_dir;
  j["baseline_dir"] = args.baseline_dir.empty() ? Json(nullptr) : Json(args.baseline_dir);
  j["layers"] = Json::array();
  for (const DiagnosisLayer& l : d.layers) {
    Json lj = {{"name", l.name}, {"status", to_string(l.status)}, {"summary", l.summary}};
    lj["findings"] = Json::array();
    for (const DiagnosisFinding& f : l.findings) lj["findings"].push_back(finding_json(f));
    j["layers"].push_back(lj);
  }
  j["first_failing"] = d.first_failing >= 0
                           ? Json(d.layers[static_cast<std::size_t>(d.first_failing)].name)
                           : Json(nullptr);
  j["input"] = {{"files", stats.files}, {"malformed", stats.malformed}, {"bytes", stats.bytes}};
  return j;
}

}  // namespace

int run_diagnose(const DiagnoseArgs& args) {
  Progress progress("reading " + args.run_dir, !args.quiet);
  const bool traces = detect_run_format(args.run_dir) == RunFormat::profiler_traces;
  std::unique_ptr<RunSource> logs;
  std::unique_ptr<TraceRunReader> trace_reader;
  if (traces) {
    trace_reader = std::make_unique<TraceRunReader>(args.run_dir, progress_options(progress));
    trace_reader->load();
  } else {
    logs = open_run(args.run_dir, progress_options(progress));
  }
  const std::size_t files = traces ? trace_reader->files().size() : logs->files().size();
  RunDiagnosis diagnosis(args.det.resolve(files));
  const bool compare = !args.baseline_dir.empty();
  RunProfile current;
  Window window;
  while (traces ? trace_reader->next(window) : logs->next(window)) {
    diagnosis.add(window);
    if (compare) current.add(window);
    if (logs) progress.update(logs->bytes_read(), logs->bytes_total());
  }
  progress.finish();
  const RunStats& stats = traces ? trace_reader->stats() : logs->stats();
  const RunSummary sum = diagnosis.analysis().summary();
  require_samples(args.run_dir, sum, stats);
  warn_input(args.run_dir, stats);

  TimelineSummary timeline;
  if (traces) {
    std::vector<RankTrace> ranks = trace_reader->ranks();
    timeline = analyze_timeline(ranks);
  }
  Comparison comparison;
  if (compare) {
    RunProfile baseline;
    Progress base_progress("reading baseline " + args.baseline_dir, !args.quiet);
    const auto reader = open_run(args.baseline_dir, progress_options(base_progress));
    while (reader->next(window)) {
      baseline.add(window);
      base_progress.update(reader->bytes_read(), reader->bytes_total());
    }
    base_progress.finish();
    warn_input(args.baseline_dir, reader->stats());
    if (baseline.windows() == 0)
      throw UsageError{"no well-formed samples in the baseline " + args.baseline_dir};
    comparison = compare_runs(baseline, current);
  }
  const Diagnosis d =
      diagnosis.finish(traces ? &timeline : nullptr, compare ? &comparison : nullptr);
  if (args.json)
    std::cout << to_json(args, d, stats).dump(2, ' ', false, kJsonReplace) << "\n";
  else
    print_text(args, d);
  if (stats.malformed > 0 && !args.quiet)
    std::cerr << "laggard: skipped " << stats.malformed
              << (traces ? " malformed event(s) in " : " malformed line(s) in ") << args.run_dir
              << "\n";
  return kExitOk;
}

}  // namespace laggard::cli
