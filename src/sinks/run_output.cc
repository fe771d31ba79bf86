// The offline outputs of a recorded run (laggard/run_output.hpp): the summary and the triage
// chain as text and JSON, and analyze_run, which reads a run into everything they render.
#include "laggard/run_output.hpp"

#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "laggard/detail/text.hpp"
#include "laggard/timeline.hpp"
#include "laggard/trace.hpp"

namespace laggard {

namespace {

using detail::cost_phrase;
using detail::fixed;
using detail::join_ints;
using detail::printable;

// A verdict is said to be a possible knock-on of a verdict on the same rank that costs this many
// times more (print_summary).
constexpr double kKnockOnShown = 10.0;
using Json = nlohmann::ordered_json;
// Strings that are not UTF-8 (a run directory's name) are written with U+FFFD for each bad byte:
// the default would throw.
constexpr auto kJsonReplace = Json::error_handler_t::replace;

Json number_or_null(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

// Metrics as a JSON object (numbers stay numbers, text stays text; NaN becomes null).
Json metrics_json(const Metrics& metrics) {
  Json out = Json::object();
  for (const auto& [name, value] : metrics) {
    if (const double* d = std::get_if<double>(&value))
      out[name] = number_or_null(*d);
    else
      out[name] = std::get<std::string>(value);
  }
  return out;
}

std::string dump(const Json& j) { return j.dump(2, ' ', false, kJsonReplace) + "\n"; }


std::string who(int rank, const std::string& host, const std::string& cohort) {
  std::string s = "rank " + std::to_string(rank);
  std::string extra;
  if (!host.empty()) extra = printable(host);
  if (!cohort.empty())
    extra += (extra.empty() ? "" : ", ") + std::string("cohort ") + printable(cohort);
  if (!extra.empty()) s += " (" + extra + ")";
  return s;
}

void print_summary(std::ostream& o, const RunSummary& sum, const RunOutputInput& in) {
  const RunStats& stats = in.stats;
  const DetectorOptions& opt = in.options;
  const RunFormat format = in.format;
  o << "laggard analyze " << in.run_dir << "\n";
  o << "  " << sum.ranks << " ranks (world size " << sum.world_size << "), "
            << sum.windows << " sampled steps (" << sum.first_step << ".." << sum.last_step
            << "), " << sum.samples << " samples\n";
  o << "  rule: " << describe_rule(opt) << "\n\n";

  o << "Confirmed stragglers (costliest first)\n";
  if (sum.stragglers.empty()) o << "  none\n";
  for (const auto& s : sum.stragglers) {
    o << "  " << who(s.rank, s.host, s.cohort) << " in " << printable(s.stage) << ": "
              << cost_phrase(s.cost_ms, s.cost_share) << ", " << fixed(s.typical_slowdown, 2)
              << "x typical; slow in " << s.windows_flagged << " of " << s.windows_seen
              << " windows (last " << fixed(s.last_ms, 1)
              << " ms vs " << fixed(s.last_ref_ms, 1) << " ms reference), flagged since step "
              << s.first_flagged_step << ", confirmed at step " << s.confirmed_step;
    if (s.onset_step) o << "; onset: since step " << *s.onset_step;
    // A far smaller verdict on a rank confirmed in a costlier stage: said, not hidden (the slow
    // rank reaches the next collective last, and its own next stage can run slower for it).
    for (const auto& big : sum.stragglers) {
      if (&big == &s) break;  // costliest first: only those before it
      if (big.rank == s.rank && big.cohort == s.cohort && s.cost_ms > 0.0 &&
          big.cost_ms >= kKnockOnShown * s.cost_ms) {
        o << "; rank " << s.rank << " is also confirmed in " << printable(big.stage) << " at "
          << fixed(big.cost_ms / s.cost_ms, 0) << "x this cost: this may be a knock-on of that";
        break;
      }
    }
    o << "\n";
  }
  if (!sum.slow_hosts.empty()) {
    o << "\nSlow hosts (every rank of the host slow: look at the host, not one GPU)\n";
    for (const auto& h : sum.slow_hosts)
      o << "  " << printable(h.host) << " in " << printable(h.stage) << " (ranks "
                << join_ints(h.ranks) << "): " << cost_phrase(h.cost_ms, h.cost_share) << ", "
                << fixed(h.typical_slowdown, 2) << "x typical, " << h.windows << " windows\n";
  }
  o << "\nWaiting only (excess spent waiting in communication: evidence, not a verdict)\n";
  if (sum.waiting.empty()) o << "  none\n";
  for (const auto& w : sum.waiting)
    o << "  " << who(w.rank, w.host, w.cohort) << " in " << printable(w.stage) << ": " << w.windows
              << (w.windows == 1 ? " window, +" : " windows, +") << fixed(w.typical_excess_ms, 1) << " ms typical\n";

  o << "\nLikely bottleneck: ";
  if (sum.likely_bottleneck.empty())
    o << "none\n";
  else
    o << printable(sum.likely_bottleneck) << " (" << sum.bottleneck_windows.at(sum.likely_bottleneck)
              << " of " << sum.windows << " windows)\n";
  o << "Step time onset: ";
  if (sum.step_time_onset)
    o << "since step " << *sum.step_time_onset << " (" << fixed(sum.step_time_before_ms, 1)
              << " ms before, " << fixed(sum.step_time_since_ms, 1)
              << " ms since; slowest rank per step)\n";
  else if (sum.step_time_rise_in_baseline)
    o << "none (the step time rose at step " << *sum.step_time_rise_in_baseline << ", from "
      << fixed(sum.step_time_rise_from_ms, 1) << " to " << fixed(sum.step_time_rise_to_ms, 1)
      << " ms, within the first " << sum.step_time_baseline_values
      << " sampled steps: those set the baseline, so the rise is part of it)\n";
  else if (sum.step_time_values < 3)
    o << "none (" << sum.step_time_values
      << " sampled steps with a step time; an onset needs at least 3)\n";
  else
    o << "none (no persistent rise of the slowest rank's step time)\n";
  o << "What-if: " << fixed(sum.mean_whatif_saving_ms, 1) << " ms per step";
  if (sum.mean_step_ms > 0)
    o << " (" << fixed(100.0 * sum.mean_whatif_saving_ms / sum.mean_step_ms, 1)
              << "% of the " << fixed(sum.mean_step_ms, 1) << " ms step)";
  o << " saved if every rank ran each stage at the reference time\n";
  if (format == RunFormat::profiler_traces)
    o << "Input: " << stats.files << " profiler traces, " << stats.malformed
              << " malformed events skipped\n";
  else
    o << "Input: " << stats.files << " files, " << stats.malformed << " malformed lines, "
              << stats.duplicates << " duplicates, " << stats.out_of_order
              << " out-of-order lines skipped\n";
  for (const auto& e : stats.errors) o << "  skipped " << printable(e.message()) << "\n";
  if (stats.malformed > stats.errors.size())
    o << "  ... and " << (stats.malformed - stats.errors.size()) << " more\n";
}

Json summary_object(const RunSummary& sum, const RunOutputInput& in) {
  const RunStats& stats = in.stats;
  const DetectorOptions& opt = in.options;
  Json j;
  j["run_dir"] = in.run_dir;
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
                  {"healthy_spread", opt.healthy_spread},
                  {"min_cost_share", opt.min_cost_share},
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
                               {"cost_ms", number_or_null(s.cost_ms)},
                               {"cost_share", number_or_null(s.cost_share)},
                               {"last_ms", s.last_ms},
                               {"last_ref_ms", s.last_ref_ms}});
  j["slow_hosts"] = Json::array();
  for (const auto& h : sum.slow_hosts)
    j["slow_hosts"].push_back({{"host", h.host},
                               {"cohort", h.cohort},
                               {"stage", h.stage},
                               {"ranks", h.ranks},
                               {"windows", h.windows},
                               {"typical_slowdown", number_or_null(h.typical_slowdown)},
                               {"cost_ms", number_or_null(h.cost_ms)},
                               {"cost_share", number_or_null(h.cost_share)}});
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
  j["input"] = {{"files", stats.files},         {"malformed", stats.malformed},
                {"duplicates", stats.duplicates}, {"out_of_order", stats.out_of_order},
                {"bytes", stats.bytes},         {"errors", errors}};
  return j;
}


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

void print_diagnosis(std::ostream& o, const Diagnosis& d, const RunOutputInput& in) {
  o << "laggard diagnose " << printable(in.run_dir);
  if (!in.baseline_dir.empty()) o << " (baseline " << printable(in.baseline_dir) << ")";
  o << "\n\n";
  for (std::size_t i = 0; i < d.layers.size(); ++i) {
    const DiagnosisLayer& l = d.layers[i];
    o << i + 1 << ". " << l.name << ": " << marker(l.status) << " — "
              << printable(l.summary) << "\n";
    for (const DiagnosisFinding& f : l.findings)
      o << "   - " << printable(f.text)
                << (f.explained_by_stragglers ? " [a wait: see stragglers]" : "") << "\n";
  }
  o << "\n";
  if (d.first_failing < 0) {
    o << "Look first at: nothing failed";
    bool unmeasured = false;
    for (const auto& l : d.layers) unmeasured |= l.status == DiagnosisLayer::Status::not_measured;
    o << (unmeasured ? " (some layers were not measured)\n" : "\n");
    return;
  }
  const DiagnosisLayer& l = d.layers[static_cast<std::size_t>(d.first_failing)];
  o << "Look first at: " << l.name;
  if (!l.findings.empty()) o << " — " << printable(l.findings.front().text);
  o << "\n";
  if (d.first_failing + 1 < static_cast<int>(d.layers.size()))
    o << "(findings of later layers may be symptoms of this one)\n";
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

Json diagnosis_object(const Diagnosis& d, const RunOutputInput& in) {
  const RunStats& stats = in.stats;
  Json j;
  j["run_dir"] = in.run_dir;
  j["baseline_dir"] = in.baseline_dir.empty() ? Json(nullptr) : Json(in.baseline_dir);
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

std::string summary_text(const RunSummary& summary, const RunOutputInput& input) {
  std::ostringstream o;
  print_summary(o, summary, input);
  return o.str();
}

std::string summary_json(const RunSummary& summary, const RunOutputInput& input) {
  return dump(summary_object(summary, input));
}

std::string diagnosis_text(const Diagnosis& diagnosis, const RunOutputInput& input) {
  std::ostringstream o;
  print_diagnosis(o, diagnosis, input);
  return o.str();
}

std::string diagnosis_json(const Diagnosis& diagnosis, const RunOutputInput& input) {
  return dump(diagnosis_object(diagnosis, input));
}

std::string render(const RunResult& run, RunOutput what) {
  switch (what) {
    case RunOutput::text:
      return summary_text(run.summary, run.input);
    case RunOutput::json:
      return summary_json(run.summary, run.input);
    case RunOutput::diagnosis_text:
      return diagnosis_text(run.diagnosis, run.input);
    case RunOutput::diagnosis_json:
      return diagnosis_json(run.diagnosis, run.input);
    case RunOutput::html:
      return render_run_report(run.summary, run.report_data,
                               {run.input.run_dir, run.input.options, run.input.stats,
                                run.diagnosis});
  }
  throw std::invalid_argument("render: unknown output");
}

RunResult analyze_run(const std::string& dir, const AnalyzeRunOptions& how) {
  RunResult out;
  out.input.run_dir = dir;
  out.input.baseline_dir = how.baseline_dir;
  TraceOptions trace_options;
  trace_options.progress = how.progress;
  const auto reader = open_run(dir, trace_options);
  out.input.format = reader->format();
  out.input.files = reader->files();
  out.input.options = how.detector ? how.detector(reader->files().size()) : DetectorOptions{};
  RunDiagnosis diagnosis(out.input.options, {}, how.triage);
  const bool compare = !how.baseline_dir.empty();
  const bool logs = reader->format() == RunFormat::sample_logs;
  RunProfile current;
  Window window;
  while (reader->next(window)) {
    const Report& report = diagnosis.add(window);
    if (how.report_data) out.report_data.add(window, report);
    if (compare) current.add(window);
    if (logs && how.progress) how.progress(reader->bytes_read(), reader->bytes_total());
  }
  out.input.stats = reader->stats();
  out.summary = diagnosis.analysis().summary();

  // Profiler traces: the chain's timeline is the device's (laggard/timeline.hpp).
  std::optional<TimelineSummary> timeline;
  if (const std::vector<RankTrace>* traces = how.triage ? reader->traces() : nullptr) {
    std::vector<RankTrace> ranks = *traces;
    timeline = analyze_timeline(ranks);
  }
  std::optional<Comparison> comparison;
  if (compare) {
    RunProfile baseline;
    const auto base = open_run(how.baseline_dir);
    while (base->next(window)) baseline.add(window);
    out.baseline_windows = baseline.windows();
    if (baseline.windows() > 0 && current.windows() > 0)
      comparison = compare_runs(baseline, current);
  }
  if (how.triage)
    out.diagnosis = diagnosis.finish(timeline ? &*timeline : nullptr,
                                     comparison ? &*comparison : nullptr);
  return out;
}

}  // namespace laggard
