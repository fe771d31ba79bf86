// The process-wide log handler (laggard/log.hpp) and the rate-limited failure counter.
#include "laggard/log.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "live/error_counter.hpp"

namespace laggard {
namespace {

LogLevel default_threshold() noexcept {
  const char* env = std::getenv("LAGGARD_LOG_LEVEL");
  if (env == nullptr) return LogLevel::warning;
  if (std::strcmp(env, "debug") == 0) return LogLevel::debug;
  if (std::strcmp(env, "info") == 0) return LogLevel::info;
  if (std::strcmp(env, "error") == 0) return LogLevel::error;
  return LogLevel::warning;
}

void write_stderr(LogLevel level, std::string_view message) noexcept {
  static const LogLevel threshold = default_threshold();
  if (level < threshold) return;
  // One write per message, so lines of concurrent threads (and ranks sharing a terminal) do not
  // interleave within a line.
  char buf[1024];
  const int n = std::snprintf(buf, sizeof buf, "laggard: %s: %.*s\n", to_string(level),
                              static_cast<int>(message.size()), message.data());
  if (n > 0) std::fwrite(buf, 1, std::min<std::size_t>(static_cast<std::size_t>(n), sizeof buf - 1),
                         stderr);
}

struct HandlerSlot {
  std::mutex mu;
  std::shared_ptr<const LogHandler> handler;  // null = default
};

HandlerSlot& slot() {
  static HandlerSlot* s = new HandlerSlot;  // never destroyed: logging may happen during exit
  return *s;
}

}  // namespace

const char* to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::debug: return "debug";
    case LogLevel::info: return "info";
    case LogLevel::warning: return "warning";
    case LogLevel::error: return "error";
  }
  return "unknown";
}

void set_log_handler(LogHandler handler) noexcept {
  try {
    std::shared_ptr<const LogHandler> next;
    if (handler) next = std::make_shared<const LogHandler>(std::move(handler));
    HandlerSlot& s = slot();
    std::lock_guard<std::mutex> lock(s.mu);
    s.handler.swap(next);
  } catch (...) {
    // Out of memory: keep the previous handler.
  }
}

void log_message(LogLevel level, std::string_view message) noexcept {
  try {
    std::shared_ptr<const LogHandler> handler;
    {
      HandlerSlot& s = slot();
      std::lock_guard<std::mutex> lock(s.mu);
      handler = s.handler;
    }
    // Called outside the lock so that a handler that logs or replaces itself cannot deadlock.
    if (handler) {
      (*handler)(level, message);
    } else {
      write_stderr(level, message);
    }
  } catch (...) {
    // A broken handler must not reach the training loop either.
  }
}

// ---------------------------------------------------------------------------------------------

ErrorCounter::ErrorCounter(std::string prefix, double interval_s)
    : prefix_(std::move(prefix)), interval_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval_s))) {}

void ErrorCounter::report(std::string_view kind, std::string_view message) noexcept {
  total_.fetch_add(1, std::memory_order_relaxed);
  warn(kind, message);
}

void ErrorCounter::warn(std::string_view kind, std::string_view message,
                        LogLevel level) noexcept {
  try {
    const auto now = Clock::now();
    std::size_t suppressed = 0;
    std::string text;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = kinds_.find(kind);
      if (it == kinds_.end()) it = kinds_.emplace(std::string(kind), Kind{}).first;
      Kind& k = it->second;
      if (k.logged && now - k.last < interval_) {
        ++k.suppressed;
        return;
      }
      k.logged = true;
      k.last = now;
      suppressed = std::exchange(k.suppressed, 0);
      text = prefix_;
    }
    text.append(kind).append(": ").append(message);
    if (suppressed > 0)
      text.append(" (").append(std::to_string(suppressed)).append(" similar messages suppressed)");
    log_message(level, text);
  } catch (...) {
  }
}

}  // namespace laggard
