// The bounded hand-off from the training thread to the background thread. Private.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "laggard/model.hpp"
#include "laggard/recorder.hpp"
#include "live/wake_word.hpp"

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

/// The training thread's ring to the log writer: a single-producer, single-consumer ring of
/// Recorder::RawStep slots (numbers by slot, no strings), fed by the Recorder as its RawStepSink.
///
/// The producer writes a sampled step's times and readings straight into a free slot (a few
/// cache lines: no name compared or copied, no allocation); when the ring is full the step is
/// dropped and counted, and the producer never waits. The names live in tables here, written by
/// the producer once per name (before any step that uses it is committed; never changed after)
/// and read by the consumer, which builds the StepSample on its own thread (pop).
class StepRing final : public RawStepSink {
 public:
  explicit StepRing(std::size_t capacity)
      : capacity_(capacity), slots_(new Recorder::RawStep[capacity]) {
    for (Names& table : names_)
      for (std::string& n : table) n.reserve(32);
  }

  void name(Recorder::NameTable table, int slot, std::string_view name,
            StageKind kind) noexcept override {
    if (slot < 0 || slot >= Recorder::kMaxStages) return;
    const auto t = static_cast<std::size_t>(table);
    try {
      names_[t][static_cast<std::size_t>(slot)].assign(name.data(), name.size());
    } catch (...) {  // out of memory for a long name: its entries are left out of the samples
      missing_[t].fetch_or(1u << slot, std::memory_order_relaxed);
    }
    if (table == Recorder::NameTable::stage) stage_kinds_[static_cast<std::size_t>(slot)] = kind;
  }

  /// Who the samples are from (rank, world size, host, cohort), and the consumer's WakeWord
  /// (wake_on_data after each push; may be null). Before the producer and consumer start.
  void set_source(RankInfo rank, WakeWord* wake) {
    rank_ = std::move(rank);
    wake_ = wake;
  }

  /// The consumer's head is read only when the one seen last leaves no room: its cache line,
  /// which the consumer writes at each pop, is not pulled over to the training thread's core at
  /// every step.
  LAGGARD_HOT Recorder::RawStep* claim() noexcept override {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - head_seen_ >= capacity_) {
      head_seen_ = head_.load(std::memory_order_acquire);
      if (tail - head_seen_ >= capacity_) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        if (wake_ != nullptr) wake_->wake_on_data();
        return nullptr;
      }
    }
    return &slots_[tail % capacity_];
  }

  /// The push, then the consumer woken if it sleeps deeply (else a fence and a load).
  LAGGARD_HOT void commit() noexcept override {
    tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    if (wake_ != nullptr) wake_->wake_on_data();
  }

  /// Consumer only: builds the oldest step's sample into `out` (its buffers reused: no
  /// allocation once they hold names seen before). False when empty.
  bool pop(StepSample& out) noexcept {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    if (head == tail_.load(std::memory_order_acquire)) return false;
    const Recorder::RawStep& r = slots_[head % capacity_];
    bool ok = true;
    try {
      build(r, out);
    } catch (...) {  // out of memory for a longer name than before: the sample is lost
      ok = false;
    }
    head_.store(head + 1, std::memory_order_release);
    if (!ok) dropped_.fetch_add(1, std::memory_order_relaxed);
    return ok || pop(out);
  }

  /// Consumer only: nothing to pop (a push that is under way may not be seen).
  bool empty() const noexcept {
    return head_.load(std::memory_order_relaxed) == tail_.load(std::memory_order_acquire);
  }

  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  using Names = std::array<std::string, Recorder::kMaxStages>;
  static_assert(Recorder::kMaxStages == Recorder::kMaxValues, "one size of name table");

  void build(const Recorder::RawStep& r, StepSample& out) {
    out.rank = rank_.rank;
    out.world_size = rank_.world_size;
    out.step = r.step;
    if (out.host != rank_.host) out.host = rank_.host;
    if (out.cohort != rank_.cohort) out.cohort = rank_.cohort;
    out.step_ms = r.step_ms;
    out.work = std::numeric_limits<double>::quiet_NaN();
    const Names& stage_names = names_[static_cast<std::size_t>(Recorder::NameTable::stage)];
    std::size_t n = 0;
    for (std::uint32_t bits = r.stages & ~missing(Recorder::NameTable::stage); bits != 0;
         bits &= bits - 1) {
      const auto i = static_cast<std::size_t>(__builtin_ctz(bits));
      if (out.stages.size() <= n) out.stages.emplace_back();
      StageTime& t = out.stages[n++];
      if (t.name != stage_names[i]) t.name = stage_names[i];
      t.kind = stage_kinds_[i];
      t.ms = r.ms[i];
      t.calls = r.calls[i];
    }
    out.stages.resize(n);
    named(r.values & ~missing(Recorder::NameTable::value), r.value,
          names_[static_cast<std::size_t>(Recorder::NameTable::value)], out.values);
    named(r.resources & ~missing(Recorder::NameTable::resource), r.resource,
          names_[static_cast<std::size_t>(Recorder::NameTable::resource)], out.resources);
  }

  std::uint32_t missing(Recorder::NameTable table) const noexcept {
    return missing_[static_cast<std::size_t>(table)].load(std::memory_order_relaxed);
  }

  static void named(std::uint32_t bits, const std::array<double, Recorder::kMaxValues>& value,
                    const Names& names, std::vector<NamedValue>& out) {
    std::size_t n = 0;
    for (; bits != 0; bits &= bits - 1) {
      const auto i = static_cast<std::size_t>(__builtin_ctz(bits));
      if (out.size() <= n) out.emplace_back();
      NamedValue& v = out[n++];
      if (v.name != names[i]) v.name = names[i];
      v.value = value[i];
    }
    out.resize(n);
  }

  const std::size_t capacity_;
  std::unique_ptr<Recorder::RawStep[]> slots_;
  WakeWord* wake_ = nullptr;  // (in the line that claim and commit read)
  RankInfo rank_;
  // By Recorder::NameTable: written by the producer once a slot, before the first step that
  // uses the slot is committed (so the consumer reads them after the acquire in pop).
  std::array<Names, 3> names_;
  std::array<std::atomic<std::uint32_t>, 3> missing_{};  // slots whose name could not be kept
  std::array<StageKind, Recorder::kMaxStages> stage_kinds_{};
  alignas(64) std::atomic<std::uint64_t> head_{0};  // consumer
  alignas(64) std::atomic<std::uint64_t> tail_{0};  // producer
  std::uint64_t head_seen_ = 0;  // producer: head_ as claim() read it last (<= head_)
  alignas(64) std::atomic<std::uint64_t> dropped_{0};
};

}  // namespace laggard
