// The built-in transports, registered by name in registry.cc. Private.
#pragma once

#include <memory>

#include "laggard/transport.hpp"

namespace laggard::detail {

std::unique_ptr<Transport> make_local_transport(const TransportSetup& setup);
#ifdef LAGGARD_HAVE_MPI
std::unique_ptr<Transport> make_mpi_transport(const TransportSetup& setup);
#endif

}  // namespace laggard::detail
