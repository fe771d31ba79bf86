// Counts failures and turns them into warnings, at most one per kind per interval, so a sink that
// fails on every report cannot flood the log. Private to the library.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "laggard/log.hpp"

namespace laggard {

/// Thread-safe: the training thread and the background thread both report here.
class ErrorCounter {
 public:
  /// `prefix` starts every message ("rank 3: ").
  ErrorCounter(std::string prefix, double interval_s);

  /// Counts one failure of `kind` and logs it as a warning (rate-limited per kind).
  void report(std::string_view kind, std::string_view message) noexcept;
  /// Logs without counting (a degradation that is counted elsewhere), rate-limited per kind.
  void warn(std::string_view kind, std::string_view message,
            LogLevel level = LogLevel::warning) noexcept;

  /// Replaces the prefix (set once rank is known).
  void set_prefix(std::string prefix) {
    std::lock_guard<std::mutex> lock(mu_);
    prefix_ = std::move(prefix);
  }

  std::uint64_t total() const noexcept { return total_.load(std::memory_order_relaxed); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Kind {
    bool logged = false;
    Clock::time_point last{};
    std::size_t suppressed = 0;
  };
  std::string prefix_;
  Clock::duration interval_;
  std::mutex mu_;
  std::map<std::string, Kind, std::less<>> kinds_;
  std::atomic<std::uint64_t> total_{0};
};

}  // namespace laggard
