// Wake-on-data for laggard's background threads. Private.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif

namespace laggard {

/// One sleeping thread, woken by others only while it sleeps.
///
/// The sleeper arms the word, checks for work, and sleeps only if there is none. It sleeps
/// lightly (for at most a period; only wake_any() wakes it early: close(), a signal) or deeply
/// (no limit; wake_on_data() wakes it too). A waker pays one fence and one load, and a system
/// call only when the sleeper sleeps in a way it may wake. The training thread calls
/// wake_on_data() after each push, so it makes a system call only after the sleeper went deep
/// (nothing to do for a while), never while data flows: a wake-up can hand its CPU to the woken
/// thread (measured: a millisecond on a loaded machine, bench/step_cost_ab.py). A wake after
/// arm() is never lost: both sides put a sequentially consistent fence between their store (the
/// waker's push, the sleeper's armed word) and their load. Linux: a futex on the word.
/// Elsewhere the sleeper naps at most 100 ms at a time.
class WakeWord {
 public:
  using Duration = std::chrono::nanoseconds;
  enum Sleep : int { kAwake = 0, kDeep = 1, kLight = 2 };

  /// Sleeper: about to sleep. Look for work after this, then call sleep() or disarm().
  void arm(Sleep how) noexcept {
    word_.store(how, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  /// Sleeper: work was found after arm(); no sleep.
  void disarm() noexcept { word_.store(kAwake, std::memory_order_relaxed); }

  /// Sleeper, after arm(how): sleeps until a wake (or a spurious return); a light sleep for at
  /// most `period`.
  void sleep(Sleep how, Duration period) noexcept {
#ifdef __linux__
    timespec ts{};
    timespec* limit = nullptr;
    if (how == kLight) {
      ts.tv_sec = static_cast<time_t>(period.count() / 1000000000);
      ts.tv_nsec = static_cast<long>(period.count() % 1000000000);
      limit = &ts;
    }
    ::syscall(SYS_futex, reinterpret_cast<int*>(&word_), FUTEX_WAIT_PRIVATE, static_cast<int>(how),
              limit, nullptr, 0);
#else
    const Duration nap = std::chrono::milliseconds(100);
    std::this_thread::sleep_for(how == kLight && period < nap ? period : nap);
#endif
    word_.store(kAwake, std::memory_order_relaxed);
  }

  /// The training thread, after a push: wakes a deep sleeper; otherwise a fence and a load.
  void wake_on_data() noexcept { wake(kDeep); }
  /// Any thread (async-signal-safe on Linux): wakes the sleeper however it sleeps.
  void wake_any() noexcept { wake(kAwake); }

 private:
  // Wakes when the word is `only` (kAwake: any sleep).
  void wake(Sleep only) noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const int w = word_.load(std::memory_order_relaxed);
    if (w == kAwake || (only != kAwake && w != only)) return;
    int expected = w;
    if (!word_.compare_exchange_strong(expected, kAwake, std::memory_order_relaxed)) return;
#ifdef __linux__
    ::syscall(SYS_futex, reinterpret_cast<int*>(&word_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr,
              0);
#endif
  }

  static_assert(sizeof(std::atomic<int>) == sizeof(int), "the futex word is the atomic's int");
  std::atomic<int> word_{kAwake};
};

}  // namespace laggard
