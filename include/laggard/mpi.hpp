// laggard — MPI programs: point an Analyzer's side channel at the application's communicator.
//
// Not part of the umbrella header, because it includes <mpi.h>; link laggard::mpi (beside
// laggard::core) or laggard::mpi_shared (beside laggard::shared), pkg-config laggard-mpi. laggard
// duplicates the communicator (MPI_Comm_dup) and never sends on the application's own one; its
// background thread calls MPI concurrently with the application, so MPI must be initialized
// with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...). With a lower level the Analyzer logs why
// and records without analysing.
#pragma once

#include <mpi.h>

#include "laggard/analyzer.hpp"

namespace laggard {

/// Registers the "mpi" transport (idempotent, thread-safe). use_mpi() calls it.
LAGGARD_API void register_mpi_transport();

/// Registers the "mpi" transport and sets `options` to use it over a duplicate of `comm`, with
/// this process's rank and the communicator's size. Call after MPI_Init_thread; the duplication
/// happens when the Analyzer is constructed, collectively: every rank of `comm` constructs one
/// at the same point of the program.
inline void use_mpi(AnalyzerOptions& options, MPI_Comm comm = MPI_COMM_WORLD) {
  register_mpi_transport();
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
