// Internal: one trace file read with a progress hook (the directory reader's).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "laggard/trace.hpp"

namespace laggard::detail {

/// read_trace, calling `progress` (may be empty) with the bytes of the file consumed so far after
/// each chunk. Thread-safe (no shared state).
RankTrace read_trace_file(const std::string& path, const TraceOptions& options,
                          const std::function<void(std::uint64_t)>& progress);

}  // namespace laggard::detail
