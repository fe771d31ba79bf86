// Cost of the C++ live API on the training thread: sections and the sampled end_step that hands
// a sample of 8 stages to laggard's background thread (target: <= 5 us, issue 6).
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "laggard/analyzer.hpp"

namespace {

constexpr int kStages = 8;
constexpr std::size_t kRing = 4096;
constexpr benchmark::IterationCount kSampledIterations = 20000;

// The rest of a training step, untimed: real steps take milliseconds, so the background thread
// drains the ring long before it fills. Without it the benchmark would outrun the background
// thread and measure the drop path.
void rest_of_step() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
  while (std::chrono::steady_clock::now() < until) {
  }
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// A side channel that takes every batch and discards it: the benchmarked rank is one of the
// many that only send (rank 1 of 2), and its background thread keeps up, so the push path into
// the ring is measured, not the (cheaper) drop path. The counter `dropped` shows it.
class DiscardingTransport final : public laggard::Transport {
 public:
  const char* name() const noexcept override { return "discard"; }
  int rank() const noexcept override { return 1; }
  int world_size() const noexcept override { return 2; }
  laggard::TreeLinks links() const override { return laggard::TreeLinks{0, {}}; }
  bool send(int, std::string&) override { return true; }
  void receive(std::vector<laggard::TransportMessage>&) override {}
  bool healthy() const override { return true; }
  void fail() override {}
  void shutdown() override {}
};

laggard::AnalyzerOptions options(int interval) {
  static const bool registered = [] {
    laggard::register_transport("discard", [](const laggard::TransportSetup&) {
      return std::make_unique<DiscardingTransport>();
    });
    return true;
  }();
  (void)registered;
  laggard::AnalyzerOptions o;
  o.enabled = true;
  o.interval = interval;
  o.rank = {1, 2, 1, "node-0", "pp0"};
  o.transport = "discard";
  o.queue_capacity = kRing;
  o.poll_interval_s = 0.001;
  return o;
}

void register_stages(laggard::Analyzer& an, laggard::Analyzer::StageId (&ids)[kStages]) {
  const char* names[kStages] = {"dataloader", "forward",   "backward", "optimizer",
                                "attention",  "moe",       "allreduce", "communication"};
  for (int i = 0; i < kStages; ++i) ids[i] = an.stage(names[i]);
}

void BM_AnalyzerSectionDisabled(benchmark::State& state) {
  laggard::Analyzer an;  // enabled = false
  an.begin_step(0);
  for (auto _ : state) {
    laggard::Analyzer::Section s(an, 0);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_AnalyzerSectionDisabled);

void BM_AnalyzerSectionNotSampled(benchmark::State& state) {
  laggard::Analyzer an(options(10));
  const auto id = an.stage("forward");
  an.begin_step(1);  // not a multiple of 10
  for (auto _ : state) {
    laggard::Analyzer::Section s(an, id);
    benchmark::ClobberMemory();
  }
  an.end_step();
}
BENCHMARK(BM_AnalyzerSectionNotSampled);

void BM_AnalyzerStepNotSampled8Stages(benchmark::State& state) {
  laggard::Analyzer an(options(1000000000));
  laggard::Analyzer::StageId ids[kStages];
  register_stages(an, ids);
  std::int64_t step = 1;
  for (auto _ : state) {
    an.begin_step(step++);
    for (auto id : ids) {
      laggard::Analyzer::Section s(an, id);
      benchmark::ClobberMemory();
    }
    an.end_step();
  }
}
BENCHMARK(BM_AnalyzerStepNotSampled8Stages);

void BM_AnalyzerSectionSampled(benchmark::State& state) {
  laggard::Analyzer an(options(1));
  const auto id = an.stage("forward");
  an.begin_step(0);
  for (auto _ : state) {
    laggard::Analyzer::Section s(an, id);
    benchmark::ClobberMemory();
  }
  an.end_step();
}
BENCHMARK(BM_AnalyzerSectionSampled);

// The target: end_step of a sampled step with 8 stages, timed alone (manual time; the two
// steady_clock reads around it add a few tens of nanoseconds).
void BM_AnalyzerSampledEndStep8Stages(benchmark::State& state) {
  laggard::Analyzer an(options(1));
  laggard::Analyzer::StageId ids[kStages];
  register_stages(an, ids);
  std::int64_t step = 0;
  for (auto _ : state) {
    an.begin_step(step++);
    for (auto id : ids) {
      laggard::Analyzer::Section s(an, id);
    }
    const auto t0 = std::chrono::steady_clock::now();
    an.end_step();
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(seconds(t1 - t0));
    rest_of_step();
  }
  state.counters["dropped"] = static_cast<double>(an.counters().queue_dropped);
  an.close();
}
BENCHMARK(BM_AnalyzerSampledEndStep8Stages)->UseManualTime()->Iterations(kSampledIterations);

// A whole step of 8 stages, laggard's part only: begin_step, 8 sections, end_step. Every step
// sampled (interval 1), and one in ten (the default interval 10: the amortized cost per step).
void BM_AnalyzerStep8Stages(benchmark::State& state) {
  laggard::Analyzer an(options(static_cast<int>(state.range(0))));
  laggard::Analyzer::StageId ids[kStages];
  register_stages(an, ids);
  std::int64_t step = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    an.begin_step(step++);
    for (auto id : ids) {
      laggard::Analyzer::Section s(an, id);
    }
    an.end_step();
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(seconds(t1 - t0));
    rest_of_step();
  }
  state.counters["dropped"] = static_cast<double>(an.counters().queue_dropped);
  an.close();
}
BENCHMARK(BM_AnalyzerStep8Stages)
    ->ArgName("interval")
    ->Arg(1)
    ->Arg(10)
    ->UseManualTime()
    ->Iterations(kSampledIterations);

}  // namespace

BENCHMARK_MAIN();
