#pragma once

#define LAGGARD_VERSION_MAJOR 0
#define LAGGARD_VERSION_MINOR 1
#define LAGGARD_VERSION_PATCH 0

namespace laggard {
inline constexpr const char* kVersion = "0.1.0";
}  // namespace laggard
