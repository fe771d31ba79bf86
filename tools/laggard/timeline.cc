// `laggard timeline TRACE_DIR`: per rank and step, where the device's time went between kernels
// (waiting for data, waiting on communication, launch-bound, other idle) and the time spent
// inside NCCL kernels waiting for ranks that came later, read from the ranks' profiler traces.
#include <iostream>

#include "commands.hpp"
#include "laggard/source.hpp"
#include "laggard/timeline.hpp"
#include "laggard/trace.hpp"
#include "output.hpp"

namespace laggard::cli {

void add_timeline(CLI::App& app, TimelineArgs& args) {
  auto* cmd = app.add_subcommand(
      "timeline",
      "Timeline bubbles from per-rank profiler traces: per rank and step the device's idle "
      "time (waiting for data, waiting on communication, launch-bound, other) and the wait "
      "inside collectives");
  cmd->add_option("TRACE_DIR", args.run_dir,
                  "Directory of PyTorch profiler traces, one per rank (*.json, *.json.gz)")
      ->required();
  cmd->add_flag("--per-step", args.per_step, "Also print every rank's figures per step");
  cmd->add_flag("--json", args.json, "Print one JSON object instead of text");
  cmd->add_flag("-q,--quiet", args.quiet, "No progress on stderr");
}

namespace {

std::string pad(const std::string& s, std::size_t width) {
  return s.size() >= width ? s + " " : std::string(width - s.size(), ' ') + s;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + join_ints(ranks);
}

std::string finding_text(const TimelineFinding& f, const TimelineSummary& sum) {
  const std::string who = f.every_rank ? "every rank (" + ranks_text(f.ranks) + ")"
                                       : ranks_text(f.ranks);
  const std::string share = fixed(100.0 * f.share, 1) + "% of the device's time";
  const std::string median = f.every_rank ? "" : "; median rank " + fixed(f.median_ms, 1) + " ms";
  switch (f.kind) {
    case TimelineFinding::Kind::late_arrival:
      return who + " reached " + std::to_string(f.last) + " of its " + std::to_string(f.of) +
             " collectives last: the other ranks waited " + fixed(f.others_wait_ms, 1) +
             " ms per step inside NCCL kernels (" + share +
             ") — measured: its kernel of each collective was the shortest, the others' began "
             "earlier and waited for it";
    case TimelineFinding::Kind::data_wait:
      return who + ": waiting for data " + fixed(f.ms_per_step, 1) + " ms per step (" + share +
             median +
             ") — measured: the device idle while the host was loading data (a DataLoader, a "
             "stage of kind data), or only host-to-device copies running; inferred: input "
             "loading is too slow";
    case TimelineFinding::Kind::comm_idle:
      return who + ": waiting on communication " + fixed(f.ms_per_step, 1) + " ms per step (" +
             share + median +
             ") — measured: the device idle while the host was in a collective (nccl:*, "
             "c10d::*, an annotation of kind communication); inferred: " +
             (f.every_rank ? std::string("the collectives are slow or not overlapped with "
                                         "compute, or a rank reaches them late")
                           : std::string("these ranks wait for ranks that reach the "
                                         "collectives later, or their links are slower")) +
             " — not input loading";
    case TimelineFinding::Kind::launch_bound:
      return who + ": launch-bound " + fixed(f.ms_per_step, 1) + " ms per step (" + share +
             median +
             ") — measured: the device idle until the next kernel's launch call returned; "
             "inferred: the host is too slow to feed the device (CPU contention, Python "
             "overhead, many small kernels)";
    case TimelineFinding::Kind::other_idle:
      return who + ": idle " + fixed(f.ms_per_step, 1) + " ms per step for no reason the trace "
             "shows (" + share + median +
             ") — measured: the next kernel was launched, yet did not run (waiting on an "
             "event, a synchronization, another stream)";
  }
  (void)sum;
  return who;
}

void print_text(const TimelineArgs& args, const TimelineSummary& sum,
                const std::vector<RankTrace>& ranks, const RunStats& stats) {
  std::int64_t first = 0, last = 0;
  std::size_t steps = 0;
  bool any = false;
  for (const RankTrace& r : ranks)
    for (const StepTimeline& t : r.timeline) {
      first = any ? std::min(first, t.step) : t.step;
      last = any ? std::max(last, t.step) : t.step;
      any = true;
    }
  for (const auto& r : sum.ranks) steps = std::max(steps, r.steps);
  const int world = ranks.empty() ? 0 : ranks.front().info.world_size;
  std::cout << "laggard timeline " << args.run_dir << "\n";
  std::cout << "  " << ranks.size() << " ranks (world size " << world << "), " << steps
            << " steps (" << first << ".." << last << "); device activity in "
            << sum.ranks.size() << " of " << ranks.size() << " traces; "
            << sum.collectives_matched << " collectives matched across ranks";
  if (sum.collectives_mismatched > 0)
    std::cout << " (" << sum.collectives_mismatched << " differ in name or size across ranks)";
  std::cout << "\n  per step, mean ms: window = busy + copy + data wait + comm idle + "
               "launch-bound + other idle; comm = NCCL kernel time (part of busy), comm wait = "
               "the part of it spent waiting for later ranks\n\n";
  std::cout << "  rank  host" << std::string(6, ' ') << pad("step ms", 9) << pad("window", 9)
            << pad("busy", 9) << pad("copy", 7) << pad("data wait", 11)
            << pad("comm idle", 11) << pad("launch-bound", 14) << pad("other idle", 12)
            << pad("comm", 9) << pad("comm wait", 11) << pad("last at", 9) << "\n";
  std::size_t host_width = 10;
  for (const auto& r : sum.ranks) host_width = std::max(host_width, printable(r.host).size() + 2);
  for (const auto& r : sum.ranks) {
    std::string host = printable(r.host.empty() ? "-" : r.host);
    host += std::string(host_width - std::min(host_width, host.size()), ' ');
    std::cout << "  " << pad(std::to_string(r.rank), 4) << "  " << host.substr(0, 10)
              << pad(fixed(r.step_ms, 2), 9) << pad(fixed(r.window_ms, 2), 9)
              << pad(fixed(r.busy_ms, 2), 9) << pad(fixed(r.copy_ms, 2), 7)
              << pad(fixed(r.data_wait_ms, 2), 11) << pad(fixed(r.comm_idle_ms, 2), 11)
              << pad(fixed(r.launch_wait_ms, 2), 14)
              << pad(fixed(r.other_idle_ms, 2), 12) << pad(fixed(r.comm_ms, 2), 9)
              << pad(fixed(r.comm_wait_ms, 2), 11)
              << pad(std::to_string(r.arrived_last) + "/" + std::to_string(r.collectives), 9)
              << "\n";
  }
  if (args.per_step) {
    std::cout << "\nPer step\n  rank   step" << pad("step ms", 9) << pad("window", 9)
              << pad("busy", 9) << pad("copy", 7) << pad("data wait", 11)
              << pad("comm idle", 11) << pad("launch-bound", 14) << pad("other idle", 12)
              << pad("comm", 9) << pad("comm wait", 11) << "\n";
    for (const RankTrace& r : ranks)
      for (const StepTimeline& t : r.timeline)
        std::cout << "  " << pad(std::to_string(r.info.rank), 4) << pad(std::to_string(t.step), 7)
                  << pad(fixed(t.step_ms, 2), 9) << pad(fixed(t.window_ms, 2), 9)
                  << pad(fixed(t.busy_ms, 2), 9) << pad(fixed(t.copy_ms, 2), 7)
                  << pad(fixed(t.data_wait_ms, 2), 11) << pad(fixed(t.comm_idle_ms, 2), 11)
                  << pad(fixed(t.launch_wait_ms, 2), 14)
                  << pad(fixed(t.other_idle_ms, 2), 12) << pad(fixed(t.comm_ms, 2), 9)
                  << pad(fixed(t.comm_wait_ms, 2), 11) << "\n";
  }
  std::cout << "\nFindings\n";
  if (sum.findings.empty()) std::cout << "  none (no bubble above 5% of a rank's device time)\n";
  for (const auto& f : sum.findings) std::cout << "  " << printable(finding_text(f, sum)) << "\n";
  if (sum.ranks_without_device > 0)
    std::cout << "  " << sum.ranks_without_device
              << " trace(s) without device activity (CPU-only profiles): no timeline\n";
  std::cout << "Input: " << stats.files << " profiler traces, " << stats.malformed
            << " malformed events skipped\n";
  for (const auto& e : stats.errors) std::cout << "  skipped " << printable(e.message()) << "\n";
  if (stats.malformed > stats.errors.size())
    std::cout << "  ... and " << (stats.malformed - stats.errors.size()) << " more\n";
}

Json figures_json(const StepTimeline& t) {
  return {{"step", t.step},
          {"step_ms", t.step_ms},
          {"window_ms", t.window_ms},
          {"busy_ms", t.busy_ms},
          {"copy_ms", t.copy_ms},
          {"data_wait_ms", t.data_wait_ms},
          {"comm_idle_ms", t.comm_idle_ms},
          {"launch_wait_ms", t.launch_wait_ms},
          {"other_idle_ms", t.other_idle_ms},
          {"comm_ms", t.comm_ms},
          {"comm_wait_ms", t.comm_wait_ms},
          {"activities", t.activities},
          {"collectives", t.collectives}};
}

Json to_json(const TimelineArgs& args, const TimelineSummary& sum,
             const std::vector<RankTrace>& ranks, const RunStats& stats) {
  Json j;
  j["run_dir"] = args.run_dir;
  j["ranks"] = Json::array();
  for (const RankTrace& r : ranks) {
    const RankTimelineSummary* s = nullptr;
    for (const auto& x : sum.ranks)
      if (x.rank == r.info.rank) s = &x;
    Json rj = {{"rank", r.info.rank},
               {"host", r.info.host},
               {"file", r.stats.path},
               {"device_activity", r.has_device_activity}};
    if (s)
      rj["mean"] = {{"step_ms", s->step_ms},         {"window_ms", s->window_ms},
                    {"busy_ms", s->busy_ms},         {"copy_ms", s->copy_ms},
                    {"data_wait_ms", s->data_wait_ms}, {"comm_idle_ms", s->comm_idle_ms},
                    {"launch_wait_ms", s->launch_wait_ms},
                    {"other_idle_ms", s->other_idle_ms}, {"comm_ms", s->comm_ms},
                    {"comm_wait_ms", s->comm_wait_ms}, {"collectives", s->collectives},
                    {"arrived_last", s->arrived_last}};
    else
      rj["mean"] = nullptr;
    rj["steps"] = Json::array();
    for (const StepTimeline& t : r.timeline) rj["steps"].push_back(figures_json(t));
    j["ranks"].push_back(rj);
  }
  j["collectives"] = {{"matched", sum.collectives_matched},
                      {"mismatched", sum.collectives_mismatched}};
  j["findings"] = Json::array();
  for (const auto& f : sum.findings)
    j["findings"].push_back({{"kind", to_string(f.kind)},
                             {"ranks", f.ranks},
                             {"every_rank", f.every_rank},
                             {"ms_per_step", f.ms_per_step},
                             {"share", f.share},
                             {"median_ms", f.median_ms},
                             {"last", f.last},
                             {"of", f.of},
                             {"others_wait_ms", f.others_wait_ms},
                             {"text", finding_text(f, sum)}});
  Json errors = Json::array();
  for (const auto& e : stats.errors)
    errors.push_back({{"file", e.file}, {"line", e.line}, {"what", e.what}});
  j["input"] = {{"files", stats.files},
                {"malformed", stats.malformed},
                {"bytes", stats.bytes},
                {"errors", errors}};
  return j;
}

}  // namespace

int run_timeline(const TimelineArgs& args) {
  if (detect_run_format(args.run_dir) != RunFormat::profiler_traces)
    throw UsageError{args.run_dir +
                     " holds laggard's sample logs (rank-*.jsonl), not profiler traces: the "
                     "timeline needs the ranks' traces (laggard analyze reads the logs)"};
  Progress progress("reading " + args.run_dir, !args.quiet);
  TraceRunReader reader(args.run_dir, progress_options(progress));
  reader.load();
  progress.finish();
  std::vector<RankTrace> ranks = reader.ranks();
  const TimelineSummary sum = analyze_timeline(ranks);
  const RunStats& stats = reader.stats();
  if (sum.ranks.empty())
    throw UsageError{"no device activity in any trace of " + args.run_dir + " (" +
                     std::to_string(ranks.size()) +
                     " CPU-only profiles): the timeline needs kernels; laggard analyze reads "
                     "their host-side stages"};
  warn_input(args.run_dir, stats);
  if (args.json)
    std::cout << to_json(args, sum, ranks, stats).dump(2, ' ', false, kJsonReplace) << "\n";
  else
    print_text(args, sum, ranks, stats);
  if (stats.malformed > 0 && !args.quiet)
    std::cerr << "laggard: skipped " << stats.malformed << " malformed event(s) in "
              << args.run_dir << "\n";
  return kExitOk;
}

}  // namespace laggard::cli
