// `laggard scale RUN...`: runs of the same job at several world sizes. Each run is read once
// as a stream; its first window tells its size and per-rank work, which fix the factor that puts
// its times on the baseline's per-rank work before the rest is read.
#include <cmath>
#include <iostream>
#include <memory>
#include <set>

#include "commands.hpp"
#include "laggard/detail/statistics.hpp"
#include "laggard/scale.hpp"
#include "laggard/source.hpp"
#include "output.hpp"

namespace laggard::cli {

void add_scale(CLI::App& app, ScaleArgs& args) {
  auto* cmd = app.add_subcommand(
      "scale",
      "Runs of the same job at several world sizes: per stage how time grows with ranks, the "
      "smallest size at which a stage regresses, and the next size to try");
  cmd->add_option("RUN", args.runs,
                  "Run directories (rank-*.jsonl or profiler traces), one per world size")
      ->required();
  cmd->add_option("--baseline-size", args.baseline_size,
                  "World size every run is compared with (default: the smallest)");
  cmd->add_option("--scaling", args.scaling,
                  "Per-rank work across sizes: weak (the same per rank), strong (the same in "
                  "all: per rank ~ 1/size), work (the samples' work field), auto (work when "
                  "every run recorded it, else weak)")
      ->check(CLI::IsMember({"auto", "weak", "strong", "work"}))
      ->capture_default_str();
  cmd->add_option("--relative-threshold", args.relative_threshold,
                  "Smallest change that counts: REGRESSED when the ratio's interval lies above "
                  "1 + this")
      ->capture_default_str();
  cmd->add_option("--alpha", args.alpha, "Family-wise error rate (Holm) of each comparison")
      ->capture_default_str();
  cmd->add_option("--warmup", args.warmup,
                  "Sampled steps skipped at the start of each run (default: max(2, 10%))");
  cmd->add_option("--min-steps", args.min_steps,
                  "Steps needed per run after the warm-up; fewer gives UNKNOWN")
      ->capture_default_str();
  cmd->add_flag("--json", args.json, "Print one JSON object instead of text");
  cmd->add_flag("-q,--quiet", args.quiet, "No progress on stderr");
}

namespace {

struct OpenRun {
  std::string dir;
  std::unique_ptr<RunSource> source;
  Window first;
  int world_size = 0;
  double work = std::nan("");
};

double median_work(const Window& w) {
  std::vector<double> v;
  for (const StepSample& s : w.samples)
    if (std::isfinite(s.work) && s.work > 0) v.push_back(s.work);
  if (v.size() < w.samples.size() || v.empty()) return std::nan("");
  return detail::median_of(v);
}

void scale_window(Window& w, double factor) {
  if (factor == 1.0) return;
  for (StepSample& s : w.samples) {
    s.step_ms *= factor;
    for (StageTime& st : s.stages) st.ms *= factor;
  }
}

std::string pad(const std::string& s, std::size_t width, bool right = true) {
  if (s.size() >= width) return s + " ";
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

std::string cell(const ScalePoint* p, bool baseline) {
  if (!p) return "-";
  std::string t = fixed(p->ms, 2);
  if (baseline) return t;
  t += " " + (std::isfinite(p->ratio) ? fixed(p->ratio, 2) : std::string("-")) + "x";
  if (p->verdict == Verdict::regressed) t += " REGRESSED";
  if (p->verdict == Verdict::unknown) t += " UNKNOWN";
  if (p->verdict == Verdict::improved) t += " IMPROVED";
  return t;
}

const ScalePoint* point_at(const ScaleStage& st, int size) {
  for (const auto& p : st.points)
    if (p.world_size == size) return &p;
  return nullptr;
}

std::string growth_text(double g) {
  if (!std::isfinite(g)) return "-";
  return "size^" + fixed(g, 2);
}

void print_text(const ScaleArgs& args, const ScaleResult& r) {
  std::cout << "laggard scale";
  for (const auto& d : args.runs) std::cout << " " << d;
  std::cout << "\n";
  const char* how = r.scaling == Scaling::weak
                        ? "weak scaling: the same work per rank at every size, times as recorded"
                    : r.scaling == Scaling::strong
                        ? "strong scaling: the same global work, times x size / baseline size"
                        : "by the samples' work: times x baseline work per rank / work per rank";
  std::cout << "  " << r.runs.size() << " runs, baseline " << r.baseline_size << " ranks; " << how
            << "\n";
  std::cout << "  test: each size against the baseline, per stage: per step the median over "
               "ranks, ratio of medians with a "
            << fixed(100 * (1 - r.options.alpha), 0)
            << "% bootstrap interval and a Mann-Whitney U test, Holm-corrected; REGRESSED when "
               "the interval lies above "
            << fixed(1 + r.options.relative_threshold, 3) << "\n\n";
  std::cout << "Runs\n  " << pad("size", 6) << pad("ranks", 7) << pad("hosts", 7)
            << pad("steps", 7) << pad("factor", 8) << "  run\n";
  for (const ScaleRun& run : r.runs) {
    std::cout << "  " << pad(std::to_string(run.world_size), 6) << pad(std::to_string(run.ranks), 7)
              << pad(run.hosts ? std::to_string(run.hosts) : "-", 7)
              << pad(std::to_string(run.profile.windows()), 7) << pad(fixed(run.factor, 3), 8)
              << "  " << run.name;
    if (run.world_size == r.baseline_size) std::cout << "  (baseline)";
    if (run.world_size == r.first_multi_host_size) std::cout << "  (first on more than one host)";
    std::cout << "\n";
  }
  std::size_t w = 16;
  for (const auto& st : r.stages) w = std::max(w, printable(st.stage).size() + 2);
  std::vector<std::size_t> cw;
  for (const ScaleRun& run : r.runs) {
    std::size_t c = 10;
    for (const auto& st : r.stages) {
      const ScalePoint* p = point_at(st, run.world_size);
      c = std::max(c, cell(p, run.world_size == r.baseline_size).size() + 2);
    }
    c = std::max(c, cell(point_at(r.step_time, run.world_size),
                         run.world_size == r.baseline_size).size() + 2);
    cw.push_back(c);
  }
  std::cout << "\nStages (pipeline order): the median rank's ms per step at each size, and the "
               "ratio to the baseline\n  "
            << pad("stage", w, false);
  for (std::size_t i = 0; i < r.runs.size(); ++i)
    std::cout << pad(std::to_string(r.runs[i].world_size) + " ranks", cw[i]);
  std::cout << pad("growth", 12) << "\n";
  const auto row = [&](const ScaleStage& st, const std::string& label) {
    std::cout << "  " << pad(printable(label), w, false);
    for (std::size_t i = 0; i < r.runs.size(); ++i)
      std::cout << pad(cell(point_at(st, r.runs[i].world_size),
                            r.runs[i].world_size == r.baseline_size),
                       cw[i]);
    std::cout << pad(growth_text(st.growth), 12) << "\n";
  };
  for (const auto& st : r.stages) row(st, st.stage);
  row(r.step_time, "step time");
  std::cout << "\n";
  if (r.first_regression_size > 0) {
    const ScaleStage& st = r.stages[static_cast<std::size_t>(r.origin_stage)];
    const ScalePoint* p = point_at(st, r.first_regression_size);
    std::cout << "First regression: " << printable(st.stage) << " at " << r.first_regression_size
              << " ranks, " << fixed(p->ratio, 3) << "x the baseline (interval "
              << fixed(p->ci_low, 3) << "-" << fixed(p->ci_high, 3) << ")";
    if (r.first_multi_host)
      std::cout << ": the first size spanning more than one host";
    std::cout << "\n";
    std::vector<std::string> later;
    for (std::size_t s = 0; s < r.stages.size(); ++s) {
      const ScalePoint* q = point_at(r.stages[s], r.first_regression_size);
      if (static_cast<int>(s) != r.origin_stage && q && q->verdict == Verdict::regressed)
        later.push_back(printable(r.stages[s].stage));
    }
    if (!later.empty()) {
      std::cout << "Also regressed at " << r.first_regression_size << " ranks:";
      for (std::size_t i = 0; i < later.size(); ++i) std::cout << (i ? ", " : " ") << later[i];
      std::cout << "\n";
    }
  } else {
    std::cout << "First regression: none (no stage regressed beyond "
              << fixed(100 * r.options.relative_threshold, 1) << "% at any size)\n";
  }
  std::cout << "Next: " << r.next_reason << "\n";
  if (!r.unknown_sizes.empty()) {
    std::cout << "UNKNOWN at";
    for (int s : r.unknown_sizes) std::cout << " " << s;
    std::cout << " ranks: not enough evidence for some stages there (more steps would settle it)\n";
  }
}

Json point_json(const ScalePoint& p) {
  return {{"world_size", p.world_size},    {"ms", p.ms},
          {"ratio", number_or_null(p.ratio)}, {"ci_low", number_or_null(p.ci_low)},
          {"ci_high", number_or_null(p.ci_high)}, {"verdict", to_string(p.verdict)},
          {"reason", p.reason}};
}

Json stage_json(const ScaleStage& st) {
  Json points = Json::array();
  for (const auto& p : st.points) points.push_back(point_json(p));
  return {{"stage", st.stage},
          {"cohort", st.cohort},
          {"kind", to_string(st.kind)},
          {"growth", number_or_null(st.growth)},
          {"first_regressed_size",
           st.first_regressed_size ? Json(st.first_regressed_size) : Json(nullptr)},
          {"points", points}};
}

Json to_json(const ScaleResult& r) {
  Json j;
  j["scaling"] = to_string(r.scaling);
  j["baseline_size"] = r.baseline_size;
  j["options"] = {{"relative_threshold", r.options.relative_threshold},
                  {"alpha", r.options.alpha},
                  {"warmup", r.options.warmup >= 0 ? Json(r.options.warmup) : Json("auto")},
                  {"min_steps", r.options.min_steps}};
  j["runs"] = Json::array();
  for (const ScaleRun& run : r.runs)
    j["runs"].push_back({{"run_dir", run.name},
                         {"world_size", run.world_size},
                         {"ranks", run.ranks},
                         {"hosts", run.hosts},
                         {"windows", run.profile.windows()},
                         {"work", number_or_null(run.work)},
                         {"factor", run.factor}});
  j["stages"] = Json::array();
  for (const auto& st : r.stages) j["stages"].push_back(stage_json(st));
  j["step_time"] = stage_json(r.step_time);
  if (r.first_regression_size > 0) {
    const ScaleStage& st = r.stages[static_cast<std::size_t>(r.origin_stage)];
    j["first_regression"] = {{"world_size", r.first_regression_size},
                             {"stage", st.stage},
                             {"cohort", st.cohort},
                             {"first_multi_host", r.first_multi_host}};
  } else {
    j["first_regression"] = nullptr;
  }
  j["first_multi_host_size"] =
      r.first_multi_host_size ? Json(r.first_multi_host_size) : Json(nullptr);
  j["ranks_per_host"] = r.ranks_per_host ? Json(r.ranks_per_host) : Json(nullptr);
  j["bracket_low"] = r.bracket_low ? Json(r.bracket_low) : Json(nullptr);
  j["next_sizes"] = r.next_sizes;
  j["next_reason"] = r.next_reason;
  j["unknown_sizes"] = r.unknown_sizes;
  return j;
}

}  // namespace

int run_scale(const ScaleArgs& args) {
  if (args.runs.size() < 2)
    throw UsageError{"scale needs runs at two or more world sizes, got " +
                     std::to_string(args.runs.size())};
  if (args.warmup < -1) throw UsageError{"--warmup must be >= 0"};
  CompareOptions options;
  options.relative_threshold = args.relative_threshold;
  options.alpha = args.alpha;
  options.warmup = args.warmup;
  options.min_steps = args.min_steps;
  options.per_rank = false;  // ranks differ across sizes
  options.validate();

  // First windows: each run's size and work.
  std::vector<OpenRun> open;
  for (const std::string& dir : args.runs) {
    OpenRun o;
    o.dir = dir;
    Progress progress("reading " + dir, !args.quiet);
    o.source = open_run(dir, progress_options(progress));
    if (!o.source->next(o.first)) {
      std::string why = "no well-formed samples in " + dir;
      const RunStats& st = o.source->stats();
      if (!st.errors.empty()) why += "; first: " + printable(st.errors.front().message());
      throw UsageError{why};
    }
    progress.finish();
    for (const StepSample& s : o.first.samples) o.world_size = std::max(o.world_size, s.world_size);
    o.world_size = std::max<int>(o.world_size, static_cast<int>(o.first.samples.size()));
    o.work = median_work(o.first);
    open.push_back(std::move(o));
  }
  Scaling scaling = Scaling::weak;
  if (args.scaling == "strong") scaling = Scaling::strong;
  if (args.scaling == "work" || args.scaling == "auto") {
    bool all = true;
    for (const auto& o : open) all = all && std::isfinite(o.work);
    if (all) scaling = Scaling::work;
    else if (args.scaling == "work")
      for (const auto& o : open)
        if (!std::isfinite(o.work))
          throw UsageError{"--scaling work: " + o.dir +
                           " records no work per sample (the 'work' field): use --scaling weak "
                           "or strong"};
  }
  int base_size = args.baseline_size;
  if (base_size <= 0) {
    base_size = open.front().world_size;
    for (const auto& o : open) base_size = std::min(base_size, o.world_size);
  }
  const OpenRun* base = nullptr;
  for (const auto& o : open)
    if (o.world_size == base_size) base = &o;
  if (!base) {
    std::string sizes;
    for (const auto& o : open) sizes += (sizes.empty() ? "" : ", ") + std::to_string(o.world_size);
    throw UsageError{"--baseline-size " + std::to_string(base_size) +
                     ": no run has that world size (sizes: " + sizes + ")"};
  }

  std::vector<ScaleRun> runs;
  for (auto& o : open) {
    ScaleRun run;
    run.name = o.dir;
    run.world_size = o.world_size;
    run.work = o.work;
    if (scaling == Scaling::strong)
      run.factor = static_cast<double>(o.world_size) / static_cast<double>(base_size);
    else if (scaling == Scaling::work)
      run.factor = base->work / o.work;
    std::set<std::string> hosts;
    std::set<int> ranks;
    Window w = std::move(o.first);
    do {
      for (const StepSample& s : w.samples) {
        if (!s.host.empty()) hosts.insert(s.host);
        ranks.insert(s.rank);
      }
      scale_window(w, run.factor);
      run.profile.add(w);
    } while (o.source->next(w));
    warn_input(o.dir, o.source->stats());
    run.hosts = static_cast<int>(hosts.size());
    run.ranks = static_cast<int>(ranks.size());
    runs.push_back(std::move(run));
  }
  ScaleResult result = scale_runs(std::move(runs), base_size, options);
  result.scaling = scaling;
  if (args.json)
    std::cout << to_json(result).dump(2, ' ', false, kJsonReplace) << "\n";
  else
    print_text(args, result);
  return kExitOk;
}

}  // namespace laggard::cli
