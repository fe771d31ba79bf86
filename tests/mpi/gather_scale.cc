// The gather tree at scale with real processes: N MPI ranks (mpirun), hosts of --ranks-per-host
// ranks (forced, since all ranks share this machine) and leaders --fan-out to a leader, so the
// samples of most ranks travel 3 or more hops. Every rank samples every step with --stages
// stages, one rank is slow in one stage; the analysis rank prints what it got, every rank what
// it sent. tests/mpi/check_scale.cmake checks that every window arrived complete, in order, and
// that the slow rank was confirmed.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "laggard/mpi.hpp"

namespace {

int arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int steps = arg(argc, argv, "--steps", 30);
  const int stages = arg(argc, argv, "--stages", 16);
  const int slow_rank = world - 1;

  laggard::AnalyzerOptions o;
  o.enabled = true;
  o.interval = 1;
  laggard::use_mpi(o, MPI_COMM_WORLD);
  o.ranks_per_host = arg(argc, argv, "--ranks-per-host", 4);
  o.fan_out = arg(argc, argv, "--fan-out", 2);
  o.rank.host = "host-" + std::to_string(rank / o.ranks_per_host);
  o.poll_interval_s = 0.02;  // hundreds of ranks share two cores
  o.window_timeout_s = 30.0;  // no window may be released incomplete while ranks lag
  o.max_pending_windows = static_cast<std::size_t>(steps) + 1;
  o.close_timeout_s = 40.0;
  std::mutex mu;
  std::vector<std::int64_t> reported;
  o.sinks.push_back([&](std::int64_t step, const laggard::Metrics&) {
    std::lock_guard<std::mutex> lock(mu);
    reported.push_back(step);
  });
  laggard::Analyzer an(o);
  std::vector<laggard::Analyzer::StageId> ids;
  for (int s = 0; s < stages; ++s) ids.push_back(an.stage("stage_" + std::to_string(s)));
  for (int step = 0; step < steps; ++step) {
    an.begin_step(step);
    for (int s = 0; s < stages; ++s)
      an.add(ids[static_cast<std::size_t>(s)],
             5.0 + s + 0.01 * (rank % 7) + (rank == slow_rank && s == 2 ? 4.0 : 0.0));
    an.end_step();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  an.close();
  const auto c = an.counters();
  std::printf("rank %d: sent %llu dropped %llu forwarded %llu errors %llu\n", rank,
              static_cast<unsigned long long>(c.samples_sent),
              static_cast<unsigned long long>(c.gather_dropped),
              static_cast<unsigned long long>(c.forwarded_samples),
              static_cast<unsigned long long>(c.errors));
  if (an.is_analysis_rank()) {
    bool in_order = true;
    for (std::size_t i = 0; i < reported.size(); ++i)
      in_order = in_order && reported[i] == static_cast<std::int64_t>(i);
    const auto summary = an.summary();
    std::string confirmed;
    for (const auto& f : summary.stragglers)
      confirmed += std::to_string(f.rank) + ":" + f.stage + " ";
    std::printf("analysis: ranks %d windows %llu incomplete %llu received %llu late %llu "
                "reports %zu in_order %d confirmed %s\n",
                world, static_cast<unsigned long long>(c.windows),
                static_cast<unsigned long long>(c.incomplete_windows),
                static_cast<unsigned long long>(c.samples_received),
                static_cast<unsigned long long>(c.late_samples), reported.size(),
                in_order ? 1 : 0, confirmed.c_str());
  }
  std::fflush(stdout);
  MPI_Finalize();
  return 0;
}
