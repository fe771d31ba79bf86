// Cost of the analysis per window at scale: 16,384 ranks x 16 stages.
//   BM_Evaluate/<ref>/<scenario>: evaluate_window into a reused Report; ref 0 mean, 1 median,
//     2 robust;
//     scenario 0 one slow rank (the others' extra wait hides in the mean), 1 half the ranks
//     waiting (8,192 waiting findings: the allocation-heavy case).
//   BM_EvaluateFresh/<scenario>: evaluate_window returning a new Report each time (mean).
//   BM_Observe/<scenario>/<rule>: Detector::observe (evaluate + persistence) into a reused
//     Report, of the window in columns (ColumnarWindow, made ahead as a producer that appends
//     each sample as it arrives hands it over); rule 0 the default options, 1 the RFC's rule.
//     Scenarios 0 and 1 observe one window again and again (it stays in the caches as far as
//     they hold it). Scenario 2 is scenario 0 with transient pauses: in each of 8 windows taken
//     in turn, 2 % of the (rank, stage) times are 1.5x to 3x (every stage then has ranks over
//     the rule, so none skips its MAD).
//     Scenario 3 is the 8 windows of scenario 2 without the pauses: what taking fresh windows
//     costs by itself.
//   BM_ObserveWindow/<scenario>/<rule>: the same from the Window (turned into columns first).
//   BM_Columns/<scenario>: turning the Window into columns alone (ColumnarWindow::assign).
//   Every rank's step_ms is its stages' time and about 0.5 ms more (the "untimed" stage).
//   BM_Median/<how>: the median of one stage's 16,384 times; 0 the sampled selection the
//     detector uses (median_of), 1 a copy and a quickselect (median_inplace), as before.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "analysis/median.hpp"
#include "laggard/detector.hpp"

namespace {

constexpr int kRanks = 16384;
constexpr int kStages = 16;
constexpr int kRanksPerHost = 8;
constexpr int kSlowRank = 1234;

laggard::Window make_window(int scenario, std::int64_t step, std::uint64_t seed = 12345) {
  static const char* const kNames[kStages] = {
      "dataloader", "forward",  "attention", "moe",      "backward", "communication",
      "optimizer",  "stage_07", "stage_08",  "stage_09", "stage_10", "stage_11",
      "stage_12",   "stage_13", "stage_14",  "stage_15"};
  std::uint64_t state = seed;
  auto noise = [&state] {  // splitmix64, uniform in [0, 1): an LCG's lattice would make a
                           // pattern no timer produces, and std::nth_element slow on it
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  };
  laggard::Window w;
  w.step = step;
  w.samples.resize(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    laggard::StepSample& s = w.samples[static_cast<std::size_t>(r)];
    s.rank = r;
    s.world_size = kRanks;
    s.step = step;
    char host[32];
    std::snprintf(host, sizeof host, "node-%05d", r / kRanksPerHost);
    s.host = host;
    s.stages.reserve(kStages);
    for (int i = 0; i < kStages; ++i) {
      laggard::StageTime st;
      st.name = kNames[i];
      st.kind = laggard::default_stage_kind(st.name);
      st.calls = 1;
      st.ms = (5.0 + 3.0 * i) * (1.0 + 0.02 * noise());
      s.stages.push_back(std::move(st));
    }
  }
  if (scenario != 1) {
    // One rank's forward is 1.5x; everyone else waits for it in communication.
    w.samples[kSlowRank].stages[1].ms *= 1.5;
    for (int r = 0; r < kRanks; ++r)
      if (r != kSlowRank) w.samples[static_cast<std::size_t>(r)].stages[5].ms += 4.0;
  } else {
    for (int r = 0; r < kRanks; r += 2) w.samples[static_cast<std::size_t>(r)].stages[5].ms *= 3.0;
  }
  if (scenario == 2)
    for (laggard::StepSample& s : w.samples)
      for (laggard::StageTime& st : s.stages)
        if (noise() < 0.02) st.ms *= 1.5 + 1.5 * noise();
  // A trainer's step takes longer than its sections: about 0.5 ms of every step is outside them,
  // which the detector compares as the stage "untimed" (a 17th column).
  for (laggard::StepSample& s : w.samples) {
    double timed = 0.0;
    for (const laggard::StageTime& st : s.stages) timed += st.ms;
    s.step_ms = timed + 0.5 * (1.0 + 0.02 * noise());
  }
  return w;
}

const laggard::Window& window(int scenario) {
  static const laggard::Window w0 = make_window(0, 100);
  static const laggard::Window w1 = make_window(1, 100);
  return scenario == 0 ? w0 : w1;
}

constexpr int kFreshWindows = 8;
// Window k % 8 of scenario 2 (with pauses) or 3 (the same without).
const laggard::Window& fresh_window(int scenario, int k) {
  auto make = [](int s) {
    std::vector<laggard::Window> out;
    for (int i = 0; i < kFreshWindows; ++i)
      out.push_back(make_window(s, 100 + i, 12345 + 7919 * static_cast<std::uint64_t>(i)));
    return out;
  };
  static const std::vector<laggard::Window> paused = make(2), plain = make(3);
  return (scenario == 2 ? paused : plain)[static_cast<std::size_t>(k % kFreshWindows)];
}

void BM_Evaluate(benchmark::State& state) {
  laggard::DetectorOptions options;
  options.ref = static_cast<laggard::Reference>(state.range(0));
  const laggard::Window& w = window(static_cast<int>(state.range(1)));
  std::size_t findings = 0;
  laggard::Report r;  // reused window after window, as analyze and the live analyzer do
  for (auto _ : state) {
    laggard::evaluate_window(w, options, r);
    findings = r.stragglers.size() + r.waiting.size();
    benchmark::DoNotOptimize(r);
  }
  state.counters["findings"] = static_cast<double>(findings);
  state.SetItemsProcessed(state.iterations() * kRanks * kStages);
  state.SetLabel(laggard::to_string(options.ref));
}
BENCHMARK(BM_Evaluate)->ArgsProduct({{0, 1, 2}, {0, 1}})->Unit(benchmark::kMillisecond);

// The returning form: a fresh Report (megabytes of per-rank times) allocated for every window.
void BM_EvaluateFresh(benchmark::State& state) {
  laggard::DetectorOptions options;
  const laggard::Window& w = window(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    laggard::Report r = laggard::evaluate_window(w, options);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(state.iterations() * kRanks * kStages);
}
BENCHMARK(BM_EvaluateFresh)->Arg(0)->Unit(benchmark::kMillisecond);

// The windows of `window` and `fresh_window` in columns, as a producer that appends each sample as
// it arrives (ColumnarWindow::add) hands them to the detector.
const laggard::ColumnarWindow& columns_of(const laggard::Window& w) {
  static std::vector<std::pair<const laggard::Window*, laggard::ColumnarWindow>> made;
  for (const auto& [from, columns] : made)
    if (from == &w) return columns;
  made.emplace_back(&w, laggard::ColumnarWindow{});
  made.back().second.assign(w);
  return made.back().second;
}

// Observes the windows `next()` gives (the first, outside the timing, sizes the histories) with
// the defaults or, with a second argument of 1, the RFC's threshold rule.
template <class Next>
void observe_windows(benchmark::State& state, Next next) {
  laggard::Detector detector(state.range(1) ? laggard::DetectorOptions::rfc()
                                            : laggard::DetectorOptions{});
  laggard::Report r;
  detector.observe(next(), r);
  for (auto _ : state) {
    detector.observe(next(), r);
    benchmark::DoNotOptimize(r);
  }
  state.counters["confirmed"] = static_cast<double>(detector.confirmed().size());
  state.counters["findings"] = static_cast<double>(r.stragglers.size() + r.waiting.size());
  state.SetItemsProcessed(state.iterations() * kRanks * kStages);
}

// Detector::observe with the defaults (the sequential method: a log and five CUSUMs per rank and
// stage, a median per stage) and, with a second argument of 1, the RFC's threshold rule, over
// windows in columns (observe(const ColumnarWindow&)), made before the timing.
void BM_Observe(benchmark::State& state) {
  const int scenario = static_cast<int>(state.range(0));
  if (scenario >= 2)
    for (int k = 0; k < kFreshWindows; ++k) columns_of(fresh_window(scenario, k));
  else
    columns_of(window(scenario));
  observe_windows(state, [scenario, k = 0]() mutable -> const laggard::ColumnarWindow& {
    return columns_of(scenario >= 2 ? fresh_window(scenario, k++) : window(scenario));
  });
}
BENCHMARK(BM_Observe)->ArgsProduct({{0, 1, 2, 3}, {0, 1}})->Unit(benchmark::kMillisecond);

// The same from Windows (observe(const Window&)): each window turned into columns first.
void BM_ObserveWindow(benchmark::State& state) {
  const int scenario = static_cast<int>(state.range(0));
  observe_windows(state, [scenario, k = 0]() mutable -> const laggard::Window& {
    return scenario >= 2 ? fresh_window(scenario, k++) : window(scenario);
  });
}
BENCHMARK(BM_ObserveWindow)->ArgsProduct({{0, 1, 2, 3}, {0, 1}})->Unit(benchmark::kMillisecond);

// Turning a Window into columns alone (ColumnarWindow::assign): scenario 0 one window again and
// again, 3 the eight fresh windows in turn.
void BM_Columns(benchmark::State& state) {
  const int scenario = static_cast<int>(state.range(0));
  laggard::ColumnarWindow columns;
  int k = 0;
  for (auto _ : state) {
    columns.assign(scenario >= 2 ? fresh_window(scenario, k++) : window(scenario));
    benchmark::DoNotOptimize(columns);
  }
  state.SetItemsProcessed(state.iterations() * kRanks * kStages);
}
BENCHMARK(BM_Columns)->Arg(0)->Arg(3)->Unit(benchmark::kMillisecond);

void BM_Median(benchmark::State& state) {
  const laggard::Window& w = window(0);
  std::vector<double> column;
  for (const laggard::StepSample& s : w.samples) column.push_back(s.stages[1].ms);  // forward
  std::vector<double> scratch(column.size());
  const bool sampled = state.range(0) == 0;
  for (auto _ : state) {
    double m;
    if (sampled) {
      m = laggard::detail::median_of(column.data(), column.size(), scratch);
    } else {
      std::copy(column.begin(), column.end(), scratch.begin());
      m = laggard::detail::median_inplace(scratch.data(), scratch.size());
    }
    benchmark::DoNotOptimize(m);
  }
  state.SetItemsProcessed(state.iterations() * kRanks);
  state.SetLabel(sampled ? "sampled selection" : "copy + quickselect");
}
BENCHMARK(BM_Median)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
