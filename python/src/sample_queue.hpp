// The sample queue of laggard._core: finished samples from the training thread to the rank log
// and to the side channel. Private to the extension (included by core.cc only).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "laggard/jsonl.hpp"
#include "live/line_file.hpp"

namespace laggard {

/// Finished samples, handed from the Recorder's callback (training thread, no GIL needed: plain
/// C++) on two ways: to the rank log, and to the consumer (the Python side-channel thread: the
/// gather and the live analysis).
///
/// Producer: fixed slots whose buffers are reused: after warm-up a push does not allocate, and it
/// makes no system call unless the queue has just reached half full (then it wakes whoever waits
/// for it). When the slots are full the sample is dropped and counted (`dropped`: in neither the
/// log nor the analysis); the producer never waits.
///
/// Log writer: with start_writer(), a C++ thread of its own (it never takes the GIL) empties the
/// slots every 100 ms (sooner when half full or closed), formats the samples, appends them to the
/// rank log and hands them to the consumer. It waits on nothing but the disk, so a consumer stuck
/// in a gather (a hung peer), the analysis or a sink holds up neither the log nor the producer.
/// Handed-over samples wait for the consumer in a second set of `capacity` slots; when those are
/// full (the consumer is stuck) a sample goes to the log only, and is counted (`gather_dropped`).
/// Without start_writer(), take() does the writer's work itself (tests, tools).
///
/// Besides samples it counts *rounds*: one per sampled step the training thread finished. The
/// consumer runs exactly one gather per round, so every rank runs the same number of
/// collectives even when a sample was dropped or arrives later (device backends); rounds are
/// never dropped.
/// Thread-safe: one producer and one consumer (more of either also work).
class SampleQueue : public std::enable_shared_from_this<SampleQueue> {
 public:
  struct Entry {
    std::int64_t step = 0;
    std::string line;
    StepSample sample;  // what the producer handed over; formatted into `line` by the writer
    bool formatted = false;
  };

  explicit SampleQueue(std::size_t capacity, std::size_t line_reserve = 1024) {
    if (capacity < 1) throw std::invalid_argument("SampleQueue: capacity must be >= 1");
    ring_.resize(capacity);
    for (Entry& e : ring_) e.line.reserve(line_reserve);
    ready_.resize(capacity);
  }

  /// Producer: copies the sample into a free slot (its buffers are reused: no allocation after
  /// warm-up). The JSON line is formatted by the writer, off the training thread: formatting
  /// there cost tens of microseconds per sampled step once training had evicted the caches.
  void push(const StepSample& sample) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (count_ == ring_.size()) {
        ++dropped_;
        return;
      }
      Entry& slot = ring_[(head_ + count_) % ring_.size()];
      slot.step = sample.step;
      slot.sample = sample;
      slot.formatted = false;
      ++count_;
      ++pushed_;
      wake = should_wake();
    }
    if (wake) ring_cv_.notify_all();
  }

  /// Producer: a line formatted elsewhere (tests, replays).
  void push_line(std::int64_t step, const std::string& line) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (count_ == ring_.size()) {
        ++dropped_;
        return;
      }
      Entry& slot = ring_[(head_ + count_) % ring_.size()];
      slot.step = step;
      slot.line.assign(line);
      slot.formatted = true;
      ++count_;
      ++pushed_;
      wake = should_wake();
    }
    if (wake) ring_cv_.notify_all();
  }

  /// Producer: one sampled step finished (whether or not its sample is in the queue yet).
  void mark_round() {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++rounds_;
      ++rounds_total_;
      wake = should_wake();
    }
    if (wake) ring_cv_.notify_all();
  }

  /// No more samples: the writer writes what is queued and stops; later waits return at once.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    ring_cv_.notify_all();
    ready_cv_.notify_all();
  }

  /// Starts the log writer thread (once). It holds the queue alive until it has written what was
  /// queued at close(), then closes the log and ends.
  void start_writer() {
    std::lock_guard<std::mutex> lock(mu_);
    if (writer_started_) return;
    writer_started_ = true;
    std::thread([self = shared_from_this()] { self->write_loop(); }).detach();
  }

  /// After close(): waits up to `timeout_s` for the writer to write everything and close the
  /// log. True when it did (or no writer was started).
  bool wait_writer(double timeout_s) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!writer_started_) return true;
    return ready_cv_.wait_for(lock, seconds(timeout_s), [&] { return writer_done_; });
  }

  struct Taken {
    std::uint64_t rounds = 0;
    bool closed = false;
    std::uint64_t dropped = 0;     // samples lost to the consumer so far (dropped + gather_dropped)
    std::uint64_t log_errors = 0;  // failed rank-log writes so far
  };

  /// Consumer: waits up to `timeout_s` for a round, a sample or the end; then lingers up to
  /// `linger_s` more so that several rounds come out of one wake-up (cut short by a half-full
  /// queue or the end); takes every sample handed over (the first taken_count() of taken()) and
  /// the rounds. `closed` is true once everything up to close() has been taken.
  Taken take(double timeout_s, double linger_s = 0.0) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = Clock::now() + seconds(timeout_s);
    if (writer_started_) {
      const auto ready = [&] { return ready_count_ > 0 || ready_rounds_ > 0 || final_; };
      ready_cv_.wait_until(lock, deadline, ready);
      const auto enough = [&] { return final_ || ready_count_ * 2 >= ready_.size(); };
      if (linger_s > 0 && (ready_rounds_ > 0 || ready_count_ > 0) && !enough())
        ready_cv_.wait_for(lock, seconds(linger_s), enough);
    } else {
      // Looks for work every kPoll, and is woken early only by a queue half full or a close.
      // Waking the consumer for every first sample of a batch cost the training thread's
      // end_step ~40 µs (a futex wake of a thread on another CPU; bench/overhead.py
      // --breakdown), so the producer does not.
      const auto ready = [&] { return rounds_ > 0 || count_ > 0 || closed_; };
      wait_ring(lock, deadline, ready);
      const auto enough = [&] { return closed_ || count_ * 2 >= ring_.size(); };
      if (linger_s > 0 && (rounds_ > 0 || count_ > 0) && !enough()) {
        wait_for_half_ = true;
        ring_cv_.wait_for(lock, seconds(linger_s), enough);
        wait_for_half_ = false;
      }
      lock.unlock();
      drain();
      lock.lock();
    }
    if (taken_.size() < ready_count_) taken_.resize(ready_count_);
    taken_count_ = ready_count_;
    for (std::size_t i = 0; i < ready_count_; ++i) {  // swaps: neither side allocates
      Entry& slot = ready_[(ready_head_ + i) % ready_.size()];
      taken_[i].step = slot.step;
      taken_[i].line.swap(slot.line);
    }
    ready_head_ = (ready_head_ + ready_count_) % ready_.size();
    ready_count_ = 0;
    Taken t{ready_rounds_, final_, dropped_ + gather_dropped_, log_errors_};
    ready_rounds_ = 0;
    return t;
  }

  /// Consumer side: the samples the latest take() took, formatted (the first taken_count()).
  const std::vector<Entry>& taken() const { return taken_; }
  std::size_t taken_count() const { return taken_count_; }

  /// The consumer gives up (it is left behind at close): what it has not taken yet is counted as
  /// gather_dropped (it is in the log) and later takes find nothing. Returns how many.
  std::uint64_t abandon() {
    std::lock_guard<std::mutex> lock(mu_);
    const std::uint64_t n = ready_count_;
    gather_dropped_ += ready_count_;
    ready_count_ = 0;
    abandoned_ = true;
    return n;
  }

  /// The rank log: every sample is appended to `path`, one line each, by the writer (or by take()
  /// without a writer) before the consumer gets it. Empty: no log (closes the current one).
  void set_log(const std::string& path) {
    std::lock_guard<std::mutex> lock(drain_mu_);
    log_.close();
    log_path_ = path;
  }
  /// Failed log writes so far (one per line), and the latest one's reason.
  std::uint64_t log_errors() const {
    std::lock_guard<std::mutex> lock(mu_);
    return log_errors_;
  }
  std::string log_error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return log_error_;
  }

  std::uint64_t pushed() const { return locked(pushed_); }
  std::uint64_t dropped() const { return locked(dropped_); }
  std::uint64_t gather_dropped() const { return locked(gather_dropped_); }
  std::uint64_t logged() const { return locked(logged_); }
  std::uint64_t log_lost() const { return locked(log_lost_); }
  std::uint64_t left_out() const { return locked(left_out_); }
  std::uint64_t rounds_total() const { return locked(rounds_total_); }
  std::size_t size() const { return locked(count_); }
  std::size_t capacity() const { return ring_.size(); }
  bool writer_done() const { return locked(writer_done_); }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kPoll{100};

  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(std::min(std::max(0.0, s), 86400.0)));
  }

  template <typename T>
  T locked(const T& value) const {
    std::lock_guard<std::mutex> lock(mu_);
    return value;
  }

  /// Producer, under the lock: whether this change is what a waiter waits for (then it is woken
  /// once: the flag is cleared).
  bool should_wake() {
    if (wait_for_half_ && (count_ * 2 >= ring_.size() || closed_)) {
      wait_for_half_ = false;
      return true;
    }
    return false;
  }

  /// Under `lock`: waits for `ready` until `deadline`, looking every kPoll.
  template <typename Ready>
  void wait_ring(std::unique_lock<std::mutex>& lock, Clock::time_point deadline, Ready ready) {
    while (!ready()) {
      const Clock::time_point now = Clock::now();
      if (now >= deadline) break;
      wait_for_half_ = true;
      ring_cv_.wait_until(lock, std::min<Clock::time_point>(deadline, now + kPoll));
      wait_for_half_ = false;
    }
  }

  /// Moves what the ring holds to the log and on to the consumer's slots. One at a time.
  void drain() {
    std::lock_guard<std::mutex> drain_lock(drain_mu_);
    std::uint64_t rounds;
    bool closed;
    std::size_t n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      n = count_;
      if (drain_.size() < n) drain_.resize(n);
      for (std::size_t i = 0; i < n; ++i) {  // swaps: neither side allocates
        Entry& slot = ring_[(head_ + i) % ring_.size()];
        drain_[i].step = slot.step;
        drain_[i].formatted = slot.formatted;
        if (slot.formatted)
          drain_[i].line.swap(slot.line);
        else
          std::swap(drain_[i].sample, slot.sample);
      }
      head_ = (head_ + n) % ring_.size();
      count_ = 0;
      rounds = rounds_;
      rounds_ = 0;
      closed = closed_;
    }
    std::uint64_t left_out = 0;
    for (std::size_t i = 0; i < n; ++i) {
      Entry& e = drain_[i];
      if (e.formatted) continue;
      e.line.clear();
      // A non-finite stage time is left out of the line (not written as null) and counted.
      left_out += append_sample_json(e.sample, e.line);
      if (!e.line.empty() && e.line.back() == '\n') e.line.pop_back();
      e.formatted = true;
    }
    // One write per line: a line is in the log whole or counted lost (a failed write of a batch
    // could leave some of its lines whole, some torn). A background thread's system call per
    // sampled step costs little.
    std::uint64_t logged = 0, lost = 0;
    if (!log_path_.empty()) {
      for (std::size_t i = 0; i < n; ++i) {
        log_text_.assign(drain_[i].line);
        log_text_ += '\n';
        if (log_.write(log_path_, log_text_, error_))
          ++logged;
        else
          ++lost;
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      left_out_ += left_out;
      logged_ += logged;
      if (lost > 0) {
        log_errors_ += lost;
        log_lost_ += lost;
        log_error_ = error_;
      }
      for (std::size_t i = 0; i < n; ++i) {
        if (abandoned_ || ready_count_ == ready_.size()) {
          ++gather_dropped_;  // in the log (unless its write failed), not in the analysis
          continue;
        }
        Entry& slot = ready_[(ready_head_ + ready_count_) % ready_.size()];
        slot.step = drain_[i].step;
        slot.line.swap(drain_[i].line);
        ++ready_count_;
      }
      ready_rounds_ += rounds;
      if (closed && count_ == 0) final_ = true;
    }
    ready_cv_.notify_all();
  }

  void write_loop() {
    const auto work = [&] { return count_ > 0 || rounds_ > 0 || closed_; };
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wait_ring(lock, Clock::now() + kPoll, work);
        if (!work()) continue;
      }
      drain();
      std::lock_guard<std::mutex> lock(mu_);
      if (final_) break;
    }
    {
      std::lock_guard<std::mutex> drain_lock(drain_mu_);
      log_.close();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      writer_done_ = true;
    }
    ready_cv_.notify_all();
  }

  mutable std::mutex mu_;
  std::condition_variable ring_cv_;   // producer -> writer (or take() without a writer)
  std::condition_variable ready_cv_;  // writer -> consumer, and the writer's end
  bool wait_for_half_ = false;        // a waiter wants to be woken at half full
  // Producer -> writer.
  std::vector<Entry> ring_;
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  std::uint64_t rounds_ = 0;
  std::uint64_t rounds_total_ = 0;
  std::uint64_t pushed_ = 0;
  std::uint64_t dropped_ = 0;
  bool closed_ = false;
  // Writer -> consumer.
  std::vector<Entry> ready_;
  std::size_t ready_head_ = 0;
  std::size_t ready_count_ = 0;
  std::uint64_t ready_rounds_ = 0;
  std::uint64_t gather_dropped_ = 0;
  bool final_ = false;  // everything queued before close() has been handed over
  bool abandoned_ = false;
  bool writer_started_ = false;
  bool writer_done_ = false;
  std::uint64_t logged_ = 0;
  std::uint64_t log_lost_ = 0;
  std::uint64_t log_errors_ = 0;
  std::uint64_t left_out_ = 0;
  std::string log_error_;
  // The writer's (under drain_mu_).
  std::mutex drain_mu_;
  std::vector<Entry> drain_;
  std::string log_path_;
  LineFile log_;
  std::string log_text_;
  std::string error_;
  // The consumer's.
  std::vector<Entry> taken_;
  std::size_t taken_count_ = 0;
};

}  // namespace laggard
