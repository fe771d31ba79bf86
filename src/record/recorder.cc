#include "laggard/recorder.hpp"

#include <stdexcept>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <x86intrin.h>
#define LAGGARD_HAVE_TSC 1
#endif

namespace laggard {

TimingBackend::~TimingBackend() = default;
RawStepSink::~RawStepSink() = default;

namespace {
constexpr int kMaxIntervals = 256;  // device intervals per sampled step

bool invariant_tsc() noexcept {
#ifdef LAGGARD_HAVE_TSC
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) == 0 || eax < 0x80000007u) return false;
  if (__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 8)) != 0;  // constant rate, does not stop in sleep states
#else
  return false;
#endif
}

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

// One sampled step's device intervals, waiting for the device to pass their marks.
struct Recorder::Pending {
  std::int64_t step = 0;
  double step_ms = 0.0;
  int intervals = 0;
  int resolved = 0;  // intervals [0, resolved) are already added into ms[]
  int waited_polls = 0;  // polls its marks were complete while deferred values were missing
  std::uint32_t first_mark = 0;
  std::array<std::int8_t, kMaxIntervals> slot{};
  std::array<std::uint32_t, kMaxIntervals> start_mark{};
  std::array<double, kMaxStages> ms{};
  std::array<std::uint32_t, kMaxStages> calls{};
  NamedSlots values;  // copied at end_step: the step's values (and deferred names) wait with
                      // its device intervals
  NamedSlots resources;
};

Recorder::Recorder(RecorderOptions options, std::unique_ptr<TimingBackend> backend)
    : backend_(std::move(backend)), options_(std::move(options)) {
  interval_ = options_.interval;
  if (options_.interval < 0)
    throw std::invalid_argument("Recorder: interval must be >= 0 (0 = off), got " +
                                std::to_string(options_.interval));
  if (options_.max_pending_steps < 1)
    throw std::invalid_argument("Recorder: max_pending_steps must be >= 1, got " +
                                std::to_string(options_.max_pending_steps));
  if (options_.max_deferred_polls < 0)
    throw std::invalid_argument("Recorder: max_deferred_polls must be >= 0, got " +
                                std::to_string(options_.max_deferred_polls));
  if (backend_) {
    const auto regions = static_cast<std::uint32_t>(options_.max_pending_steps + 1);
    if (backend_->capacity() < regions * 2)
      throw std::invalid_argument(std::string("Recorder: backend '") + backend_->name() +
                                  "' has too few marks for max_pending_steps");
    pending_.reset(new Pending[regions]);
  }
  scratch_.stages.reserve(kMaxStages);
  // Reserved up front so that recording a value on a sampled step never allocates.
  scratch_.values.reserve(kMaxValues);
  scratch_.resources.reserve(kMaxValues);
  for (NamedSlots* slots : {&values_, &resources_})
    for (std::string& n : slots->names) n.reserve(32);
  use_tsc_ = invariant_tsc();
  calib_time0_ = std::chrono::steady_clock::now();
  calib_ticks0_ = ticks();
}

namespace {
// Recorder::ticks, inlined into the sections' begin and end (the member is exported: the
// compiler calls it, through the PLT, rather than inline it into them).
inline std::uint64_t read_ticks([[maybe_unused]] bool use_tsc) noexcept {
#ifdef LAGGARD_HAVE_TSC
  if (use_tsc) return __rdtsc();
#endif
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}
}  // namespace

LAGGARD_HOT std::uint64_t Recorder::ticks() const noexcept { return read_ticks(use_tsc_); }

LAGGARD_HOT void Recorder::calibrate(std::chrono::steady_clock::time_point now,
                                     std::uint64_t now_ticks) noexcept {
  if (!use_tsc_) return;  // ticks are nanoseconds already
  // Recalibrated on every sampled step: the longer the baseline, the more exact the rate.
  const double elapsed_ms = ms_between(calib_time0_, now);
  if (now_ticks > calib_ticks0_ && elapsed_ms > 0.0)
    ms_per_tick_ = elapsed_ms / static_cast<double>(now_ticks - calib_ticks0_);
}

Recorder::~Recorder() = default;

const char* Recorder::backend_name() const noexcept {
  return backend_ ? backend_->name() : "host-clock";
}

Recorder::StageId Recorder::stage(std::string_view name, StageKind kind) {
  for (int i = 0; i < num_slots_; ++i)
    if (slots_[i].name == name) return i;
  if (num_slots_ == kMaxStages) return -1;
  Slot& s = slots_[num_slots_];
  s.name.assign(name);
  s.kind = kind;
  if (raw_ != nullptr) raw_->name(NameTable::stage, num_slots_, s.name, kind);
  return num_slots_++;
}

void Recorder::set_raw_sink(RawStepSink* sink) noexcept {
  raw_ = sink;
  if (sink == nullptr) return;
  for (int i = 0; i < num_slots_; ++i)
    sink->name(NameTable::stage, i, slots_[i].name, slots_[i].kind);
  for (int i = 0; i < values_.count; ++i)
    sink->name(NameTable::value, i, values_.names[i], StageKind::compute);
  for (int i = 0; i < resources_.count; ++i)
    sink->name(NameTable::resource, i, resources_.names[i], StageKind::compute);
}

// The host clock's sampled step is the training thread's hot path: its functions are kept
// together (LAGGARD_HOT) and the device backends' work is in functions of its own
// (LAGGARD_COLD), so that the step after a training step reads few cache lines of code.
LAGGARD_HOT void Recorder::begin_step(std::int64_t step) noexcept {
  if (LAGGARD_UNLIKELY(backend_ != nullptr)) poll();
  if (sampled_) end_step();  // a step that was never ended: close it
  step_ = step;
  sampled_ = interval_ > 0 && step % interval_ == 0;
  if (!sampled_) return;
  ++counters_.sampled_steps;
  for (int i = 0; i < num_slots_; ++i) {
    times_[i].ticks = 0;
    times_[i].added_ms = 0.0;
    times_[i].calls = 0;
    times_[i].open = false;
  }
  values_.clear_step();
  resources_.clear_step();
  if (LAGGARD_UNLIKELY(backend_ != nullptr)) begin_device_step(step);
  // The step's start in ticks (the TSC: no clock call; end_step converts at the rate it
  // calibrates against the clock it reads there).
  step_started_ticks_ = read_ticks(use_tsc_);
}

LAGGARD_COLD void Recorder::begin_device_step(std::int64_t step) noexcept {
  const int regions = options_.max_pending_steps + 1;
  // The queue is full: the oldest step goes now. Its marks complete, it is emitted without
  // the deferred values it still waits for (counted); else the device fell behind and it is
  // dropped.
  if (pending_count_ == options_.max_pending_steps && !retire_oldest(/*force=*/true)) {
    pending_head_ = (pending_head_ + 1) % regions;
    --pending_count_;
    ++counters_.dropped_steps;
  }
  const int open = (pending_head_ + pending_count_) % regions;
  Pending& p = pending_[open];
  p.step = step;
  p.intervals = 0;
  p.resolved = 0;
  p.waited_polls = 0;
  p.ms.fill(0.0);
  p.calls.fill(0);
  const std::uint32_t per_region = backend_->capacity() / static_cast<std::uint32_t>(regions);
  p.first_mark = static_cast<std::uint32_t>(open) * per_region;
  next_mark_ = 0;
}

LAGGARD_HOT void Recorder::begin_slow(StageId id) noexcept {
  if (LAGGARD_UNLIKELY(id < 0 || id >= num_slots_)) {
    ++counters_.dropped_stages;
    return;
  }
  SlotTime& s = times_[id];
  if (LAGGARD_UNLIKELY(s.open)) {  // re-entered without end: keep the outer entry
    ++counters_.unbalanced;
    return;
  }
  if (LAGGARD_UNLIKELY(backend_ != nullptr)) {
    if (!begin_device(id)) return;
  } else {
    s.started = read_ticks(use_tsc_);
  }
  s.open = true;
}

LAGGARD_COLD bool Recorder::begin_device(StageId id) noexcept {
  const int regions = options_.max_pending_steps + 1;
  Pending& p = pending_[(pending_head_ + pending_count_) % regions];
  const std::uint32_t per_region = backend_->capacity() / static_cast<std::uint32_t>(regions);
  if (p.intervals >= kMaxIntervals || next_mark_ + 2 > per_region) {
    ++counters_.dropped_intervals;
    return false;
  }
  open_marks_[id] = p.first_mark + next_mark_;
  if (!backend_->record(open_marks_[id])) {
    ++counters_.dropped_intervals;
    return false;
  }
  next_mark_ += 2;
  return true;
}

void Recorder::add(StageId id, double ms, std::uint32_t calls) noexcept {
  if (!sampled_) return;
  if (id < 0 || id >= num_slots_) {
    ++counters_.dropped_stages;
    return;
  }
  if (!(ms >= 0.0)) return;  // negative or NaN: not a duration
  times_[id].added_ms += ms;
  times_[id].calls += calls;
  if (backend_) {
    Pending& p = pending_[(pending_head_ + pending_count_) % (options_.max_pending_steps + 1)];
    p.ms[id] += ms;
    p.calls[id] += calls;
  }
}

LAGGARD_HOT void Recorder::end_slow(StageId id) noexcept {
  if (LAGGARD_UNLIKELY(id < 0 || id >= num_slots_)) return;  // counted at begin
  SlotTime& s = times_[id];
  if (LAGGARD_UNLIKELY(!s.open)) {
    ++counters_.unbalanced;
    return;
  }
  s.open = false;
  ++s.calls;
  if (LAGGARD_UNLIKELY(backend_ != nullptr))
    end_device(id);
  else
    s.ticks += read_ticks(use_tsc_) - s.started;
}

LAGGARD_COLD void Recorder::end_device(StageId id) noexcept {
  const int regions = options_.max_pending_steps + 1;
  Pending& p = pending_[(pending_head_ + pending_count_) % regions];
  if (!backend_->record(open_marks_[id] + 1)) {
    ++counters_.dropped_intervals;
    return;
  }
  p.slot[p.intervals] = static_cast<std::int8_t>(id);
  p.start_mark[p.intervals++] = open_marks_[id];
  ++p.calls[id];
}

LAGGARD_HOT inline void Recorder::commit_raw(RawStep* r, std::int64_t step, double step_ms,
                                             std::uint32_t entered, const NamedSlots& values,
                                             const NamedSlots& resources,
                                             const SlotReadings& readings) noexcept {
  r->step = step;
  r->step_ms = step_ms;
  r->stages = entered;
  r->values = copy_raw(values, r->value);
  std::uint32_t recorded = copy_raw(resources, r->resource);
  // The caller's readings last (as record_resource_at after the others), from its arrays
  // straight into the slot.
  for (std::size_t i = 0; i < readings.count; ++i) {
    const int slot = readings.slots[i];
    if (slot < 0 || slot >= resources.count) continue;
    r->resource[static_cast<std::size_t>(slot)] = readings.values[i];
    recorded |= 1u << slot;
  }
  r->resources = recorded;
  raw_->commit();
}

LAGGARD_HOT void Recorder::end_step(std::chrono::steady_clock::time_point now,
                                    const SlotReadings& readings) noexcept {
  if (!sampled_) return;
  if (LAGGARD_UNLIKELY(raw_ == nullptr || backend_ != nullptr)) {
    // The sample is built here (or waits for its marks): the readings into the slots first.
    for (std::size_t i = 0; i < readings.count; ++i)
      record_resource_at(readings.slots[i], readings.values[i]);
  }
  sampled_ = false;
  const std::uint64_t now_ticks = read_ticks(use_tsc_);
  calibrate(now, now_ticks);
  const double step_ms = static_cast<double>(now_ticks - step_started_ticks_) * ms_per_tick_;
  if (LAGGARD_UNLIKELY(backend_ != nullptr)) {
    end_device_step(step_ms);
    return;
  }
  RawStep* r = nullptr;
  if (raw_ != nullptr) {  // the numbers alone, straight from the slots into the sink
    ++counters_.samples_emitted;
    r = raw_->claim();  // nullptr: no room (the sink counted it)
  }
  std::array<double, kMaxStages> ms;
  std::array<std::uint32_t, kMaxStages> calls;
  std::uint32_t entered = 0;
  for (int i = 0; i < num_slots_; ++i) {
    SlotTime& t = times_[i];
    if (LAGGARD_UNLIKELY(t.open)) {  // a section still open at end of step: its entry is dropped
      ++counters_.unbalanced;
      t.open = false;
    }
    const double t_ms = static_cast<double>(t.ticks) * ms_per_tick_ + t.added_ms;
    if (r != nullptr) {
      if (t.calls == 0) continue;
      entered |= 1u << i;
      r->ms[i] = t_ms;
      r->calls[i] = t.calls;
    } else {
      ms[i] = t_ms;
      calls[i] = t.calls;
    }
  }
  if (r != nullptr) {
    commit_raw(r, step_, step_ms, entered, values_, resources_, readings);
  } else if (raw_ == nullptr) {
    emit(step_, step_ms, ms.data(), calls.data(), values_, resources_);
  }
}

LAGGARD_COLD void Recorder::end_device_step(double step_ms) noexcept {
  for (int i = 0; i < num_slots_; ++i) {
    if (times_[i].open) {  // a section still open at end of step: its partial entry is dropped
      ++counters_.unbalanced;
      times_[i].open = false;
    }
  }
  const int regions = options_.max_pending_steps + 1;
  Pending& p = pending_[(pending_head_ + pending_count_) % regions];
  p.step_ms = step_ms;
  p.values = values_;
  p.resources = resources_;
  ++pending_count_;
  poll();
}

bool Recorder::retire_oldest(bool force) noexcept {
  Pending& p = pending_[pending_head_];
  bool failed = false;
  while (p.resolved < p.intervals) {
    double ms = 0.0;
    const std::uint32_t start = p.start_mark[p.resolved];
    const int state = backend_->elapsed_ms(start, start + 1, ms);
    if (state == 0) return false;  // the device has not got there yet; never wait
    if (state < 0) {
      failed = true;
      break;
    }
    p.ms[p.slot[p.resolved]] += ms;
    ++p.resolved;
  }
  if (failed) {
    ++counters_.dropped_steps;
  } else {
    if (p.values.awaiting > 0) {  // marks complete, deferred values still missing
      if (!force && p.waited_polls < options_.max_deferred_polls) {
        ++p.waited_polls;
        return false;  // later steps wait behind it: samples stay in step order
      }
      counters_.deferred_dropped += static_cast<std::uint64_t>(p.values.awaiting);
    }
    emit(p.step, p.step_ms, p.ms.data(), p.calls.data(), p.values, p.resources);
  }
  pending_head_ = (pending_head_ + 1) % (options_.max_pending_steps + 1);
  --pending_count_;
  return true;
}

void Recorder::poll() noexcept {
  if (!backend_) return;
  while (pending_count_ > 0 && retire_oldest(/*force=*/false)) {
  }
}

void Recorder::flush() noexcept {
  if (!backend_) return;
  while (pending_count_ > 0 && retire_oldest(/*force=*/true)) {
  }
}

int Recorder::slot_of(NamedSlots& slots, std::string_view name) noexcept {
  // Names come in the same order every sampled step (laggard.resources hands over ~30): the
  // slot after the last one found in the same slots, on this thread, is tried first, one
  // comparison instead of a scan. (A hint only: any slot it names is checked.)
  thread_local const NamedSlots* hint_slots = nullptr;
  thread_local int hint_next = 0;
  if (hint_slots == &slots && hint_next < slots.count && slots.names[hint_next] == name)
    return hint_next++;
  hint_slots = &slots;
  for (int i = 0; i < slots.count; ++i)
    if (slots.names[i] == name) {
      hint_next = i + 1;
      return i;
    }
  if (slots.count == kMaxValues) {
    ++counters_.dropped_values;
    return -1;
  }
  try {
    slots.names[slots.count].assign(name.data(), name.size());
  } catch (...) {  // out of memory for a long name: the value is lost, not the step
    ++counters_.dropped_values;
    return -1;
  }
  slots.set[slots.count] = false;
  slots.waiting[slots.count] = 0;
  if (raw_ != nullptr)
    raw_->name(&slots == &values_ ? NameTable::value : NameTable::resource, slots.count,
               slots.names[slots.count], StageKind::compute);
  hint_next = slots.count + 1;
  return slots.count++;
}

void Recorder::record_slow(NamedSlots& slots, std::string_view name, double value) noexcept {
  const int i = slot_of(slots, name);
  if (i < 0) return;
  slots.value[i] = value;
  slots.set[i] = true;
  if (slots.waiting[i] != 0) {  // a value recorded after a defer of the name replaces it
    slots.waiting[i] = 0;
    --slots.awaiting;
  }
}

Recorder::DeferToken Recorder::defer_slow(std::string_view name) noexcept {
  const int i = slot_of(values_, name);
  if (i < 0) return 0;
  const DeferToken token = (++defer_seq_ << 8) | static_cast<DeferToken>(i);
  values_.set[i] = false;  // a value recorded before is replaced by the one to come
  if (values_.waiting[i] == 0) ++values_.awaiting;
  values_.waiting[i] = token;
  return token;
}

bool Recorder::resolve(DeferToken token, double value) noexcept {
  if (token == 0) return false;
  const auto i = static_cast<int>(token & 0xffu);
  if (i >= kMaxValues) return false;
  NamedSlots* slots = nullptr;
  if (sampled_ && values_.waiting[i] == token) {
    slots = &values_;  // the step being recorded
  } else if (backend_) {
    const int regions = options_.max_pending_steps + 1;
    for (int k = 0; k < pending_count_ && slots == nullptr; ++k) {
      NamedSlots& v = pending_[(pending_head_ + k) % regions].values;
      if (v.waiting[i] == token) slots = &v;
    }
  }
  if (slots == nullptr) return false;
  slots->value[i] = value;
  slots->set[i] = true;
  slots->waiting[i] = 0;
  --slots->awaiting;
  return true;
}

void Recorder::copy_named(const NamedSlots& from, std::vector<NamedValue>& to,
                          CopiedFrom& copied) {
  std::size_t n = 0;
  for (int i = 0; i < from.count; ++i) {
    if (!from.set[i]) continue;
    if (to.size() <= n) {
      to.emplace_back();
      copied[n] = -1;
    }
    NamedValue& v = to[n];
    if (copied[n] != i) {  // else it holds slot i's name already: no string touched
      if (v.name != from.names[i]) v.name = from.names[i];
      copied[n] = static_cast<std::int8_t>(i);
    }
    v.value = from.value[i];
    ++n;
  }
  to.resize(n);
}

LAGGARD_HOT std::uint32_t Recorder::copy_raw(const NamedSlots& from,
                                 std::array<double, kMaxValues>& to) noexcept {
  std::uint32_t recorded = 0;
  for (int i = 0; i < from.count; ++i) {
    if (!from.set[i]) continue;
    recorded |= 1u << i;
    to[i] = from.value[i];
  }
  return recorded;
}

void Recorder::emit(std::int64_t step, double step_ms, const double* ms,
                    const std::uint32_t* calls, const NamedSlots& values,
                    const NamedSlots& resources) {
  if (raw_ != nullptr) {
    ++counters_.samples_emitted;
    RawStep* r = raw_->claim();
    if (r == nullptr) return;
    std::uint32_t entered = 0;
    for (int i = 0; i < num_slots_; ++i) {
      if (calls[i] == 0) continue;
      entered |= 1u << i;
      r->ms[i] = ms[i];
      r->calls[i] = calls[i];
    }
    commit_raw(r, step, step_ms, entered, values, resources, SlotReadings{});
    return;
  }
  scratch_.rank = options_.rank.rank;
  scratch_.world_size = options_.rank.world_size;
  scratch_.step = step;
  if (scratch_.host != options_.rank.host) scratch_.host = options_.rank.host;
  if (scratch_.cohort != options_.rank.cohort) scratch_.cohort = options_.rank.cohort;
  scratch_.step_ms = step_ms;
  std::size_t n = 0;
  for (int i = 0; i < num_slots_; ++i) {
    if (calls[i] == 0) continue;
    if (scratch_.stages.size() <= n) scratch_.stages.emplace_back();
    StageTime& st = scratch_.stages[n++];
    if (st.name != slots_[i].name) st.name = slots_[i].name;
    st.kind = slots_[i].kind;
    st.ms = ms[i];
    st.calls = calls[i];
  }
  scratch_.stages.resize(n);
  copy_named(values, scratch_.values, values_copied_);
  copy_named(resources, scratch_.resources, resources_copied_);
  ++counters_.samples_emitted;
  if (callback_) {
    try {
      callback_(scratch_);
    } catch (...) {
      // A failing consumer must never reach the training loop; the sample is lost, not the step.
      ++counters_.dropped_steps;
    }
  }
}

}  // namespace laggard
