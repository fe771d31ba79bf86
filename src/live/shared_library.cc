// liblaggard.so is the static archive linked whole (src/CMakeLists.txt); this file only gives
// the shared target a source of its own, as CMake requires one.
#include "laggard/version.hpp"

namespace laggard {
namespace {
[[maybe_unused]] constexpr const char* kSharedLibraryVersion = kVersion;
}  // namespace
}  // namespace laggard
