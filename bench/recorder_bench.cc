// Cost of a section on the training thread: not sampled, sampled with the host clock, end_step.
#include <benchmark/benchmark.h>

#include "laggard/recorder.hpp"

namespace {

void BM_SectionNotSampled(benchmark::State& state) {
  laggard::Recorder r({10, {}, 4});
  const auto id = r.stage("forward");
  r.begin_step(1);  // not a multiple of 10
  for (auto _ : state) {
    laggard::Section s(r, id);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_SectionNotSampled);

void BM_SectionDisabled(benchmark::State& state) {
  laggard::Recorder r({0, {}, 4});
  const auto id = r.stage("forward");
  r.begin_step(0);
  for (auto _ : state) {
    laggard::Section s(r, id);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_SectionDisabled);

void BM_SectionSampledHostClock(benchmark::State& state) {
  laggard::Recorder r({1, {}, 4});
  const auto id = r.stage("forward");
  r.begin_step(0);
  for (auto _ : state) {
    laggard::Section s(r, id);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_SectionSampledHostClock);

// A whole sampled step of 8 stages: begin_step, 8 sections, end_step building the sample.
void BM_SampledStep8Stages(benchmark::State& state) {
  laggard::Recorder r({1, {3, 8, 3, "node-0", "pp0"}, 4});
  std::size_t sink = 0;
  r.on_sample([&sink](const laggard::StepSample& s) { sink += s.stages.size(); });
  laggard::Recorder::StageId ids[8];
  for (int i = 0; i < 8; ++i) ids[i] = r.stage("stage" + std::to_string(i));
  std::int64_t step = 0;
  for (auto _ : state) {
    r.begin_step(step++);
    for (auto id : ids) {
      laggard::Section s(r, id);
    }
    r.end_step();
  }
  benchmark::DoNotOptimize(sink);
}
BENCHMARK(BM_SampledStep8Stages);

}  // namespace

BENCHMARK_MAIN();
