// laggard — the live source: sampled stage timing on the training thread.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "laggard/export.hpp"
#include "laggard/model.hpp"

namespace laggard {

/// A device timing backend (CUDA events and the like): marks are recorded on the training thread
/// without blocking and read later, once the device has passed them. Mark ids are slots of a
/// fixed pool created up front. Implementations need not be thread-safe: the Recorder calls them
/// from the training thread only.
class LAGGARD_API TimingBackend {
 public:
  virtual ~TimingBackend();
  /// Short name for logs ("cuda-event").
  virtual const char* name() const noexcept = 0;
  /// Number of mark slots; ids are 0..capacity()-1.
  virtual std::uint32_t capacity() const noexcept = 0;
  /// Records mark `id` now (on the current stream). Never blocks; false if recording failed.
  virtual bool record(std::uint32_t id) noexcept = 0;
  /// Non-blocking: 1 and `ms` set if both marks have completed, 0 if not yet, -1 on error.
  virtual int elapsed_ms(std::uint32_t start_id, std::uint32_t end_id, double& ms) noexcept = 0;
  /// Where later marks are recorded (a CUstream for CUDA; nullptr = the default stream).
  virtual void set_stream(void* stream) noexcept { (void)stream; }
};

/// Settings of a Recorder.
struct RecorderOptions {
  int interval = 10;        ///< sample every interval-th step (step % interval == 0); 0 = off
  RankInfo rank;            ///< copied into every sample
  /// Device backends only: how many sampled steps may wait for their marks to complete before
  /// the oldest is dropped (and counted).
  int max_pending_steps = 4;
  /// Device backends only: how many polls a sampled step whose marks have all completed waits
  /// for its deferred values (defer) before it is emitted without the ones still missing (and
  /// they are counted, deferred_dropped). 0: it does not wait.
  int max_deferred_polls = 8;
};

/// Counters of what the recorder dropped instead of blocking or allocating.
struct RecorderCounters {
  std::uint64_t sampled_steps = 0;
  std::uint64_t samples_emitted = 0;
  std::uint64_t dropped_stages = 0;     ///< sections of stages beyond kMaxStages
  std::uint64_t dropped_intervals = 0;  ///< device intervals beyond the per-step pool
  std::uint64_t dropped_steps = 0;      ///< device steps dropped (pending queue full, errors)
  std::uint64_t unbalanced = 0;         ///< end without begin, or step ended inside a section
  std::uint64_t dropped_values = 0;     ///< values/resources beyond kMaxValues names
  /// Deferred values (defer) a sample was emitted without: not resolved before the step had to
  /// go (the pending queue full, flush()/close, or max_deferred_polls polls after its marks
  /// completed). A step dropped as a whole counts in dropped_steps only.
  std::uint64_t deferred_dropped = 0;
};

class RawStepSink;

/// Records stage times on sampled steps. One per training thread; not thread-safe.
///
/// Cost: a section on a step that is not sampled (or with interval 0) is one predictable branch.
/// On a sampled step with the host clock it reads the steady clock twice and adds into a
/// preallocated slot; no allocation happens after a stage's name is first seen.
class LAGGARD_API Recorder {
 public:
  static constexpr int kMaxStages = 32;
  /// Distinct names of recorded values (and, separately, of resource readings) a recorder keeps.
  static constexpr int kMaxValues = 32;
  using StageId = int;
  using SampleCallback = std::function<void(const StepSample&)>;
  /// Names a value that defer() promised to the step being recorded; 0 = none.
  using DeferToken = std::uint64_t;

  /// `backend` null = host clock. Throws std::invalid_argument for a negative interval.
  explicit Recorder(RecorderOptions options, std::unique_ptr<TimingBackend> backend = nullptr);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  /// Called with each finished sample (from end_step or poll, on the calling thread).
  void on_sample(SampleCallback callback) { callback_ = std::move(callback); }

  /// A finished sampled step by slot: what the recorder writes into a RawStepSink instead of
  /// building a StepSample (no name copied or compared, no string touched). Bit i of `stages`:
  /// stage id i was entered in the step (ms[i], calls[i]); of `values` / `resources`: the
  /// value / resource reading of slot i was recorded (value[i] / resource[i]). Entries whose
  /// bit is clear hold anything. The names are the sink's (RawStepSink::name).
  /// Each array starts a cache line: a step with 8 stages and 30 readings writes 6 lines of a
  /// slot (the header with the first 8 stages' calls, 8 stages' ms, the readings), a slot the
  /// consumer thread read last.
  struct alignas(64) RawStep {
    std::int64_t step = 0;
    double step_ms = 0.0;
    std::uint32_t stages = 0;
    std::uint32_t values = 0;
    std::uint32_t resources = 0;
    std::array<std::uint32_t, kMaxStages> calls;
    alignas(64) std::array<double, kMaxStages> ms;
    alignas(64) std::array<double, kMaxValues> resource;
    alignas(64) std::array<double, kMaxValues> value;
  };
  /// Resource readings by slot (from resource_slot; a slot < 0 records nothing) that
  /// end_step(now, readings) records after those recorded by name or slot during the step, as
  /// record_resource_at would: laggard's resource sampler publishes the same ones every sampled
  /// step, and with a RawStepSink they are copied from the caller's arrays into the sink's slot
  /// at once. The arrays must stay as they are until end_step returns.
  struct SlotReadings {
    const std::int8_t* slots = nullptr;
    const double* values = nullptr;
    std::size_t count = 0;
  };
  /// Which of the recorder's name tables a RawStepSink::name call is about.
  enum class NameTable { stage, value, resource };
  /// Every sampled step goes into `sink` as a RawStep from now on (the on_sample callback is no
  /// longer called); each name the recorder has registered so far is given to it at once, each
  /// later one when it is registered (before any step that uses it). nullptr: back to
  /// on_sample. The sink must outlive the recorder's use of it. Training thread.
  void set_raw_sink(RawStepSink* sink) noexcept;

  /// Registers (or finds) a stage and returns its id; -1 when all kMaxStages slots are taken
  /// (its sections are then dropped and counted). Allocates on first sight of a name only.
  StageId stage(std::string_view name, StageKind kind);
  StageId stage(std::string_view name) { return stage(name, default_stage_kind(name)); }

  /// Starts a step. Decides whether it is sampled. Also polls a device backend.
  void begin_step(std::int64_t step) noexcept;
  /// Ends the step; a sampled host-clock step emits its sample here.
  void end_step() noexcept { end_step(std::chrono::steady_clock::now(), SlotReadings{}); }
  /// end_step() with the step's end read by the caller (steady_clock, just before: one clock
  /// read for the caller's figures and the step) and `readings` recorded last (SlotReadings).
  void end_step(std::chrono::steady_clock::time_point now, const SlotReadings& readings) noexcept;
  /// Device backends: emits samples whose marks have completed (and whose deferred values have
  /// been resolved, or waited max_deferred_polls polls for). Never blocks.
  void poll() noexcept;
  /// Device backends: poll(), but a step whose marks have completed is emitted at once, without
  /// the deferred values not resolved yet (counted, deferred_dropped). For the end of a run
  /// (Analyzer::close drains with it). Host clock: nothing to do.
  void flush() noexcept;

  bool sampled() const noexcept { return sampled_; }
  bool enabled() const noexcept { return options_.interval > 0; }
  /// Asks the CPU for the cache lines that a sampled step's begin_step and end_step touch here
  /// (the first line, the counters, the first 8 stages' times, the values' and readings'
  /// flags), so that they arrive together rather than one after another: right after a
  /// training step each is a miss. Changes nothing.
  void prefetch_step() const noexcept {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&sampled_, 1);
    __builtin_prefetch(&counters_, 1);
    for (std::size_t i = 0; i < 8; i += 2) __builtin_prefetch(&times_[i], 1);
    __builtin_prefetch(&values_, 1);
    __builtin_prefetch(&resources_, 1);
#endif
  }
  std::int64_t step() const noexcept { return step_; }
  const RecorderCounters& counters() const noexcept { return counters_; }
  const char* backend_name() const noexcept;

  /// Adds a duration measured elsewhere (a communication hook's wait, say) to a stage of the
  /// current step. No-op when the step is not sampled. Training thread only.
  void add(StageId id, double ms, std::uint32_t calls = 1) noexcept;

  /// Attaches `value` (any double, NaN and infinities kept bit for bit) to the current sampled
  /// step's `values` under `name`; a second record of a name in the step replaces the first.
  /// Not sampled: one branch. Sampled: a scan of at most kMaxValues names; allocates only on the
  /// first sight of a name longer than the reserved 32 characters. Names beyond kMaxValues are
  /// dropped and counted (dropped_values). Training thread only.
  void record(std::string_view name, double value) noexcept {
    if (LAGGARD_LIKELY(!sampled_)) return;
    record_slow(values_, name, value);
  }
  /// The same for a resource reading (the sample's `resources`, names in docs/reference/formats.md).
  void record_resource(std::string_view name, double value) noexcept {
    if (LAGGARD_LIKELY(!sampled_)) return;
    record_slow(resources_, name, value);
  }
  /// The slot of resource reading `name`, registered on first sight (as record_resource does,
  /// in the same order); -1 when kMaxValues names are taken (counted, dropped_values). With it,
  /// a caller that records the same readings every sampled step (laggard's resource sampler)
  /// records them with record_resource_at, which compares no name. Training thread only.
  int resource_slot(std::string_view name) noexcept { return slot_of(resources_, name); }
  /// record_resource by a slot from resource_slot (not sampled, or not a slot: nothing).
  /// Inline: a sampled step records ~30 of these, and a call apiece is code and a cache line
  /// more right after a training step.
  void record_resource_at(int slot, double value) noexcept {
    if (!sampled_ || slot < 0 || slot >= resources_.count) return;
    resources_.value[slot] = value;
    resources_.set[slot] = true;  // (resources are never deferred: no token to clear)
  }

  /// Device backends: promises a value of `name` for the current sampled step's `values` that
  /// becomes known later (a loss still being computed on the device, copied to the host without
  /// waiting), to be given with resolve(token, value). Returns the token, or 0 when nothing is
  /// deferred: not sampled, the host clock (whose sample is emitted at end_step, as always:
  /// record the value instead), or no name slot left (dropped_values). Once its marks have
  /// completed, the step waits for its deferred values up to max_deferred_polls polls; after
  /// that, when the pending queue is full, or at flush(), it is emitted without the missing ones
  /// and each is counted (deferred_dropped). A later record or defer of the same name in the
  /// step replaces it (the older token then resolves nothing). Same cost as record().
  DeferToken defer(std::string_view name) noexcept {
    if (LAGGARD_LIKELY(!sampled_) || !backend_) return 0;
    return defer_slow(name);
  }
  /// Gives the value of a deferred name, to the step it was deferred in, whether that step is
  /// still being recorded or already waits for its marks. False (and nothing changes) when the
  /// token is 0, was resolved already, was replaced, or its step is gone (emitted without it or
  /// dropped). No allocation; a scan of at most max_pending_steps + 1 steps. Training thread only.
  bool resolve(DeferToken token, double value) noexcept;

  /// The device backend, or nullptr for the host clock.
  TimingBackend* backend() noexcept { return backend_.get(); }

  /// Raw section calls; prefer Section. Cheap no-ops when the step is not sampled.
  void begin(StageId id) noexcept {
    if (LAGGARD_LIKELY(!sampled_)) return;
    begin_slow(id);
  }
  void end(StageId id) noexcept {
    if (LAGGARD_LIKELY(!sampled_)) return;
    end_slow(id);
  }
  /// Drops the open entry of stage `id`, begun by begin(id), without counting it: for a begin
  /// made on a guess that turned out wrong (laggard.torch begins the backward stage when the
  /// backward is called, and cancels it when that backward never reached the model). A stage
  /// that is not open is left alone; a device mark already recorded is simply not used.
  void cancel(StageId id) noexcept {
    if (LAGGARD_LIKELY(!sampled_)) return;
    if (id >= 0 && id < num_slots_) times_[id].open = false;
  }

 private:
  /// The named values of the step being recorded: names kept across steps (first-seen order),
  /// `set` cleared at each sampled begin_step.
  /// What a sampled step reads first (count, awaiting, set: one cache line), then the values;
  /// the names, read on first sight of a name only, last.
  struct alignas(64) NamedSlots {  // (count, awaiting, set and the first 3 values: one line)
    int count = 0;
    int awaiting = 0;  ///< names with a token in `waiting` (the nonzero entries)
    std::array<bool, kMaxValues> set{};
    std::array<double, kMaxValues> value{};
    std::array<DeferToken, kMaxValues> waiting{};  ///< the token a deferred name waits for, or 0
    std::array<std::string, kMaxValues> names{};
    void clear_step() noexcept {
      set.fill(false);
      if (awaiting == 0) return;  // no token anywhere: nothing to clear
      waiting.fill(0);
      awaiting = 0;
    }
  };
  /// The slot of `name` in `slots`, added on first sight; -1 when none is left (counted).
  int slot_of(NamedSlots& slots, std::string_view name) noexcept;
  void record_slow(NamedSlots& slots, std::string_view name, double value) noexcept;
  DeferToken defer_slow(std::string_view name) noexcept;
  /// Emits (or, on a device error, drops) the oldest pending step once its marks have completed;
  /// false when it must wait (marks not complete, or — unless `force` — deferred values it may
  /// still wait for).
  bool retire_oldest(bool force) noexcept;
  /// Which slot each entry of a sample's values (resources) was copied from last; -1: none. A
  /// slot's name never changes once given, so an entry that holds it needs no name compared.
  using CopiedFrom = std::array<std::int8_t, kMaxValues>;
  static void copy_named(const NamedSlots& from, std::vector<NamedValue>& to,
                         CopiedFrom& copied);
  /// The recorded entries of `from` into `to` by slot; returns the bits of the slots recorded.
  static std::uint32_t copy_raw(const NamedSlots& from,
                                std::array<double, kMaxValues>& to) noexcept;
  /// Fills a claimed ring slot's step, step time, entered stages, values and readings, and
  /// commits it (the stage times and calls are the caller's).
  void commit_raw(RawStep* r, std::int64_t step, double step_ms, std::uint32_t entered,
                  const NamedSlots& values, const NamedSlots& resources,
                  const SlotReadings& readings) noexcept;
  /// Cheap clock for the hot path: the invariant TSC on x86-64, else steady_clock nanoseconds.
  /// Ticks are converted to milliseconds at end_step with a rate calibrated against
  /// steady_clock over the recorder's lifetime.
  std::uint64_t ticks() const noexcept;
  /// `now`: steady_clock's, read just before.
  /// `now_ticks`: ticks(), read just after. Returns the step's length in ms (from
  /// step_started_ticks_), at the calibrated rate.
  void calibrate(std::chrono::steady_clock::time_point now, std::uint64_t now_ticks) noexcept;
  void begin_slow(StageId id) noexcept;
  void end_slow(StageId id) noexcept;
  // The device backends' part of begin_step, begin, end and end_step.
  void begin_device_step(std::int64_t step) noexcept;
  bool begin_device(StageId id) noexcept;
  void end_device(StageId id) noexcept;
  void end_device_step(double step_ms) noexcept;
  void emit(std::int64_t step, double step_ms, const double* ms, const std::uint32_t* calls,
            const NamedSlots& values, const NamedSlots& resources);

  struct Slot {
    std::string name;
    StageKind kind = StageKind::compute;
  };
  /// A stage's timing in the step, apart from its name: what a sampled step touches, packed (the
  /// step after a training step finds its cache lines cold): two stages a cache line.
  struct SlotTime {
    std::uint64_t started = 0;  ///< ticks()
    std::uint64_t ticks = 0;    ///< accumulated host ticks this step
    double added_ms = 0.0;      ///< durations given through add()
    std::uint32_t calls = 0;
    bool open = false;
  };
  struct Pending;  // device intervals of one sampled step, waiting for completion

  // What every sampled step reads and writes, in one cache line (after a training step each line
  // a step touches is a cache miss), then the counters and the clock's calibration.
  alignas(64) bool sampled_ = false;
  bool use_tsc_ = false;
  int interval_ = 0;  ///< options_.interval
  int num_slots_ = 0;
  std::int64_t step_ = 0;
  std::unique_ptr<TimingBackend> backend_;
  RawStepSink* raw_ = nullptr;  ///< set: samples go there as RawSteps (no scratch_)
  std::uint64_t step_started_ticks_ = 0;  ///< ticks() at the sampled step's begin
  double ms_per_tick_ = 1e-6;
  std::uint64_t calib_ticks0_ = 0;
  std::chrono::steady_clock::time_point calib_time0_{};
  RecorderCounters counters_;
  alignas(64) std::array<SlotTime, kMaxStages> times_{};  ///< 8 stages: 4 lines
  NamedSlots values_;
  NamedSlots resources_;
  RecorderOptions options_;
  std::array<Slot, kMaxStages> slots_{};
  std::array<std::uint32_t, kMaxStages> open_marks_{};  ///< device: an open interval's start mark
  SampleCallback callback_;
  StepSample scratch_;  ///< reused for every emitted sample
  CopiedFrom values_copied_{};     ///< of scratch_.values (set as each entry is made)
  CopiedFrom resources_copied_{};  ///< of scratch_.resources
  std::unique_ptr<Pending[]> pending_;
  int pending_head_ = 0;
  int pending_count_ = 0;
  std::uint32_t next_mark_ = 0;
  DeferToken defer_seq_ = 0;  ///< defer() calls so far: a token is (seq << 8) | name slot
};

/// Where a Recorder writes its sampled steps by slot (Recorder::set_raw_sink): a single
/// consumer that keeps the names and builds the samples on its own thread (laggard's Analyzer
/// hands them to its log writer this way: the training thread writes a few cache lines of
/// numbers per sampled step). Called on the training thread only.
class LAGGARD_API RawStepSink {
 public:
  virtual ~RawStepSink();
  /// The name of slot `slot` of `table` (a stage's with its kind), given once, before any step
  /// that uses it is committed; a slot's name never changes.
  virtual void name(Recorder::NameTable table, int slot, std::string_view name,
                    StageKind kind) noexcept = 0;
  /// Where the next step goes, or nullptr when there is no room (the sink counts the loss).
  virtual Recorder::RawStep* claim() noexcept = 0;
  /// The step written into the last claim() is complete.
  virtual void commit() noexcept = 0;
};

/// RAII section scope: times one entry of a stage. Cannot be copied or moved.
///   { laggard::Section s(recorder, forward_id); model.forward(); }
class Section {
 public:
  Section(Recorder& recorder, Recorder::StageId id) noexcept : recorder_(recorder), id_(id) {
    recorder_.begin(id_);
  }
  ~Section() { recorder_.end(id_); }
  Section(const Section&) = delete;
  Section& operator=(const Section&) = delete;
  Section(Section&&) = delete;
  Section& operator=(Section&&) = delete;

 private:
  Recorder& recorder_;
  Recorder::StageId id_;
};

}  // namespace laggard
