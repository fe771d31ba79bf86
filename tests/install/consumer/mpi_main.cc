// An MPI program using an installed laggard::mpi: the "mpi" side channel over a duplicate of
// MPI_COMM_WORLD. Runs as a singleton (no mpirun needed). Exit status 0 when it works.
#include <mpi.h>

#include <laggard/laggard.hpp>
#include <laggard/mpi.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int reports = 0;
  std::string transport;
  {
    laggard::AnalyzerOptions opt;
    opt.enabled = true;
    opt.interval = 1;
    laggard::use_mpi(opt, MPI_COMM_WORLD);
    opt.sinks.push_back([&reports](std::int64_t, const laggard::Metrics&) { ++reports; });
    laggard::Analyzer an(opt);
    transport = an.transport_name();
    const auto fwd = an.stage("forward");
    for (std::int64_t step = 0; step < 3; ++step) {
      an.begin_step(step);
      an.add(fwd, 1.0);
      an.end_step();
    }
    an.close();
  }
  MPI_Finalize();
  // Below MPI_THREAD_MULTIPLE the side channel is refused (with a warning): still a success.
  const bool ok = provided < MPI_THREAD_MULTIPLE || (transport == "mpi" && reports == 3);
  std::printf("consumer mpi %s: transport '%s', %d reports\n", ok ? "ok" : "FAILED",
              transport.c_str(), reports);
  return ok ? 0 : 1;
}
