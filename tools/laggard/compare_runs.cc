// `laggard compare BASELINE_RUN CURRENT_RUN`: per stage (pipeline order) and per rank, did the
// current run regress against the baseline? Both runs are read as streams (RunProfile keeps a
// bounded number of per-step values), then compared with noise-aware statistics.
#include <algorithm>
#include <cmath>
#include <iostream>

#include "commands.hpp"
#include "laggard/compare.hpp"
#include "laggard/html_report.hpp"
#include "laggard/jsonl.hpp"
#include "laggard/source.hpp"
#include "output.hpp"

namespace laggard::cli {

namespace {

constexpr std::size_t kMaxRankLines = 20;

struct LoadedRun {
  RunProfile profile;
  RunStats stats;
  std::vector<std::string> files;
};

LoadedRun load(const std::string& dir, const char* which, bool quiet) {
  LoadedRun run;
  Progress progress(std::string("reading ") + which + " " + dir, !quiet);
  const auto reader = open_run(dir, progress_options(progress));
  Window window;
  while (reader->next(window)) {
    run.profile.add(window);
    progress.update(reader->bytes_read(), reader->bytes_total());
  }
  progress.finish();
  run.stats = reader->stats();
  run.files = reader->files();
  warn_input(dir, run.stats);
  if (run.profile.windows() == 0) {
    std::string why = "no well-formed samples in " + dir + " (" + which + ", " +
                      std::to_string(run.stats.files) + " rank files, " +
                      std::to_string(run.stats.malformed) + " malformed lines)";
    if (!run.stats.errors.empty())
      why += "; first: " + printable(run.stats.errors.front().message());
    throw UsageError{why};
  }
  return run;
}

// "a, b, c", names made printable; after `limit` names "... and N more" (a run can have tens of
// thousands of stage names, and an error message must stay readable).
std::string join(const std::vector<std::string>& v, std::size_t limit = 20) {
  std::string out;
  for (std::size_t i = 0; i < v.size() && i < limit; ++i)
    out += (out.empty() ? "" : ", ") + printable(v[i]);
  if (v.size() > limit) out += ", ... and " + std::to_string(v.size() - limit) + " more";
  return out;
}

std::string pad(std::string s, std::size_t width, bool right = false) {
  if (s.size() >= width) return s + " ";
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

std::string p_text(double p) {
  if (!std::isfinite(p)) return "-";
  if (p < 1e-4) return "<0.0001";
  return fixed(p, 4);
}

std::string interval(double lo, double hi) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return "-";
  return fixed(lo, 3) + "-" + fixed(hi, 3);
}

// "0-4,6,7" (ascending ranks, runs compressed; at most 12 items then "...").
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  int items = 0;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (items++ == 12) return out + ",...";
    if (!out.empty()) out += ",";
    out += std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string signed_ms(double v) { return (v >= 0 ? "+" : "") + fixed(v, 2) + " ms"; }

const char* role_name(StageComparison::Role role) {
  switch (role) {
    case StageComparison::Role::origin:
      return "origin";
    case StageComparison::Role::victim:
      return "possible_victim";
    case StageComparison::Role::unknown_before_origin:
      return "unknown_before_origin";
    case StageComparison::Role::none:
      return nullptr;
  }
  return nullptr;
}

bool names_cohorts(const Comparison& c) {
  for (const auto& s : c.stages)
    if (s.cohort != c.stages.front().cohort) return true;
  return false;
}

void print_run(const char* what, const std::string& dir, const RunOverview& r) {
  std::cout << "  " << what << dir << ": " << r.ranks << " ranks (world size " << r.world_size
            << "), " << r.windows << " sampled steps (" << r.first_step << ".." << r.last_step
            << "), "
            << (r.warmup == 0 ? std::string("no warm-up skipped")
                              : "the first " + std::to_string(r.warmup) + " skipped as warm-up")
            << "\n";
}

void print_text(const CompareArgs& args, const Comparison& c) {
  const CompareOptions& o = c.options;
  const bool nc = names_cohorts(c);
  const auto label = [&](const StageComparison& s) {
    return printable(stage_label(s.stage, s.cohort, nc));
  };
  std::cout << "laggard compare " << args.baseline_dir << " " << args.current_dir << "\n";
  print_run("baseline: ", args.baseline_dir, c.baseline);
  print_run("current:  ", args.current_dir, c.current);
  std::cout << "  test: per step the median over ranks; ratio of medians with a "
            << fixed(100 * (1 - o.alpha), 0) << "% bootstrap interval (" << o.resamples
            << " resamples) and a Mann-Whitney U test, Holm-corrected over " << c.stages_tested
            << " stages; REGRESSED when the interval lies above "
            << fixed(1 + o.relative_threshold, 3) << " and p < " << fixed(o.alpha, 2) << "\n\n";

  std::size_t w = 14;
  for (const auto& s : c.stages) w = std::max(w, label(s).size() + 2);
  std::cout << "Stages (pipeline order)\n  " << pad("stage", w) << pad("verdict", 11)
            << pad("ratio", 7, true) << "  " << pad("interval", 13) << pad("baseline ms", 12, true)
            << pad("current ms", 12, true) << pad("change", 12, true) << pad("p (Holm)", 10, true)
            << "\n";
  for (const auto& s : c.stages) {
    std::string role;
    if (s.role == StageComparison::Role::origin) role = "  <- origin";
    if (s.role == StageComparison::Role::victim) role = "  <- possible victim";
    std::cout << "  " << pad(label(s), w) << pad(to_string(s.verdict), 11)
              << pad(std::isfinite(s.ratio) ? fixed(s.ratio, 3) : "-", 7, true) << "  "
              << pad(interval(s.ci_low, s.ci_high), 13) << pad(fixed(s.baseline_ms, 2), 12, true)
              << pad(fixed(s.current_ms, 2), 12, true) << pad(signed_ms(s.delta_ms), 12, true)
              << pad(p_text(s.p_adjusted), 10, true) << role << "\n";
  }
  bool any_unknown = false;
  for (const auto& s : c.stages)
    if (s.verdict == Verdict::unknown) {
      if (!any_unknown) std::cout << "\nUNKNOWN\n";
      any_unknown = true;
      std::cout << "  " << label(s) << ": " << printable(s.reason) << "\n";
    }
  std::cout << "\n";
  if (c.origin >= 0) {
    const auto& s = c.stages[static_cast<std::size_t>(c.origin)];
    std::cout << "Origin: " << label(s) << " regressed " << fixed(s.ratio, 3) << "x (interval "
              << interval(s.ci_low, s.ci_high) << "), " << signed_ms(s.delta_ms)
              << " per step for the median rank; max over ranks " << fixed(s.baseline_max_ms, 2)
              << " -> " << fixed(s.current_max_ms, 2) << " ms\n";
    std::vector<std::string> v;
    for (int i : c.victims) v.push_back(label(c.stages[static_cast<std::size_t>(i)]));
    std::cout << "Possible victims (later regressed stages): " << (v.empty() ? "none" : join(v))
              << "\n";
  } else {
    std::cout << "Origin: none (no stage regressed beyond " << fixed(100 * o.relative_threshold, 1)
              << "%)\n";
  }
  {
    std::vector<std::string> v;
    for (int i : c.unknown_before_origin) v.push_back(label(c.stages[static_cast<std::size_t>(i)]));
    std::cout << (c.origin >= 0 ? "Earlier stages" : "Stages")
              << " without enough evidence (UNKNOWN): " << (v.empty() ? "none" : join(v)) << "\n";
  }
  if (!c.hint.empty()) std::cout << "Hint: " << printable(c.hint) << "\n";
  if (!c.only_in_baseline.empty())
    std::cout << "Only in the baseline (not compared): " << join(c.only_in_baseline) << "\n";
  if (!c.only_in_current.empty())
    std::cout << "Only in the current run (not compared): " << join(c.only_in_current) << "\n";
  const auto& st = c.step_time;
  std::cout << "Step time (slowest rank per step): " << to_string(st.verdict);
  if (st.steps_needed == 0)
    std::cout << ", " << fixed(st.baseline_ms, 2) << " -> " << fixed(st.current_ms, 2) << " ms ("
              << printable(st.reason) << ")";
  else
    std::cout << " (" << printable(st.reason) << ")";
  std::cout << "\n\nPer rank: " << c.per_rank_note << "\n";
  if (c.per_rank) {
    // First the pairs that say something the stage verdicts do not: the rank regressed while the
    // stage's median rank did not. The rest are summarized per stage.
    std::vector<const RankComparison*> own;
    std::vector<std::pair<std::string, std::vector<int>>> with_median;  // stage label → ranks
    for (const auto& r : c.ranks) {
      if (r.verdict != Verdict::regressed) continue;
      if (r.stage_verdict != Verdict::regressed) {
        own.push_back(&r);
        continue;
      }
      const std::string l = printable(stage_label(r.stage, r.cohort, nc));
      if (with_median.empty() || with_median.back().first != l) with_median.push_back({l, {}});
      with_median.back().second.push_back(r.rank);
    }
    if (own.empty() && with_median.empty()) std::cout << "  no rank regressed in any stage\n";
    // (UNKNOWN pairs are listed below.)
    if (own.empty() && !with_median.empty())
      std::cout << "  no rank regressed beyond what its stage's median rank shows\n";
    for (std::size_t i = 0; i < own.size() && i < kMaxRankLines; ++i) {
      const auto& r = *own[i];
      std::cout << "  rank " << r.rank << " in " << printable(stage_label(r.stage, r.cohort, nc))
                << ": REGRESSED " << fixed(r.ratio, 3) << "x (interval "
                << interval(r.ci_low, r.ci_high) << "), " << fixed(r.baseline_ms, 2) << " -> "
                << fixed(r.current_ms, 2)
                << " ms; the stage's median rank: " << to_string(r.stage_verdict) << "\n";
    }
    if (own.size() > kMaxRankLines)
      std::cout << "  ... and " << (own.size() - kMaxRankLines) << " more (--json lists all)\n";
    for (const auto& [l, ranks] : with_median)
      std::cout << "  also regressed with the stage's median rank: " << l << " on " << ranks.size()
                << (ranks.size() == 1 ? " rank (" : " ranks (") << rank_list(ranks) << ")\n";
    // Significant changes whose interval straddles the threshold: worth a look, not a verdict.
    std::vector<const RankComparison*> unsure;
    for (const auto& r : c.ranks)
      if (r.verdict == Verdict::unknown && r.kind != StageKind::communication) unsure.push_back(&r);
    for (std::size_t i = 0; i < unsure.size() && i < 5; ++i) {
      const auto& r = *unsure[i];
      std::cout << "  rank " << r.rank << " in " << printable(stage_label(r.stage, r.cohort, nc))
                << ": UNKNOWN " << fixed(r.ratio, 3) << "x (interval "
                << interval(r.ci_low, r.ci_high)
                << "): changed, but the interval straddles the threshold (a change mid-run? see "
                   "`laggard analyze` for its onset)\n";
    }
    if (unsure.size() > 5)
      std::cout << "  ... and " << (unsure.size() - 5) << " more UNKNOWN (--json lists all)\n";
    if (c.ranks_improved > 0)
      std::cout << "  " << c.ranks_improved << " rank-stage pair(s) improved\n";
  }
}

Json stage_json(const StageComparison& s) {
  Json j;
  j["stage"] = s.stage;
  j["cohort"] = s.cohort;
  j["kind"] = to_string(s.kind);
  j["verdict"] = to_string(s.verdict);
  const char* role = role_name(s.role);
  j["role"] = role ? Json(role) : Json(nullptr);
  j["ratio"] = number_or_null(s.ratio);
  j["ci_low"] = number_or_null(s.ci_low);
  j["ci_high"] = number_or_null(s.ci_high);
  j["baseline_ms"] = s.baseline_ms;
  j["current_ms"] = s.current_ms;
  j["delta_ms"] = s.delta_ms;
  j["baseline_max_ms"] = s.baseline_max_ms;
  j["current_max_ms"] = s.current_max_ms;
  j["p_value"] = number_or_null(s.p_value);
  j["p_adjusted"] = number_or_null(s.p_adjusted);
  j["baseline_steps"] = s.baseline_steps;
  j["current_steps"] = s.current_steps;
  j["steps_needed"] = s.steps_needed ? Json(s.steps_needed) : Json(nullptr);
  j["reason"] = s.reason;
  return j;
}

Json run_json(const std::string& dir, const RunOverview& r, const RunStats& st) {
  return {{"run_dir", dir},
          {"ranks", r.ranks},
          {"world_size", r.world_size},
          {"windows", r.windows},
          {"warmup", r.warmup},
          {"samples", r.samples},
          {"first_step", r.first_step},
          {"last_step", r.last_step},
          {"input",
           {{"files", st.files},
            {"malformed", st.malformed},
            {"duplicates", st.duplicates},
            {"out_of_order", st.out_of_order}}}};
}

Json to_json(const CompareArgs& args, const Comparison& c, const RunStats& bs, const RunStats& cs) {
  const CompareOptions& o = c.options;
  Json j;
  j["baseline"] = run_json(args.baseline_dir, c.baseline, bs);
  j["current"] = run_json(args.current_dir, c.current, cs);
  j["options"] = {{"relative_threshold", o.relative_threshold},
                  {"alpha", o.alpha},
                  {"warmup", o.warmup >= 0 ? Json(o.warmup) : Json("auto")},
                  {"min_steps", o.min_steps},
                  {"resamples", o.resamples},
                  {"seed", o.seed},
                  {"per_rank", o.per_rank}};
  j["stages_tested"] = c.stages_tested;
  j["stages"] = Json::array();
  for (const auto& s : c.stages) j["stages"].push_back(stage_json(s));
  if (c.origin >= 0) {
    const auto& s = c.stages[static_cast<std::size_t>(c.origin)];
    j["origin"] = {{"index", c.origin}, {"stage", s.stage}, {"cohort", s.cohort}};
  } else {
    j["origin"] = nullptr;
  }
  const auto names = [&](const std::vector<int>& idx) {
    Json a = Json::array();
    for (int i : idx) a.push_back(c.stages[static_cast<std::size_t>(i)].stage);
    return a;
  };
  j["victims"] = names(c.victims);
  j["unknown_before_origin"] = names(c.unknown_before_origin);
  if (c.rank_origin >= 0) {
    const auto& r = c.ranks[static_cast<std::size_t>(c.rank_origin)];
    j["rank_origin"] = {{"rank", r.rank},
                        {"stage", r.stage},
                        {"cohort", r.cohort},
                        {"ratio", number_or_null(r.ratio)}};
  } else {
    j["rank_origin"] = nullptr;
  }
  j["hint"] = c.hint.empty() ? Json(nullptr) : Json(c.hint);
  j["only_in_baseline"] = c.only_in_baseline;
  j["only_in_current"] = c.only_in_current;
  j["step_time"] = stage_json(c.step_time);
  Json pr;
  pr["compared"] = c.per_rank;
  pr["note"] = c.per_rank_note;
  pr["pairs_tested"] = c.rank_pairs_tested;
  pr["improved"] = c.ranks_improved;
  pr["regressed"] = Json::array();
  pr["unknown"] = Json::array();
  for (const auto& r : c.ranks) {
    if (r.verdict != Verdict::regressed && r.verdict != Verdict::unknown) continue;
    pr[r.verdict == Verdict::regressed ? "regressed" : "unknown"].push_back(
        {{"rank", r.rank},
         {"cohort", r.cohort},
         {"stage", r.stage},
         {"ratio", number_or_null(r.ratio)},
         {"ci_low", number_or_null(r.ci_low)},
         {"ci_high", number_or_null(r.ci_high)},
         {"baseline_ms", r.baseline_ms},
         {"current_ms", r.current_ms},
         {"delta_ms", r.delta_ms},
         {"p_adjusted", number_or_null(r.p_adjusted)},
         {"stage_verdict", to_string(r.stage_verdict)}});
  }
  j["per_rank"] = pr;
  return j;
}

}  // namespace

int run_compare_runs(const CompareArgs& args) {
  CompareOptions options;
  options.relative_threshold = args.relative_threshold;
  options.alpha = args.alpha;
  options.warmup = args.warmup;
  options.min_steps = args.min_steps;
  options.resamples = args.resamples;
  options.per_rank = !args.no_per_rank;
  if (args.warmup < -1) throw UsageError{"--warmup must be >= 0"};
  options.validate();
  if (!args.stages.empty()) throw UsageError{"--stages is for the single-vector mode"};

  const LoadedRun base = load(args.baseline_dir, "baseline", args.quiet);
  const LoadedRun cur = load(args.current_dir, "current", args.quiet);
  const Comparison c = compare_runs(base.profile, cur.profile, options);
  std::vector<std::string> inputs = base.files;
  inputs.insert(inputs.end(), cur.files.begin(), cur.files.end());
  if (c.stages.empty())
    throw UsageError{"no stage in common: the baseline has " +
                     (c.only_in_baseline.empty() ? std::string("none") : join(c.only_in_baseline)) +
                     "; the current run has " +
                     (c.only_in_current.empty() ? std::string("none") : join(c.only_in_current))};
  if (args.json)
    std::cout << to_json(args, c, base.stats, cur.stats).dump(2, ' ', false, kJsonReplace) << "\n";
  else
    print_text(args, c);
  if (!args.html.empty())
    write_file_replacing(args.html,
                         render_compare_report(c, base.profile, cur.profile, args.baseline_dir,
                                               args.current_dir),
                         inputs);
  for (const auto* r : {&base, &cur})
    if (r->stats.malformed > 0 && !args.quiet)
      std::cerr << "laggard: skipped " << r->stats.malformed << " malformed line(s) in "
                << (r == &base ? args.baseline_dir : args.current_dir) << "\n";
  return kExitOk;
}

}  // namespace laggard::cli
