#include "live/signal_flush.hpp"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

namespace laggard::signal_flush {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
constexpr int kSlots = 64;
Slot g_slots[kSlots];
std::atomic<bool> g_installed[3];

void say(const char* text) noexcept {
  const std::size_t n = std::strlen(text);
  [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, text, n);
}

static_assert(kSignalFlushSeconds == 2.0, "the handler's message on stderr says 2 s");

void handler(int sig) noexcept {
  const int saved_errno = errno;
  const int pid = static_cast<int>(::getpid());
  const auto mine = [pid](const Slot& s) {
    return s.used.load(std::memory_order_acquire) && s.pid.load(std::memory_order_relaxed) == pid;
  };
  bool any = false;
  for (Slot& s : g_slots) {
    if (!mine(s)) continue;
    s.drained.store(false, std::memory_order_relaxed);
    s.requested.store(true, std::memory_order_release);
    s.wake.wake_any();  // the log writer, asleep while there was nothing to write
    any = true;
  }
  if (any) {
    const timespec nap{0, 5 * 1000 * 1000};
    const int rounds = static_cast<int>(kSignalFlushSeconds / 0.005);
    bool all = false;
    for (int i = 0; i < rounds && !all; ++i) {
      all = true;
      for (Slot& s : g_slots)
        if (mine(s) && s.requested.load(std::memory_order_acquire) &&
            !s.drained.load(std::memory_order_acquire))
          all = false;
      if (!all) ::nanosleep(&nap, nullptr);
    }
    if (!all)
      say("laggard: the rank log writer did not finish within 2 s of the signal (the disk may "
          "hang): this rank's last samples may be missing from its rank log\n");
  }
  // The default action, as without laggard: the signal is blocked while its handler runs, so
  // it is delivered (and ends the process) as soon as this returns.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  ::sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
  errno = saved_errno;
}

void install() noexcept {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < 3; ++i) {
    if (g_installed[i].load()) continue;
    struct sigaction old;
    if (::sigaction(kSignals[i], nullptr, &old) != 0) continue;
    // Only a default action is taken over: a handler of the program's (or Python's, or SIG_IGN)
    // stays as it is.
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    ::sigemptyset(&sa.sa_mask);
    for (int other : kSignals) ::sigaddset(&sa.sa_mask, other);
    sa.sa_flags = SA_RESTART;
    if (::sigaction(kSignals[i], &sa, nullptr) == 0) g_installed[i].store(true);
  }
}

}  // namespace

Slot* attach(int rank) noexcept {
  for (Slot& s : g_slots) {
    bool expected = false;
    if (s.used.compare_exchange_strong(expected, true)) {
      s.requested.store(false);
      s.drained.store(false);
      s.rank.store(rank);
      s.pid.store(static_cast<int>(::getpid()));
      install();
      return &s;
    }
  }
  return nullptr;
}

void detach(Slot* slot) noexcept {
  if (slot != nullptr) slot->used.store(false, std::memory_order_release);
}

BlockInScope::BlockInScope() noexcept {
  sigset_t block;
  ::sigemptyset(&block);
  for (int sig : kSignals) ::sigaddset(&block, sig);
  ok_ = ::pthread_sigmask(SIG_BLOCK, &block, &saved_) == 0;
}

BlockInScope::~BlockInScope() {
  if (ok_) ::pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
}

}  // namespace laggard::signal_flush
