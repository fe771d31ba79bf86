// The bounded hand-off from the training thread to the background thread. Private.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "laggard/model.hpp"
#include "laggard/recorder.hpp"

namespace laggard {

/// A single-producer, single-consumer ring of preallocated StepSample slots.
///
/// The producer (training thread) copies a sample into a free slot: no lock, no system call, and
/// after the first few samples no allocation (slot buffers keep their capacity). When the ring is
/// full the sample is dropped and counted; the producer never waits. The consumer (background
/// thread) swaps a slot's contents with its own sample, so neither side allocates.
class SampleRing {
 public:
  explicit SampleRing(std::size_t capacity) : capacity_(capacity), slots_(new StepSample[capacity]) {
    for (std::size_t i = 0; i < capacity_; ++i) reserve(slots_[i]);
  }

  /// Gives `s` the capacity a slot has, so that swapping it into the ring keeps slots warm.
  static void reserve(StepSample& s) {
    s.stages.reserve(Recorder::kMaxStages);
    s.host.reserve(32);
    s.cohort.reserve(16);
    s.values.reserve(kReservedValues);
    s.resources.reserve(kReservedResources);
  }

  /// Producer only. False (and counted) when full.
  bool push(const StepSample& sample) noexcept {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    const std::uint64_t head = head_.load(std::memory_order_acquire);
    if (tail - head >= capacity_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    StepSample& slot = slots_[tail % capacity_];
    try {
      copy(sample, slot);
    } catch (...) {  // out of memory for a longer name than before: the sample is lost
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  /// Consumer only: takes the oldest sample into `out` (swapping buffers). False when empty.
  bool pop(StepSample& out) noexcept {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    const std::uint64_t tail = tail_.load(std::memory_order_acquire);
    if (head == tail) return false;
    StepSample& slot = slots_[head % capacity_];
    swap_sample(slot, out);
    head_.store(head + 1, std::memory_order_release);
    return true;
  }

  /// Consumer only: nothing to pop (a push that is under way may not be seen).
  bool empty() const noexcept {
    return head_.load(std::memory_order_relaxed) == tail_.load(std::memory_order_acquire);
  }

  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  static void copy(const StepSample& from, StepSample& to) {
    to.rank = from.rank;
    to.world_size = from.world_size;
    to.step = from.step;
    if (to.host != from.host) to.host = from.host;
    if (to.cohort != from.cohort) to.cohort = from.cohort;
    to.step_ms = from.step_ms;
    to.work = from.work;
    // resize within the reserved capacity does not allocate; assign reuses name buffers.
    to.stages.resize(from.stages.size());
    for (std::size_t i = 0; i < from.stages.size(); ++i) {
      StageTime& t = to.stages[i];
      const StageTime& f = from.stages[i];
      if (t.name != f.name) t.name = f.name;
      t.kind = f.kind;
      t.ms = f.ms;
      t.calls = f.calls;
    }
    copy_named(from.values, to.values);
    copy_named(from.resources, to.resources);
  }

  // Within the reserved capacity (and names seen before) this does not allocate.
  static void copy_named(const std::vector<NamedValue>& from, std::vector<NamedValue>& to) {
    to.resize(from.size());
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (to[i].name != from[i].name) to[i].name = from[i].name;
      to[i].value = from[i].value;
    }
  }

  static void swap_sample(StepSample& a, StepSample& b) noexcept {
    std::swap(a.rank, b.rank);
    std::swap(a.world_size, b.world_size);
    std::swap(a.step, b.step);
    a.host.swap(b.host);
    a.cohort.swap(b.cohort);
    std::swap(a.step_ms, b.step_ms);
    std::swap(a.work, b.work);
    a.stages.swap(b.stages);
    a.values.swap(b.values);
    a.resources.swap(b.resources);
  }

  static constexpr std::size_t kReservedValues = 32;
  static constexpr std::size_t kReservedResources = 48;

  const std::size_t capacity_;
  std::unique_ptr<StepSample[]> slots_;
  alignas(64) std::atomic<std::uint64_t> head_{0};  // consumer
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // producer
  alignas(64) std::atomic<std::uint64_t> dropped_{0};
};

}  // namespace laggard
