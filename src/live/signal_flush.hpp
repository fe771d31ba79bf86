// SIGTERM, SIGINT and SIGHUP left at their default action: before the process ends, the rank
// logs of its live Analyzers are written out (for at most kSignalFlushSeconds), then the signal
// takes its default course (the exit status is the signal's, as without laggard). Private.
//
// The handler only touches lock-free atomics of static storage and calls nanosleep, write,
// sigaction and raise: all async-signal-safe. A handler the program (or Python) installed is
// never replaced: with one in place, the program's own shutdown is what calls close().
#pragma once

#include <signal.h>

#include <atomic>
#include <cstdint>

#include "live/wake_word.hpp"

namespace laggard::signal_flush {

/// How long the handler waits for the rank logs to be written out.
inline constexpr double kSignalFlushSeconds = 2.0;

/// One live Analyzer's part: its log writer looks at `requested` whenever it wakes and says
/// `drained` once the ring it writes is empty after the request; the handler wakes it through
/// `wake` (it sleeps on this word while there is nothing to write).
struct Slot {
  WakeWord wake;
  std::atomic<bool> used{false};
  std::atomic<bool> requested{false};
  std::atomic<bool> drained{false};
  std::atomic<int> rank{0};
  std::atomic<int> pid{0};  ///< the process whose writer drains it (a forked child has none)
};

/// A free slot (installing the handlers on first use), or nullptr: all slots in use (the
/// Analyzer then runs without a flush on signals). Thread-safe.
Slot* attach(int rank) noexcept;
/// Gives the slot back (close(), once the log writer is done). Thread-safe.
void detach(Slot* slot) noexcept;

/// Blocks the handled signals in the calling thread while it lives (construct it around the
/// creation of laggard's own threads: they inherit the mask, so a signal is never handled on
/// the log writer, which the handler waits for).
class BlockInScope {
 public:
  BlockInScope() noexcept;
  ~BlockInScope();
  BlockInScope(const BlockInScope&) = delete;
  BlockInScope& operator=(const BlockInScope&) = delete;

 private:
  sigset_t saved_;
  bool ok_ = false;
};

}  // namespace laggard::signal_flush
