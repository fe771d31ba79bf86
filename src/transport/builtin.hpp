// The built-in transports, registered by name in registry.cc. Private. ("mpi" lives in the
// laggard::mpi component and registers itself: laggard/mpi.hpp.)
#pragma once

#include <memory>

#include "laggard/transport.hpp"

namespace laggard::detail {

std::unique_ptr<Transport> make_local_transport(const TransportSetup& setup);

}  // namespace laggard::detail
