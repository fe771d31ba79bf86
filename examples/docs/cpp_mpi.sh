#!/usr/bin/env bash
# Builds the C++ MPI example (examples/cpp/mpi_training.cc) in the build tree and runs it on 4
# MPI ranks, rank 2's forward 1.5x slower. BUILD: the build tree (default build/).
set -euo pipefail
build=${BUILD:-build}
if [ ! -x "$build/examples/cpp/laggard_mpi_example" ]; then
  flock /tmp/laggard-build.lock cmake --build "$build" -j2 --target laggard_mpi_example
fi
flags=(--oversubscribe)
if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi  # Open MPI refuses root otherwise
OMPI_MCA_btl_vader_single_copy_mechanism=none \
  mpirun -np 4 "${flags[@]}" "$build/examples/cpp/laggard_mpi_example" --slow-rank 2
