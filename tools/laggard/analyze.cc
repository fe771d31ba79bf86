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

namespace {

std::string who(int rank, const std::string& host, const std::string& cohort) {
  std::string s = "rank " + std::to_string(rank);
  std::string extra;
  if (!host.empty()) extra = printable(host);
  if (!cohort.empty())
    extra += (extra.empty() ? "" : ", ") + std::string("cohort ") + printable(cohort);
  if (!extra.empty()) s += " (" + extra + ")";
  return s;
}

void print_text(const AnalyzeArgs& args, const RunSummary& sum, const RunStats& stats,
                const DetectorOptions& opt, RunFormat format) {
  std::cout << "laggard analyze " << args.run_dir << "\n";
  std::cout << "  " << sum.ranks << " ranks (world size " << sum.world_size << "), "
            << sum.windows << " sampled steps (" << sum.first_step << ".." << sum.last_step
            << "), " << sum.samples << " samples\n";
  std::cout << "  rule: " << describe_rule(opt) << "\n\n";

  std::cout << "Confirmed stragglers\n";
  if (sum.stragglers.empty()) std::cout << "  none\n";
  for (const auto& s : sum.stragglers) {
    std::cout << "  " << who(s.rank, s.host, s.cohort) << " in " << printable(s.stage) << ": slow in "
              << s.windows_flagged << " of " << s.windows_seen << " windows, "
              << fixed(s.typical_slowdown, 2) << "x typical (last " << fixed(s.last_ms, 1)
              << " ms vs " << fixed(s.last_ref_ms, 1) << " ms reference), flagged since step "
              << s.first_flagged_step << ", confirmed at step " << s.confirmed_step;
    if (s.onset_step) std::cout << "; onset: since step " << *s.onset_step;
    std::cout << "\n";
  }
  if (!sum.slow_hosts.empty()) {
    std::cout << "\nSlow hosts (every rank of the host slow: look at the host, not one GPU)\n";
    for (const auto& h : sum.slow_hosts)
      std::cout << "  " << printable(h.host) << " in " << printable(h.stage) << ": ranks " << join_ints(h.ranks)
                << ", " << h.windows << " windows, " << fixed(h.typical_slowdown, 2)
                << "x typical\n";
  }
  std::cout << "\nWaiting only (excess spent waiting in communication: evidence, not a verdict)\n";
  if (sum.waiting.empty()) std::cout << "  none\n";
  for (const auto& w : sum.waiting)
    std::cout << "  " << who(w.rank, w.host, w.cohort) << " in " << printable(w.stage) << ": " << w.windows
              << (w.windows == 1 ? " window, +" : " windows, +") << fixed(w.typical_excess_ms, 1) << " ms typical\n";

  std::cout << "\nLikely bottleneck: ";
  if (sum.likely_bottleneck.empty())
    std::cout << "none\n";
  else
    std::cout << printable(sum.likely_bottleneck) << " (" << sum.bottleneck_windows.at(sum.likely_bottleneck)
              << " of " << sum.windows << " windows)\n";
  std::cout << "Step time onset: ";
  if (sum.step_time_onset)
    std::cout << "since step " << *sum.step_time_onset << " (" << fixed(sum.step_time_before_ms, 1)
              << " ms before, " << fixed(sum.step_time_since_ms, 1)
              << " ms since; slowest rank per step)\n";
  else
    std::cout << "none (no persistent rise of the slowest rank's step time)\n";
  std::cout << "What-if: " << fixed(sum.mean_whatif_saving_ms, 1) << " ms per step";
  if (sum.mean_step_ms > 0)
    std::cout << " (" << fixed(100.0 * sum.mean_whatif_saving_ms / sum.mean_step_ms, 1)
              << "% of the " << fixed(sum.mean_step_ms, 1) << " ms step)";
  std::cout << " saved if every rank ran each stage at the reference time\n";
  if (format == RunFormat::profiler_traces)
    std::cout << "Input: " << stats.files << " profiler traces, " << stats.malformed
              << " malformed events skipped\n";
  else
    std::cout << "Input: " << stats.files << " files, " << stats.malformed << " malformed lines, "
              << stats.duplicates << " duplicates, " << stats.out_of_order
              << " out-of-order lines skipped\n";
  for (const auto& e : stats.errors) std::cout << "  skipped " << printable(e.message()) << "\n";
  if (stats.malformed > stats.errors.size())
    std::cout << "  ... and " << (stats.malformed - stats.errors.size()) << " more\n";
}

Json to_json(const AnalyzeArgs& args, const RunSummary& sum, const RunStats& stats,
             const DetectorOptions& opt, RunFormat format) {
  Json j;
  j["run_dir"] = args.run_dir;
  j["ranks"] = sum.ranks;
  j["world_size"] = sum.world_size;
  j["windows"] = sum.windows;
  j["samples"] = sum.samples;
  j["first_step"] = sum.first_step;
  j["last_step"] = sum.last_step;
  j["options"] = {{"method", to_string(opt.method)},
                  {"false_alarm_budget", opt.false_alarm_budget},
                  {"ref", to_string(opt.ref)},
                  {"relative_threshold", opt.relative_threshold},
                  {"absolute_ms_threshold", opt.absolute_ms_threshold},
                  {"mad_z", opt.mad_z},
                  {"confirm_k", opt.confirm_k},
                  {"confirm_n", opt.confirm_n}};
  j["stragglers"] = Json::array();
  for (const auto& s : sum.stragglers)
    j["stragglers"].push_back({{"rank", s.rank},
                               {"host", s.host},
                               {"cohort", s.cohort},
                               {"stage", s.stage},
                               {"kind", to_string(s.kind)},
                               {"windows_flagged", s.windows_flagged},
                               {"windows_seen", s.windows_seen},
                               {"first_flagged_step", s.first_flagged_step},
                               {"confirmed_step", s.confirmed_step},
                               {"onset_step", s.onset_step ? Json(*s.onset_step) : Json(nullptr)},
                               {"typical_slowdown", number_or_null(s.typical_slowdown)},
                               {"last_ms", s.last_ms},
                               {"last_ref_ms", s.last_ref_ms}});
  j["slow_hosts"] = Json::array();
  for (const auto& h : sum.slow_hosts)
    j["slow_hosts"].push_back({{"host", h.host},
                               {"cohort", h.cohort},
                               {"stage", h.stage},
                               {"ranks", h.ranks},
                               {"windows", h.windows},
                               {"typical_slowdown", number_or_null(h.typical_slowdown)}});
  j["waiting"] = Json::array();
  for (const auto& w : sum.waiting)
    j["waiting"].push_back({{"rank", w.rank},
                            {"host", w.host},
                            {"cohort", w.cohort},
                            {"stage", w.stage},
                            {"windows", w.windows},
                            {"typical_excess_ms", w.typical_excess_ms}});
  j["likely_bottleneck"] = sum.likely_bottleneck;
  j["bottleneck_windows"] = sum.bottleneck_windows;
  j["mean_step_ms"] = sum.mean_step_ms;
  j["whatif_step_saving_ms"] = sum.mean_whatif_saving_ms;
  j["step_time_onset"] = sum.step_time_onset ? Json(*sum.step_time_onset) : Json(nullptr);
  j["step_time_before_ms"] = sum.step_time_onset ? number_or_null(sum.step_time_before_ms) : Json(nullptr);
  j["step_time_since_ms"] = sum.step_time_onset ? number_or_null(sum.step_time_since_ms) : Json(nullptr);
  j["metrics"] = metrics_json(sum.last.metrics(0));
  Json errors = Json::array();
  for (const auto& e : stats.errors)
    errors.push_back({{"file", e.file}, {"line", e.line}, {"what", e.what}});
  (void)format;
  j["input"] = {{"files", stats.files},         {"malformed", stats.malformed},
                {"duplicates", stats.duplicates}, {"out_of_order", stats.out_of_order},
                {"bytes", stats.bytes},         {"errors", errors}};
  return j;
}

}  // namespace

void require_samples(const std::string& run_dir, const RunSummary& sum, const RunStats& stats) {
  if (sum.windows > 0) return;
  std::string why = "no well-formed samples in " + run_dir + " (" + std::to_string(stats.files) +
                    " rank files, " + std::to_string(stats.malformed) + " malformed lines)";
  if (!stats.errors.empty()) why += "; first: " + printable(stats.errors.front().message());
  throw UsageError{why};
}

int run_analyze(const AnalyzeArgs& args) {
  Progress progress("reading " + args.run_dir, !args.quiet);
  const auto reader = open_run(args.run_dir, progress_options(progress));
  const DetectorOptions opt = args.det.resolve(reader->files().size());
  RunAnalysis analysis(opt);
  Window window;
  while (reader->next(window)) {
    analysis.add(window);
    progress.update(reader->bytes_read(), reader->bytes_total());
  }
  progress.finish();
  const RunStats& stats = reader->stats();
  const RunSummary sum = analysis.summary();
  require_samples(args.run_dir, sum, stats);
  warn_input(args.run_dir, stats);
  if (args.json)
    std::cout << to_json(args, sum, stats, opt, reader->format()).dump(2, ' ', false, kJsonReplace)
              << "\n";
  else
    print_text(args, sum, stats, opt, reader->format());
  if (stats.malformed > 0 && !args.quiet)
    std::cerr << "laggard: skipped " << stats.malformed
              << (reader->format() == RunFormat::profiler_traces ? " malformed event(s) in "
                                                                 : " malformed line(s) in ")
              << args.run_dir << "\n";
  return kExitOk;
}

}  // namespace laggard::cli
