// The analysis rank's work per window at scale, end to end: receiving the window's batches from
// its children in the gather tree (the "local" transport's inboxes), decoding them, assembling
// the window, the detector and run summary (RunAnalysis::add), the metrics, the live metrics
// and the reports.jsonl line. Target (docs/notes/live-scale.md): <= 20 ms at 16,384 ranks x 16 stages.
//
// The batches are made outside the timed region: 512 host leaders of 32 ranks each (the
// children of the root at fan-out 512; a real tree puts fewer children under the root and more
// levels above the leaves, which changes what the root receives per window by nothing but the
// number of messages).
#include <benchmark/benchmark.h>

#include <time.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "laggard/analyzer.hpp"
#include "laggard/summary.hpp"
#include "laggard/transport.hpp"
#include "live/error_counter.hpp"
#include "live/gather.hpp"
#include "live/report_json.hpp"
#include "live/window_assembler.hpp"
#include "transport/sample_codec.hpp"

namespace {

using laggard::StepSample;

struct Scene {
  int ranks, stages, per_leader;
  std::vector<std::string> names;
  std::mt19937_64 rng{7};

  StepSample sample(int rank, std::int64_t step) {
    StepSample s;
    s.rank = rank;
    s.world_size = ranks;
    s.step = step;
    s.host = "node-" + std::to_string(rank / 8);
    s.cohort = "dp";
    std::normal_distribution<double> noise(1.0, 0.02);
    double total = 0;
    for (int i = 0; i < stages; ++i) {
      laggard::StageTime t;
      t.name = names[static_cast<std::size_t>(i)];
      t.kind = i == stages - 1 ? laggard::StageKind::communication : laggard::StageKind::compute;
      t.ms = (5.0 + i) * noise(rng) * (rank == 1234 && i == 2 ? 1.5 : 1.0);
      t.calls = 1;
      total += t.ms;
      s.stages.push_back(std::move(t));
    }
    s.step_ms = total;
    return s;
  }
};

void BM_AnalysisRankWindow(benchmark::State& state) {
  Scene scene{static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 32, {}};
  for (int i = 0; i < scene.stages; ++i) scene.names.push_back("stage_" + std::to_string(i));
  const int leaders = scene.ranks / scene.per_leader;

  // The root's transport and one per host leader, on one "local" channel; fan-out `leaders`
  // puts every leader directly under the root.
  const std::string channel = "gather-bench-" + std::to_string(scene.ranks);
  auto setup = [&](int rank) {
    laggard::TransportSetup t;
    t.rank.rank = rank;
    t.rank.world_size = scene.ranks;
    t.channel = channel;
    t.ranks_per_host = scene.per_leader;
    t.fan_out = leaders;
    return t;
  };
  auto root_transport = laggard::make_transport("local", setup(0));
  std::vector<std::unique_ptr<laggard::Transport>> senders;
  std::vector<laggard::wire::Encoder> encoders(static_cast<std::size_t>(leaders));
  for (int l = 1; l < leaders; ++l)
    senders.push_back(laggard::make_transport("local", setup(l * scene.per_leader)));

  laggard::ErrorCounter errors("", 60.0);
  laggard::Gather::Options go;
  go.max_unacked_samples = 1u << 20;
  laggard::Gather gather(*root_transport, 0, scene.ranks, go, errors);
  laggard::WindowAssembler assembler(scene.ranks, std::chrono::seconds(5), 64);
  // As the Analyzer does: per-rank onsets only up to AnalyzerOptions::rank_onsets_max_ranks.
  laggard::OnsetOptions onsets;
  onsets.per_rank = scene.ranks <= laggard::AnalyzerOptions{}.rank_onsets_max_ranks;
  laggard::RunAnalysis analysis({}, onsets);
  std::vector<StepSample> spare;
  laggard::Window window;
  std::vector<StepSample> received;
  std::vector<laggard::wire::RankCounts> counts;
  std::string line;
  std::uint64_t seq = 0;
  std::int64_t step = 0;
  std::size_t bytes = 0, windows = 0;
  // Phases in this thread's CPU time: on a machine shared with other work, wall time includes
  // the waits for a core.
  const auto cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
  };
  double receive_ns = 0, analysis_ns = 0, report_ns = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ++seq;
    step += 10;
    std::vector<std::string> messages(static_cast<std::size_t>(leaders));
    for (int l = 1; l < leaders; ++l) {
      auto& enc = encoders[static_cast<std::size_t>(l)];
      enc.begin(seq);
      for (int r = l * scene.per_leader; r < (l + 1) * scene.per_leader; ++r)
        enc.add(scene.sample(r, step));
      messages[static_cast<std::size_t>(l)] = enc.message();
      enc.commit();
      bytes += enc.message().size();
    }
    // The root's host: its own sample and its 31 members' (their 31 small messages, 0.2 % of
    // the window, are taken as received).
    std::vector<StepSample> own;
    for (int r = 0; r < scene.per_leader; ++r) own.push_back(scene.sample(r, step));
    for (int l = 1; l < leaders; ++l)
      senders[static_cast<std::size_t>(l - 1)]->send(0, messages[static_cast<std::size_t>(l)]);
    state.ResumeTiming();

    const auto now = std::chrono::steady_clock::now();
    const double t0 = cpu();
    for (StepSample& s : own) assembler.add(std::move(s), now);
    std::size_t used = 0;
    counts.clear();
    if (!spare.empty()) {  // decode into the buffers of samples analysed already
      received.clear();
      received.swap(spare);
    }
    gather.tick(now, false, received, used, counts);  // receive and decode
    for (std::size_t i = 0; i < used; ++i) assembler.add(std::move(received[i]), now);
    bool complete = false;
    while (assembler.next(window, complete, now, false)) {
      const double t2 = cpu();
      laggard::Report report = analysis.add(window);
      for (StepSample& s : window.samples) spare.push_back(std::move(s));
      window.samples.clear();
      const double t3 = cpu();
      laggard::Metrics metrics = report.metrics(0);
      laggard::add_live_metrics(report, 0.0, 0.0, 0.0, metrics);
      line.clear();
      laggard::append_report_json(window.step, metrics, report, line);
      benchmark::DoNotOptimize(line.data());
      ++windows;
      if (!complete) state.SkipWithError("an incomplete window");
      receive_ns += t2 - t0;
      analysis_ns += t3 - t2;
      report_ns += cpu() - t3;
    }
  }
  const auto per = [&](double total) { return total / 1e6 / static_cast<double>(windows); };
  state.counters["cpu_receive_assemble_ms"] = per(receive_ns);
  state.counters["cpu_analysis_ms"] = per(analysis_ns);
  state.counters["cpu_report_ms"] = per(report_ns);
  state.counters["windows"] = static_cast<double>(windows);
  state.counters["bytes_per_rank_step"] =
      static_cast<double>(bytes) / static_cast<double>(state.iterations()) /
      static_cast<double>(scene.ranks - scene.per_leader);
}
BENCHMARK(BM_AnalysisRankWindow)
    ->Args({16384, 16})
    ->Args({4096, 16})
    ->Args({1024, 8})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

// A rank's own cost per sampled step on its background thread: encoding one sample of 16
// stages into the batch for its parent (names known to the link already).
void BM_EncodeSample(benchmark::State& state) {
  Scene scene{16384, static_cast<int>(state.range(0)), 32, {}};
  for (int i = 0; i < scene.stages; ++i) scene.names.push_back("stage_" + std::to_string(i));
  const StepSample s = scene.sample(77, 10);
  laggard::wire::Encoder enc;
  enc.begin(1);
  enc.add(s);
  enc.commit();
  std::uint64_t seq = 1;
  for (auto _ : state) {
    enc.begin(++seq);
    enc.add(s);
    benchmark::DoNotOptimize(enc.message().data());
    enc.commit();
  }
  state.counters["bytes"] = static_cast<double>(enc.message().size());
}
BENCHMARK(BM_EncodeSample)->Arg(8)->Arg(16);

}  // namespace

BENCHMARK_MAIN();
