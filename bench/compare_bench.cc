// Run comparison with many stage names: RunProfile::add over two runs, then compare_runs.
//
//   compare_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Each run has N distinct stage names over 20 sampled steps of 2 ranks (every name in every
// step), half of them shared with the other run: the comparison tests N/2 stages (a bootstrap
// each) and N rank-stage pairs, and lists N/2 names only in each run. Before the stage order
// became a linked list with an index, placing and sorting names by linear search made 40,000
// names take 30 s. Time per comparison (both profiles built and compared); the counter is stage
// names per second.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "laggard/compare.hpp"

namespace {

using laggard::StageKind;

laggard::RunProfile profile(int names, int offset, int steps, int ranks) {
  laggard::RunProfile p;
  std::vector<std::string> stage_names;
  for (int i = 0; i < names; ++i) stage_names.push_back("stage" + std::to_string(offset + i));
  for (int step = 0; step < steps; ++step) {
    laggard::Window w;
    w.step = 10 * step;
    for (int r = 0; r < ranks; ++r) {
      laggard::StepSample s;
      s.rank = r;
      s.world_size = ranks;
      s.step = w.step;
      s.step_ms = 100.0;
      for (int i = 0; i < names; ++i)
        s.stages.push_back({stage_names[static_cast<std::size_t>(i)], StageKind::compute,
                            1.0 + 0.01 * ((i * 7 + step * 13 + r) % 17), 1});
      w.samples.push_back(std::move(s));
    }
    p.add(w);
  }
  return p;
}

void BM_CompareManyStages(benchmark::State& state) {
  const int names = static_cast<int>(state.range(0));
  for (auto _ : state) {
    const laggard::RunProfile b = profile(names, 0, 20, 2);
    const laggard::RunProfile c = profile(names, names / 2, 20, 2);
    const laggard::Comparison cmp = laggard::compare_runs(b, c);  // the CLI's defaults
    benchmark::DoNotOptimize(cmp.stages.data());
  }
  state.counters["names/s"] = benchmark::Counter(
      static_cast<double>(names) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_CompareManyStages)->Arg(1000)->Arg(10000)->Arg(40000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
