// `laggard analyze RUN_DIR`: the detector over every sampled step of a recorded run.
#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>

#include "commands.hpp"
#include "laggard/detector_settings.hpp"
#include "laggard/jsonl.hpp"
#include "laggard/source.hpp"
#include "laggard/run_output.hpp"
#include "laggard/summary.hpp"
#include "output.hpp"

namespace laggard::cli {

void add_detector_options(CLI::App* cmd, DetectorArgs& args) {
  // One flag per row of the settings table, bound to its member of args.detector (numbers) or
  // to a string (choices), showing the default.
  const auto& settings = detector_settings();
  args.choices.assign(settings.size(), std::string());
  args.options.clear();
  for (std::size_t i = 0; i < settings.size(); ++i) {
    const DetectorSetting& s = settings[i];
    const std::string flag = s.flag(), help(s.help);
    CLI::Option* opt = nullptr;
    switch (s.type) {
      case DetectorSetting::Type::number:
        opt = cmd->add_option(flag, args.detector.*(s.number), help);
        break;
      case DetectorSetting::Type::integer:
        opt = cmd->add_option(flag, args.detector.*(s.integer), help);
        break;
      case DetectorSetting::Type::choice:
        args.choices[i] = s.value(args.detector);
        opt = cmd->add_option(flag, args.choices[i], help)
                  ->check(CLI::IsMember(
                      std::vector<std::string>(s.choices.begin(), s.choices.end())));
        break;
    }
    args.options.push_back(opt->capture_default_str());
  }
  cmd->add_option("--preset", args.preset,
                  "Settings by name, under any flag given: default (the benchmark's best: "
                  "sequential, docs/detection.md), rfc (the RFC's rule exactly: threshold, mean, "
                  "1.2x, 5 ms, 2 of 3), recommended (= default)")
      ->check(CLI::IsMember(std::vector<std::string>(detector_presets().begin(),
                                                     detector_presets().end())));
}

DetectorOptions DetectorArgs::resolve(std::size_t world_size) const {
  // The flags given, on top of the preset (or the defaults): resolve_detector_options' rule,
  // the same as Python's.
  // Arguments built in code rather than by add_detector_flags (no flags registered) give the
  // settings whose value differs from the default.
  const auto& settings = detector_settings();
  const bool from_flags = options.size() == settings.size();
  const DetectorOptions defaults{};
  std::vector<std::pair<std::string, DetectorSettingValue>> given;
  for (std::size_t i = 0; i < settings.size(); ++i) {
    const DetectorSetting& s = settings[i];
    if (from_flags ? options[i]->count() == 0 : s.value(detector) == s.value(defaults)) continue;
    DetectorSettingValue value;
    switch (s.type) {
      case DetectorSetting::Type::number:
        value = detector.*(s.number);
        break;
      case DetectorSetting::Type::integer:
        value = static_cast<std::int64_t>(detector.*(s.integer));
        break;
      case DetectorSetting::Type::choice:
        value = from_flags ? choices[i] : s.value(detector);
        break;
    }
    given.emplace_back(std::string(s.name), std::move(value));
  }
  return resolve_detector_options(preset, static_cast<int>(world_size), given);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (out) out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out || !out.flush())
    throw UsageError{"cannot write " + path + ": " + std::strerror(errno)};
}

void add_analyze(CLI::App& app, AnalyzeArgs& args) {
  auto* cmd = app.add_subcommand(
      "analyze", "Find confirmed stragglers, waiting ranks and the likely bottleneck in a run "
                 "directory of rank-*.jsonl sample logs or of per-rank profiler traces");
  cmd->add_option("RUN_DIR", args.run_dir,
                  "Directory holding rank-*.jsonl (laggard.sample/1) or PyTorch profiler traces "
                  "(*.json, *.json.gz)")
      ->required();
  add_detector_options(cmd, args.det);
  cmd->add_flag("--json", args.json, "Print one JSON object instead of text");
  cmd->add_flag("-q,--quiet", args.quiet, "No progress on stderr");
}

void require_samples(const std::string& run_dir, const RunSummary& sum, const RunStats& stats) {
  if (sum.windows > 0) return;
  std::string why = "no well-formed samples in " + run_dir + " (" + std::to_string(stats.files) +
                    " rank files, " + std::to_string(stats.malformed) + " malformed lines)";
  if (!stats.errors.empty()) why += "; first: " + printable(stats.errors.front().message());
  throw UsageError{why};
}

AnalyzeRunOptions read_options(const DetectorArgs& det, Progress& progress) {
  AnalyzeRunOptions how;
  how.detector = [&det](std::size_t files) { return det.resolve(files); };
  how.progress = [&progress](std::uint64_t done, std::uint64_t total) {
    progress.update(done, total);
  };
  return how;
}

void warn_skipped(const RunResult& run, bool quiet) {
  const RunStats& stats = run.input.stats;
  if (stats.malformed > 0 && !quiet)
    std::cerr << "laggard: skipped " << stats.malformed
              << (run.input.format == RunFormat::profiler_traces ? " malformed event(s) in "
                                                                 : " malformed line(s) in ")
              << run.input.run_dir << "\n";
}

int run_analyze(const AnalyzeArgs& args) {
  Progress progress("reading " + args.run_dir, !args.quiet);
  AnalyzeRunOptions how = read_options(args.det, progress);
  how.report_data = false;  // the summary only: nothing the report or the chain alone needs
  how.triage = false;
  const RunResult run = analyze_run(args.run_dir, how);
  progress.finish();
  require_samples(args.run_dir, run.summary, run.input.stats);
  warn_input(args.run_dir, run.input.stats);
  std::cout << render(run, args.json ? RunOutput::json : RunOutput::text);
  warn_skipped(run, args.quiet);
  return kExitOk;
}

}  // namespace laggard::cli
