// Transports by name: "local", "mpi" once laggard::use_mpi() registered it (laggard/mpi.hpp),
// and any the program registers.
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "laggard/transport.hpp"
#include "transport/builtin.hpp"

namespace laggard {

Transport::~Transport() = default;

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, TransportFactory, std::less<>> factories;
};

Registry& registry() {
  // Built-ins are added here rather than by static registrars, which a static library's linker
  // would drop.
  static Registry* r = [] {
    auto* reg = new Registry;
    reg->factories.emplace("local", detail::make_local_transport);
    return reg;
  }();
  return *r;
}

}  // namespace

void register_transport(const std::string& name, TransportFactory factory) {
  if (name.empty()) throw std::invalid_argument("register_transport: empty transport name");
  if (!factory)
    throw std::invalid_argument("register_transport: empty factory for transport '" + name + "'");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> transport_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& entry : r.factories) names.push_back(entry.first);
  return names;
}

std::unique_ptr<Transport> make_transport(std::string_view name, const TransportSetup& setup) {
  TransportFactory factory;
  std::string known;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) {
      factory = it->second;
    } else {
      for (const auto& entry : r.factories) known += (known.empty() ? "" : ", ") + entry.first;
    }
  }
  if (!factory) {
    std::string why = "unknown transport '" + std::string(name) + "' (known: " + known + ")";
    if (name == "mpi")
      why += "; an MPI program links laggard::mpi and calls laggard::use_mpi() (laggard/mpi.hpp), "
             "which registers it";
    throw std::invalid_argument(why);
  }
  // Called outside the lock, so that a factory may itself register or create transports.
  auto transport = factory(setup);
  if (!transport)
    throw std::runtime_error("transport '" + std::string(name) + "' could not be created");
  return transport;
}

}  // namespace laggard
