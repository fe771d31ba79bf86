// laggard._mpi: the MPI side channel (src/transport/mpi_transport.cc, laggard/mpi.hpp) for the
// Python package, a module of its own so that laggard._core never depends on MPI: built when
// MPI is found, imported only when an Analyzer asks for transport="mpi" (laggard/mpi.py).
//
// This module holds its own copy of the library; the engine runs in laggard._core's. So the
// transport is handed over as a factory function in a capsule, which laggard._core registers
// under "mpi" in its own registry (register_transport_capsule): the transport is created, used
// and destroyed through its virtual functions, all of them code of this module.
#include <mpi.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "laggard/mpi.hpp"
#include "laggard/transport.hpp"

namespace {

namespace py = pybind11;

bool initialized_here = false;

std::unique_ptr<laggard::Transport> create(const laggard::TransportSetup& setup) {
  return laggard::make_transport("mpi", setup);
}

const char* level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    default:
      return "MPI_THREAD_MULTIPLE";
  }
}

}  // namespace

PYBIND11_MODULE(_mpi, m) {
  m.doc() = "laggard's MPI side channel for the Python package (laggard.mpi)";
  laggard::register_mpi_transport();

  m.def(
      "init",
      [] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) throw std::runtime_error("MPI was already finalized in this process");
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (!initialized) {
          int provided = 0;
          if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
            throw std::runtime_error("MPI_Init_thread failed");
          initialized_here = true;
        }
        int provided = 0;
        MPI_Query_thread(&provided);
        if (provided < MPI_THREAD_MULTIPLE)
          throw std::runtime_error(
              std::string("MPI provides ") + level_name(provided) +
              "; laggard's side channel calls MPI from its background thread and needs "
              "MPI_THREAD_MULTIPLE (with mpi4py: mpi4py.rc.thread_level = 'multiple' before "
              "importing mpi4py.MPI)");
        int rank = 0, size = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        return py::make_tuple(rank, size);
      },
      "Initializes MPI with MPI_THREAD_MULTIPLE unless the program already did (mpi4py, say); "
      "returns (rank, size) of MPI_COMM_WORLD. RuntimeError when MPI cannot give that level.");
  m.def(
      "finalize",
      [] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (initialized_here && !finalized) MPI_Finalize();
      },
      "Finalizes MPI if init() initialized it (at exit, after the Analyzers are closed).");
  m.def("initialized_here", [] { return initialized_here; });
  m.attr("factory") =
      py::capsule(reinterpret_cast<void*>(&create), "laggard.transport_factory");
}
