// A simulated data-parallel training job that laggard watches over MPI.
//
//   mpirun -np 4 --oversubscribe ./laggard_mpi_example --slow-rank 2 --slow-stage forward
//
// Every rank "computes" each stage by sleeping for its nominal time, then waits for the slowest
// rank in an MPI_Allreduce on the application's communicator (the gradient all-reduce), so one
// slow rank makes every other rank wait in `communication`. laggard samples every interval-th
// step, sends the samples to rank 0 over its own duplicate of the communicator, and rank 0
// prints the verdicts: the slow rank and stage, told apart from the ranks that only wait.
//
// --fail-side-channel-at STEP kills rank 0's side channel at that step (a failure drill): every
// rank must still finish its steps, the others with warnings that the analysis rank went quiet.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "laggard/laggard.hpp"
#include "laggard/mpi.hpp"

namespace {

struct Args {
  int steps = 100;
  int interval = 5;
  int slow_rank = 2;
  std::string slow_stage = "forward";
  double slow_factor = 1.5;
  int slow_from = 0;  // the slowdown starts at this step
  int fail_side_channel_at = -1;
  std::string log_dir;
  std::string thread_level = "multiple";
  double ms_scale = 1.0;
  double side_channel_timeout_s = 30.0;
  double close_timeout_s = 10.0;
  bool close_before_finalize = true;  // --finalize-first 1: forget close(), as programs do
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: laggard_mpi_example [--steps N] [--interval N] [--slow-rank R|-1]\n"
               "  [--slow-stage NAME] [--slow-factor F] [--slow-from STEP]\n"
               "  [--fail-side-channel-at STEP] [--log-dir DIR]\n"
               "  [--thread-level multiple|serialized|funneled|single] [--ms-scale F]\n"
               "  [--side-channel-timeout S] [--close-timeout S] [--finalize-first 0|1]\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const char* v = argv[++i];
    if (flag == "--steps") a.steps = std::atoi(v);
    else if (flag == "--interval") a.interval = std::atoi(v);
    else if (flag == "--slow-rank") a.slow_rank = std::atoi(v);
    else if (flag == "--slow-stage") a.slow_stage = v;
    else if (flag == "--slow-factor") a.slow_factor = std::atof(v);
    else if (flag == "--slow-from") a.slow_from = std::atoi(v);
    else if (flag == "--fail-side-channel-at") a.fail_side_channel_at = std::atoi(v);
    else if (flag == "--log-dir") a.log_dir = v;
    else if (flag == "--thread-level") a.thread_level = v;
    else if (flag == "--ms-scale") a.ms_scale = std::atof(v);
    else if (flag == "--side-channel-timeout") a.side_channel_timeout_s = std::atof(v);
    else if (flag == "--close-timeout") a.close_timeout_s = std::atof(v);
    else if (flag == "--finalize-first") a.close_before_finalize = std::atoi(v) == 0;
    else usage(("unknown flag " + flag).c_str());
  }
  return a;
}

int thread_level(const std::string& name) {
  if (name == "multiple") return MPI_THREAD_MULTIPLE;
  if (name == "serialized") return MPI_THREAD_SERIALIZED;
  if (name == "funneled") return MPI_THREAD_FUNNELED;
  if (name == "single") return MPI_THREAD_SINGLE;
  usage(("unknown thread level " + name).c_str());
}

// The simulated compute of one stage: a sleep, so that 4 ranks on 2 cores keep their timing.
void work(double ms) {
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

struct Stage {
  const char* name;
  double ms;
};

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, thread_level(args.thread_level), &provided);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  laggard::AnalyzerOptions opt;
  opt.enabled = true;
  opt.interval = args.interval;
  laggard::use_mpi(opt, MPI_COMM_WORLD);  // laggard duplicates it; its traffic never mixes with ours
  opt.rank.cohort = "dp";
  if (!args.log_dir.empty()) opt.log_dir = args.log_dir;
  opt.side_channel_timeout_s = args.side_channel_timeout_s;
  opt.close_timeout_s = args.close_timeout_s;
  opt.window_timeout_s = 2.0;
  // Verdicts as they are confirmed: the sink runs on rank 0's background thread.
  std::set<std::string> announced;
  opt.sinks.push_back([&announced](std::int64_t step, const laggard::Metrics& m) {
    auto it = m.find("straggler/confirmed");
    if (it == m.end()) return;
    std::stringstream list(std::get<std::string>(it->second));
    std::string item;
    while (std::getline(list, item, ',')) {
      if (item.empty() || !announced.insert(item).second) continue;
      const auto colon = item.find(':');
      std::printf("step %lld: confirmed straggler: rank %s in %s\n", static_cast<long long>(step),
                  item.substr(0, colon).c_str(), item.substr(colon + 1).c_str());
      std::fflush(stdout);
    }
  });
  laggard::Analyzer an(opt);

  const std::vector<Stage> stages = {
      {"dataloader", 1.0}, {"forward", 8.0}, {"backward", 12.0}, {"optimizer", 2.0}};
  std::vector<laggard::Analyzer::StageId> ids;
  for (const Stage& s : stages) ids.push_back(an.stage(s.name));
  const auto comm_id = an.stage("communication");
  std::vector<float> grads(4096, 1.0f);
  std::vector<float> reduced(grads.size());

  for (int step = 0; step < args.steps; ++step) {
    an.begin_step(step);
    for (std::size_t i = 0; i < stages.size(); ++i) {
      double ms = stages[i].ms * args.ms_scale;
      if (rank == args.slow_rank && step >= args.slow_from && args.slow_stage == stages[i].name)
        ms *= args.slow_factor;
      laggard::Analyzer::Section section(an, ids[i]);
      work(ms);
    }
    {
      laggard::Analyzer::Section section(an, comm_id);  // waits for the slowest rank
      MPI_Allreduce(grads.data(), reduced.data(), static_cast<int>(grads.size()), MPI_FLOAT,
                    MPI_SUM, MPI_COMM_WORLD);
    }
    an.end_step();
    if (step == args.fail_side_channel_at && an.is_analysis_rank()) {
      an.debug_fail_transport();
      std::printf("rank %d: side channel killed at step %d (failure drill)\n", rank, step);
      std::fflush(stdout);
    }
  }
  // Before MPI_Finalize: waits (bounded) for the last samples and reports. A program that
  // forgets is still safe: MPI_Finalize stops laggard's side channel first, and the destructor
  // closes the rest (with warnings).
  if (args.close_before_finalize) an.close();
  const laggard::AnalyzerCounters c = an.counters();

  if (an.is_analysis_rank()) {
    const laggard::RunSummary s = an.summary();
    std::printf("laggard verdicts (rank %d): %lld windows of %d ranks, steps %lld..%lld\n", rank,
                static_cast<long long>(s.windows), s.ranks, static_cast<long long>(s.first_step),
                static_cast<long long>(s.last_step));
    if (s.stragglers.empty()) std::printf("  no confirmed straggler\n");
    for (const auto& f : s.stragglers)
      std::printf("  straggler: rank %d (%s) in %s: slow in %d of %d windows, %.2fx typical, "
                  "confirmed at step %lld\n",
                  f.rank, f.host.c_str(), f.stage.c_str(), f.windows_flagged, f.windows_seen,
                  f.typical_slowdown, static_cast<long long>(f.confirmed_step));
    for (const auto& w : s.waiting)
      std::printf("  waiting:   rank %d in %s: %d windows, +%.1f ms typical (evidence, not a "
                  "verdict)\n",
                  w.rank, w.stage.c_str(), w.windows, w.typical_excess_ms);
    if (!s.likely_bottleneck.empty())
      std::printf("  likely bottleneck: %s\n", s.likely_bottleneck.c_str());
  }
  std::printf("rank %d: completed %d steps (laggard: %llu samples sent, %llu dropped, %llu "
              "failures counted)\n",
              rank, args.steps, static_cast<unsigned long long>(c.samples_sent),
              static_cast<unsigned long long>(c.queue_dropped + c.send_dropped),
              static_cast<unsigned long long>(c.errors));
  std::fflush(stdout);
  MPI_Finalize();
  return 0;
}
