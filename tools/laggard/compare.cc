// `laggard compare`: the first stage that regressed against a baseline is the origin.
#include <charconv>
#include <cmath>
#include <iostream>

#include "commands.hpp"
#include "output.hpp"

namespace laggard::cli {

void add_compare(CLI::App& app, CompareArgs& args) {
  auto* cmd = app.add_subcommand(
      "compare",
      "Name the first stage (pipeline order) that regressed against a baseline: two run "
      "directories (noise-aware, per stage and per rank), or two single vectors");
  cmd->add_option("BASELINE_RUN", args.baseline_dir,
                  "Known-good run directory (rank-*.jsonl or profiler traces)");
  cmd->add_option("CURRENT_RUN", args.current_dir, "Run directory to judge against it");
  cmd->add_option("--warmup", args.warmup,
                  "Sampled steps skipped at the start of each run (default: max(2, 10%))");
  cmd->add_option("--min-steps", args.min_steps,
                  "Steps needed per run after the warm-up; fewer gives UNKNOWN")
      ->capture_default_str();
  cmd->add_option("--alpha", args.alpha, "Family-wise error rate (Holm) of the tests")
      ->capture_default_str();
  cmd->add_option("--resamples", args.resamples, "Bootstrap resamples per interval")
      ->capture_default_str();
  cmd->add_flag("--no-per-rank", args.no_per_rank, "Skip the per-rank comparison");
  cmd->add_option("--html", args.html, "Also write a self-contained HTML report to this file");
  cmd->add_flag("-q,--quiet", args.quiet, "No progress on stderr");
  cmd->add_option("--baseline-vector", args.baseline_vector,
                  "Per-stage baseline times, comma-separated (e.g. 1.0,2.0,3.0)");
  cmd->add_option("--current-vector", args.current_vector,
                  "Per-stage current times, same stages and order");
  cmd->add_option("--relative-threshold", args.relative_threshold,
                  "Smallest change that counts. Runs: REGRESSED when the ratio's interval lies "
                  "above 1 + this; vectors: after > before x (1 + this), absolute when before is 0")
      ->capture_default_str();
  cmd->add_option("--stages", args.stages,
                  "Vector mode: stage names, comma-separated (default stage0,...)");
  cmd->add_flag("--json", args.json, "Print one JSON object instead of text");
}

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    out.push_back(text.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<double> parse_vector(const std::string& option, const std::string& text) {
  std::vector<double> out;
  const auto parts = split(text);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    std::string p = parts[i];
    p.erase(0, p.find_first_not_of(" \t"));
    p.erase(p.find_last_not_of(" \t") + 1);
    double v = 0.0;
    const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || !std::isfinite(v))
      throw UsageError{option + ": element " + std::to_string(i) + " ('" + parts[i] +
                       "') is not a finite number"};
    // Stage times: a negative one is a broken measurement, and would turn the ratio's sign.
    if (v < 0.0)
      throw UsageError{option + ": element " + std::to_string(i) + " ('" + parts[i] +
                       "') is negative: stage times are >= 0"};
    out.push_back(v);
  }
  return out;
}

}  // namespace

int run_compare_vectors(const CompareArgs& args) {
  const auto before = parse_vector("--baseline-vector", args.baseline_vector);
  const auto after = parse_vector("--current-vector", args.current_vector);
  if (before.size() != after.size())
    throw UsageError{"--baseline-vector has " + std::to_string(before.size()) +
                     " stages but --current-vector has " + std::to_string(after.size())};
  if (!(args.relative_threshold >= 0.0) || !std::isfinite(args.relative_threshold))
    throw UsageError{"--relative-threshold must be a finite number >= 0"};
  std::vector<std::string> names;
  if (!args.stages.empty()) {
    names = split(args.stages);
    if (names.size() != before.size())
      throw UsageError{"--stages names " + std::to_string(names.size()) +
                       " stages but the vectors have " + std::to_string(before.size())};
  } else {
    for (std::size_t i = 0; i < before.size(); ++i) names.push_back("stage" + std::to_string(i));
  }

  const auto found = first_regression(before, after, args.relative_threshold);
  if (args.json) {
    Json j;
    j["regressed"] = found.has_value();
    if (found) {
      j["index"] = found->index;
      j["stage"] = names[found->index];
      j["delta"] = found->delta;
    }
    std::cout << j.dump(-1, ' ', false, kJsonReplace) << "\n";
    return kExitOk;
  }
  if (!found) {
    std::cout << "No stage regressed (threshold " << fixed(100.0 * args.relative_threshold, 1)
              << "% over " << before.size() << " stages)\n";
    return kExitOk;
  }
  const auto i = found->index;
  std::cout << "First regression: stage " << i << " (" << names[i] << "): +" << found->delta
            << " (" << before[i] << " -> " << after[i] << ", threshold "
            << fixed(100.0 * args.relative_threshold, 1) << "%)\n";
  // Later stages past the limit are likely victims of the origin, not causes of their own.
  std::string victims;
  for (std::size_t k = i + 1; k < before.size(); ++k) {
    std::vector<double> b{before[k]}, a{after[k]};
    if (first_regression(b, a, args.relative_threshold)) {
      if (!victims.empty()) victims += ", ";
      victims += std::to_string(k) + " (" + names[k] + ")";
    }
  }
  if (!victims.empty()) std::cout << "Later regressed stages (likely victims): " << victims << "\n";
  return kExitOk;
}

int run_compare_runs(const CompareArgs& args);  // compare_runs.cc

int run_compare(const CompareArgs& args) {
  const bool vectors = !args.baseline_vector.empty() || !args.current_vector.empty();
  const bool runs = !args.baseline_dir.empty() || !args.current_dir.empty();
  if (vectors && runs)
    throw UsageError{"compare takes two run directories or --baseline-vector and "
                     "--current-vector, not both"};
  if (vectors) {
    if (args.baseline_vector.empty()) throw UsageError{"--current-vector needs --baseline-vector"};
    if (args.current_vector.empty()) throw UsageError{"--baseline-vector needs --current-vector"};
    if (!args.html.empty()) throw UsageError{"--html needs two run directories"};
    return run_compare_vectors(args);
  }
  if (args.current_dir.empty())
    throw UsageError{"compare needs BASELINE_RUN and CURRENT_RUN (two run directories), or "
                     "--baseline-vector and --current-vector"};
  return run_compare_runs(args);
}

}  // namespace laggard::cli
