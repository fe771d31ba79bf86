// laggard — MPI programs: point an Analyzer's side channel at the application's communicator.
//
// Header-only and not part of the umbrella header, because it includes <mpi.h>. laggard itself
// duplicates the communicator (MPI_Comm_dup) and never sends on the application's own one; its
// background thread calls MPI concurrently with the application, so MPI must be initialized
// with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...). With a lower level, or a laggard built
// without MPI (transport_names() lacks "mpi"), the Analyzer logs why and records without
// analysing.
#pragma once

#include <mpi.h>

#include "laggard/analyzer.hpp"

namespace laggard {

/// Sets `options` to use the "mpi" side channel over a duplicate of `comm`, with this process's
/// rank and the communicator's size. Call after MPI_Init_thread; collective use follows when the
/// Analyzer is constructed (every rank of `comm` must construct one at the same point).
inline void use_mpi(AnalyzerOptions& options, MPI_Comm comm = MPI_COMM_WORLD) {
  options.transport = "mpi";
  options.mpi_comm = static_cast<int>(MPI_Comm_c2f(comm));
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  options.rank.rank = rank;
  options.rank.world_size = size;
}

}  // namespace laggard
