// Ingest throughput: how fast laggard reads per-rank sample logs (JSON Lines).
//
//   ingest_bench --benchmark_filter=SampleFileReader
//
// The inputs are generated once per process in a temp directory (removed at exit): one ~64 MiB
// rank file, and a run of 64 rank files of ~1 MiB each. They stay in the page cache, so the
// figures are parse throughput, not disk speed. Target: >= 300 MB/s on one core.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "laggard/jsonl.hpp"
#include "laggard/summary.hpp"

namespace {

namespace fs = std::filesystem;
using laggard::StageKind;

constexpr std::uint64_t kSingleFileBytes = std::uint64_t{64} << 20;
constexpr int kRunRanks = 64;
constexpr std::uint64_t kRunFileBytes = std::uint64_t{1} << 20;

// A sample as a trainer would log it: 8 stages, times with noise, realistic names.
laggard::StepSample realistic_sample(int rank, std::int64_t step, std::mt19937_64& rng) {
  std::normal_distribution<double> noise(1.0, 0.03);
  laggard::StepSample s;
  s.rank = rank;
  s.world_size = 512;
  s.step = step;
  s.host = "gpu-node-" + std::to_string(rank / 8);
  s.cohort = "pp" + std::to_string(rank % 4);
  s.work = 4096.0 * 8;
  struct Stage {
    const char* name;
    StageKind kind;
    double ms;
    std::uint32_t calls;
  };
  static const Stage kStages[] = {
      {"dataloader", StageKind::data, 2.1, 1},
      {"forward", StageKind::compute, 31.2, 4},
      {"attention", StageKind::compute, 12.7, 32},
      {"moe", StageKind::compute, 8.4, 16},
      {"backward", StageKind::compute, 63.9, 4},
      {"communication", StageKind::communication, 9.1, 2},
      {"optimizer", StageKind::compute, 4.6, 1},
      {"logging", StageKind::other, 0.35, 1},
  };
  double total = 0;
  for (const Stage& st : kStages) {
    const double ms = st.ms * noise(rng);
    s.stages.push_back({st.name, st.kind, ms, st.calls});
    total += ms;
  }
  s.step_ms = total * 1.02;
  return s;
}

// Writes samples of `rank` with increasing steps until the file has at least `bytes` bytes.
void write_rank_file(const fs::path& path, int rank, std::uint64_t bytes) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(rank) + 1);
  std::ofstream out(path, std::ios::binary);
  std::string buffer;
  std::uint64_t written = 0;
  for (std::int64_t step = 0; written < bytes; ++step) {
    buffer.clear();
    append_sample_json(realistic_sample(rank, step, rng), buffer);
    out << buffer;
    written += buffer.size();
  }
}

struct Inputs {
  fs::path dir;
  fs::path single_file;
  std::uint64_t single_file_bytes = 0;
  fs::path run_dir;
  std::uint64_t run_bytes = 0;

  Inputs() {
    // LAGGARD_INGEST_RUN_DIR: the run (BM_RunReader, BM_AnalyzeRun) is that directory's rank
    // files, e.g. one of bench/make_synthetic_run.py's, instead of a generated one.
    if (const char* given = std::getenv("LAGGARD_INGEST_RUN_DIR")) {
      run_dir = given;
      for (const auto& entry : fs::directory_iterator(run_dir))
        if (entry.path().extension() == ".jsonl") run_bytes += entry.file_size();
    }
    dir = fs::temp_directory_path() / ("laggard-ingest-bench-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    single_file = dir / "rank-0.jsonl";
    write_rank_file(single_file, 0, kSingleFileBytes);
    single_file_bytes = fs::file_size(single_file);
    if (!run_dir.empty()) return;
    run_dir = dir / "run";
    fs::create_directories(run_dir);
    for (int r = 0; r < kRunRanks; ++r) {
      const fs::path p = run_dir / ("rank-" + std::to_string(r) + ".jsonl");
      write_rank_file(p, r, kRunFileBytes);
      run_bytes += fs::file_size(p);
    }
  }
  ~Inputs() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const Inputs& inputs() {
  static const Inputs instance;  // built on first use, removed at exit
  return instance;
}

void BM_SampleFileReader(benchmark::State& state) {
  const Inputs& in = inputs();
  const auto chunk = static_cast<std::size_t>(state.range(0));
  std::size_t samples = 0;
  for (auto _ : state) {
    laggard::SampleFileReader reader(in.single_file.string(), chunk);
    laggard::StepSample sample;
    while (reader.next(sample)) ++samples;
    if (reader.malformed() != 0) state.SkipWithError("malformed lines in generated input");
    benchmark::DoNotOptimize(sample);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * in.single_file_bytes));
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(samples), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SampleFileReader)->Arg(64 << 10)->Arg(1 << 20)->Unit(benchmark::kMillisecond);

laggard::RunReaderOptions reader_options(std::int64_t workers) {
  laggard::RunReaderOptions o;
  if (workers >= 0) o.workers = static_cast<unsigned>(workers);
  return o;
}

// state.range(0): RunReaderOptions::workers (-1: the reader's choice, kAuto).
void BM_RunReader(benchmark::State& state) {
  const Inputs& in = inputs();
  std::size_t samples = 0;
  unsigned workers = 0;
  for (auto _ : state) {
    laggard::RunReader reader(in.run_dir.string(), reader_options(state.range(0)));
    workers = reader.workers();
    laggard::Window window;
    while (reader.next(window)) samples += window.samples.size();
    if (reader.stats().malformed != 0) state.SkipWithError("malformed lines in generated input");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * in.run_bytes));
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(samples), benchmark::Counter::kIsRate);
  state.counters["files"] = kRunRanks;
  state.counters["workers"] = workers;
}
// Real time: with worker threads, the CPU time of the calling thread says little.
BENCHMARK(BM_RunReader)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Arg(-1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// `laggard analyze`'s path without printing: read, parse, merge, detect, onsets, summary.
// state.range(0): reader workers (RunReaderOptions); state.range(1): 0 the default detector,
// 1 the RFC's rule (--preset rfc).
void BM_AnalyzeRun(benchmark::State& state) {
  const Inputs& in = inputs();
  const auto options =
      state.range(1) ? laggard::DetectorOptions::rfc() : laggard::DetectorOptions{};
  for (auto _ : state) {
    laggard::RunReader reader(in.run_dir.string(), reader_options(state.range(0)));
    laggard::RunAnalysis analysis(options);
    laggard::Window window;
    while (reader.next(window)) analysis.add(window);
    benchmark::DoNotOptimize(analysis.summary());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * in.run_bytes));
}
BENCHMARK(BM_AnalyzeRun)
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Parsing alone, from lines already in memory (SampleParser copies each into a padded buffer).
void BM_SampleParser(benchmark::State& state) {
  std::mt19937_64 rng(7);
  std::vector<std::string> lines;
  std::uint64_t bytes = 0;
  for (int i = 0; i < 1024; ++i) {
    lines.emplace_back();
    append_sample_json(realistic_sample(3, i, rng), lines.back());
    bytes += lines.back().size();
  }
  laggard::SampleParser parser;
  laggard::StepSample sample;
  std::string error;
  for (auto _ : state) {
    for (const auto& line : lines)
      if (!parser.parse(line, sample, error)) state.SkipWithError(error.c_str());
    benchmark::DoNotOptimize(sample);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * lines.size()));
}
BENCHMARK(BM_SampleParser);

void BM_AppendSampleJson(benchmark::State& state) {
  std::mt19937_64 rng(7);
  const laggard::StepSample sample = realistic_sample(3, 120, rng);
  std::string out;
  std::uint64_t bytes = 0;
  for (auto _ : state) {
    out.clear();
    append_sample_json(sample, out);
    bytes += out.size();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_AppendSampleJson);

}  // namespace

BENCHMARK_MAIN();
