// laggard — where laggard's own messages go: warnings about what failed inside laggard, and the
// verdict's console lines.
//
// Nothing laggard does on the live path throws into the caller: a failure (a sink that throws, a
// side channel that stopped, a log file that cannot be written) becomes a counted, rate-limited
// warning delivered here. The analysis rank also delivers here, at LogLevel::warning so that the
// default handler prints them, one line when a straggler is confirmed and one when it clears
// ("straggler confirmed: rank 2 (host h) in 'forward', 2.24x the reference ...", "straggler
// cleared: ..."): neither counted as failures nor rate-limited, one per confirmation or clearing
// (docs/reference/cpp.md, "The console line, and what every rank reads").
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "laggard/export.hpp"

namespace laggard {

enum class LogLevel : std::uint8_t { debug = 0, info = 1, warning = 2, error = 3 };

/// "debug", "info", "warning" or "error". Thread-safe.
LAGGARD_API const char* to_string(LogLevel level) noexcept;

/// Receives laggard's messages. Called from any thread (the training thread at setup, laggard's
/// background threads later), possibly concurrently; must not call back into the Analyzer that
/// is logging. Exceptions it throws are swallowed.
using LogHandler = std::function<void(LogLevel level, std::string_view message)>;

/// Replaces the process-wide handler; an empty handler restores the default, which writes
/// "laggard: warning: ..." lines to stderr for warnings and errors (with the environment
/// variable LAGGARD_LOG_LEVEL=info or debug, also for those levels). Thread-safe; a message
/// being delivered while the handler is replaced goes to the old or the new one.
LAGGARD_API void set_log_handler(LogHandler handler) noexcept;

/// Sends one message to the current handler. Thread-safe, never throws.
LAGGARD_API void log_message(LogLevel level, std::string_view message) noexcept;

}  // namespace laggard
