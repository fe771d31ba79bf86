// `laggard diverge RUN_A RUN_B`: the first step (and rank) where two runs of the same job record
// different values, bit for bit or beyond --rtol, with both sides' values and the stage timings
// around that step. Exit status as diff(1): 0 the same, 1 different, 2 bad input.
#include <charconv>
#include <cmath>
#include <iostream>

#include "commands.hpp"
#include "laggard/divergence.hpp"
#include "laggard/source.hpp"
#include "output.hpp"

namespace laggard::cli {

void add_diverge(CLI::App& app, DivergeArgs& args) {
  auto* cmd = app.add_subcommand(
      "diverge",
      "The first step and rank where two runs of the same job record different values (loss, "
      "grad_norm, ...: an.record), bit for bit or beyond a tolerance; exit 1 when they differ");
  cmd->add_option("RUN_A", args.run_a, "Run directory (rank-*.jsonl)")->required();
  cmd->add_option("RUN_B", args.run_b, "Run directory (rank-*.jsonl) to compare with RUN_A")
      ->required();
  cmd->add_option("--value", args.value,
                  "Compare only this recorded value (default: every value both runs recorded)");
  cmd->add_option("--rtol", args.rtol,
                  "Relative tolerance: values differ when |a - b| > rtol x max(|a|, |b|); "
                  "0 compares the bits")
      ->capture_default_str();
  cmd->add_option("--context", args.context, "Steps shown on each side of the divergent one")
      ->check(CLI::Range(0, 50))
      ->capture_default_str();
  cmd->add_flag("--json", args.json, "Print one JSON object instead of text");
}

namespace {

// The shortest text that reads back as the same double; the sample format's names for the
// non-finite ones.
std::string exact(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

Json exact_json(double v) {
  if (std::isfinite(v)) return v;
  return exact(v);
}

std::string names_text(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < 8; ++i)
    out += (i ? ", " : "") + printable(names[i]);
  if (names.size() > 8) out += " and " + std::to_string(names.size() - 8) + " more";
  return out;
}

Json sample_json(const StepSample& s) {
  Json j;
  j["step_ms"] = number_or_null(s.step_ms);
  Json stages = Json::object();
  for (const StageTime& t : s.stages) stages[t.name] = number_or_null(t.ms);
  j["stages"] = std::move(stages);
  Json values = Json::object();
  for (const NamedValue& v : s.values) values[v.name] = exact_json(v.value);
  j["values"] = std::move(values);
  return j;
}

Json to_json(const DivergenceResult& r, const DivergeArgs& args) {
  Json j;
  j["diverged"] = r.diverged;
  if (r.diverged) {
    j["step"] = r.step;
    j["rank"] = r.rank;
    j["value"] = r.value;
    j["a"] = exact_json(r.a);
    j["b"] = exact_json(r.b);
    Json diffs = Json::array();
    for (const auto& d : r.at_step)
      diffs.push_back({{"rank", d.rank}, {"value", d.value}, {"a", exact_json(d.a)},
                       {"b", exact_json(d.b)}});
    j["differences_at_step"] = std::move(diffs);
    Json around = Json::array();
    for (const DivergenceContext& c : r.around) {
      Json a;
      a["step"] = c.step;
      a["a"] = c.in_a ? sample_json(c.a) : Json(nullptr);
      a["b"] = c.in_b ? sample_json(c.b) : Json(nullptr);
      around.push_back(std::move(a));
    }
    j["around"] = std::move(around);
  }
  j["steps_compared"] = r.steps_compared;
  j["values_compared"] = r.values_compared;
  j["rtol"] = args.rtol;
  if (!args.value.empty()) j["only_value"] = args.value;
  j["steps_only_a"] = r.steps_only_a;
  j["steps_only_b"] = r.steps_only_b;
  j["rank_samples_in_one_run_only"] = r.ranks_only;
  j["values_only_a"] = r.values_only_a;
  j["values_only_b"] = r.values_only_b;
  return j;
}

std::string ms_pair(const DivergenceContext& c, const StageTime* a, const StageTime* b) {
  return (c.in_a && a ? fixed(a->ms, 2) : "-") + " | " + (c.in_b && b ? fixed(b->ms, 2) : "-");
}

void print_text(const DivergenceResult& r, const DivergeArgs& args) {
  std::cout << "laggard diverge " << printable(args.run_a) << " " << printable(args.run_b) << "\n";
  const std::string how =
      args.rtol > 0.0 ? "within a relative tolerance of " + exact(args.rtol) : "bit for bit";
  std::cout << "  compared " << (args.value.empty() ? "every value both runs recorded"
                                                    : "'" + printable(args.value) + "'")
            << ", " << how << ": " << r.values_compared << " values at " << r.steps_compared
            << " steps\n";
  if (!r.diverged) {
    std::cout << "  no divergence: the runs recorded the same values at every step both hold\n";
  } else {
    std::cout << "  first divergence: step " << r.step << ", rank " << r.rank << ", value '"
              << printable(r.value) << "'\n";
    std::cout << "    A: " << exact(r.a) << "\n    B: " << exact(r.b);
    if (std::isfinite(r.a) && std::isfinite(r.b)) {
      const double diff = r.b - r.a;
      const double scale = std::max(std::fabs(r.a), std::fabs(r.b));
      char buf[96];
      std::snprintf(buf, sizeof buf, "  (B - A = %.3g, relative %.3g)", diff,
                    scale > 0 ? std::fabs(diff) / scale : 0.0);
      std::cout << buf;
    }
    std::cout << "\n";
    if (r.at_step.size() > 1) {
      std::cout << "    also different at step " << r.step << ": ";
      for (std::size_t i = 1; i < r.at_step.size() && i <= 8; ++i)
        std::cout << (i > 1 ? ", " : "") << "rank " << r.at_step[i].rank << " '"
                  << printable(r.at_step[i].value) << "'";
      if (r.at_step.size() > 9) std::cout << " and " << r.at_step.size() - 9 << " more";
      std::cout << "\n";
    }
    std::cout << "  around step " << r.step << ", rank " << r.rank << " (ms, A | B):\n";
    for (const DivergenceContext& c : r.around) {
      const StepSample& names = c.in_a ? c.a : c.b;
      std::cout << "    step " << c.step << (c.step == r.step ? " *" : "  ") << "  step "
                << (c.in_a ? fixed(c.a.step_ms, 2) : "-") << " | "
                << (c.in_b ? fixed(c.b.step_ms, 2) : "-");
      for (const StageTime& t : names.stages)
        std::cout << "; " << printable(t.name) << " "
                  << ms_pair(c, c.a.find(t.name), c.b.find(t.name));
      std::cout << "\n";
    }
  }
  if (r.steps_only_a || r.steps_only_b)
    std::cout << "  steps in one run only: " << r.steps_only_a << " in A, " << r.steps_only_b
              << " in B (not compared)\n";
  if (r.ranks_only)
    std::cout << "  rank samples in one run only, at steps both hold: " << r.ranks_only << "\n";
  if (!r.values_only_a.empty())
    std::cout << "  recorded in A only: " << names_text(r.values_only_a) << "\n";
  if (!r.values_only_b.empty())
    std::cout << "  recorded in B only: " << names_text(r.values_only_b) << "\n";
}

std::unique_ptr<RunSource> open_sample_run(const std::string& dir) {
  if (detect_run_format(dir) != RunFormat::sample_logs)
    throw UsageError{dir + " holds profiler traces, which record no values: diverge reads "
                           "laggard's sample logs (rank-*.jsonl)"};
  return open_run(dir);
}

}  // namespace

int run_diverge(const DivergeArgs& args) {
  auto a = open_sample_run(args.run_a);
  auto b = open_sample_run(args.run_b);
  DivergenceOptions options;
  options.value = args.value;
  options.rtol = args.rtol;
  options.context = args.context;
  const DivergenceResult r = find_divergence(*a, *b, options);
  for (const auto* run : {&args.run_a, &args.run_b}) {
    const RunStats& stats = (run == &args.run_a ? a : b)->stats();
    warn_input(*run, stats);
    if (stats.malformed > 0)
      std::cerr << "laggard diverge: warning: " << printable(*run) << ": " << stats.malformed
                << " malformed lines skipped (not compared)\n";
  }
  if (args.json)
    std::cout << to_json(r, args).dump(2, ' ', false, kJsonReplace) << "\n";
  else
    print_text(r, args);
  return r.diverged ? kExitDiverged : kExitOk;
}

}  // namespace laggard::cli
