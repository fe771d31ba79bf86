// The CUDA-event backend. Build and test machines have no GPU: the real loader is checked for a
// clean fallback, and the backend's logic is checked against a fake driver (the same table of
// entry points libcuda.so.1 fills), including a Recorder that reads device marks only once the
// fake device has passed them.
#include "laggard/cuda.hpp"
#include "laggard/detail/cuda_driver.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "laggard/recorder.hpp"

namespace laggard {
namespace {

// ---------------------------------------------------------------------------------------------
// The real driver: absent here (or present without a context in a fresh test process).

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

TEST(CudaBackend, FallsBackWithAReasonWhenUnavailable) {
  // A thread that never touched CUDA has no current context: this fails on every machine.
  CudaBackendResult r;
  std::thread([&r] { r = make_cuda_backend(); }).join();
  EXPECT_EQ(r.backend, nullptr);
  ASSERT_FALSE(r.reason.empty());
  EXPECT_TRUE(starts_with(r.reason, "libcuda.so.1 could not be loaded: ") ||
              starts_with(r.reason, "no CUDA device") || starts_with(r.reason, "no CUDA driver") ||
              starts_with(r.reason, "no current CUDA context"))
      << r.reason;
}

TEST(CudaBackend, SecondCallGivesTheSameAnswer) {
  CudaBackendResult a;
  CudaBackendResult b;
  std::thread([&] {
    a = make_cuda_backend(64);
    b = make_cuda_backend(64);
  }).join();
  EXPECT_EQ(a.backend, nullptr);
  EXPECT_EQ(b.backend, nullptr);
  EXPECT_EQ(a.reason, b.reason);
}

TEST(CudaBackend, ExplicitDeviceEitherWorksOrSaysWhy) {
  CudaBackendResult r = make_cuda_backend(64, 0);
  if (r.backend) {  // a GPU machine
    EXPECT_STREQ(r.backend->name(), "cuda-event");
    EXPECT_EQ(r.backend->capacity(), 64u);
    EXPECT_TRUE(r.reason.empty());
  } else {
    EXPECT_FALSE(r.reason.empty());
  }
}

TEST(CudaBackend, ConcurrentCallsAreSafe) {
  std::vector<std::thread> threads;
  std::vector<std::string> reasons(4);
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([i, &reasons] { reasons[i] = make_cuda_backend(16).reason; });
  for (auto& t : threads) t.join();
  for (const auto& reason : reasons) EXPECT_EQ(reason, reasons[0]);
}

TEST(CudaBackend, RecorderWithoutBackendUsesTheHostClock) {
  CudaBackendResult r;
  std::thread([&r] { r = make_cuda_backend(); }).join();
  ASSERT_EQ(r.backend, nullptr);
  std::vector<StepSample> got;
  Recorder rec({1, {}, 4}, std::move(r.backend));
  rec.on_sample([&got](const StepSample& s) { got.push_back(s); });
  EXPECT_STREQ(rec.backend_name(), "host-clock");
  const auto fwd = rec.stage("forward");
  rec.begin_step(0);
  {
    Section s(rec, fwd);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  rec.end_step();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].stages.size(), 1u);
  EXPECT_GE(got[0].stages[0].ms, 1.0);
}

TEST(CudaBackend, FallbackIsLoggedOncePerReason) {
  EXPECT_TRUE(should_log_cuda_fallback("test reason A"));
  EXPECT_FALSE(should_log_cuda_fallback("test reason A"));
  EXPECT_TRUE(should_log_cuda_fallback("test reason B"));
  EXPECT_FALSE(should_log_cuda_fallback("test reason B"));
  EXPECT_FALSE(should_log_cuda_fallback("test reason A"));
}

// ---------------------------------------------------------------------------------------------
// A fake driver. Event handles are index + 1. The fake device completes recorded marks in
// record order, up to `completed` (a record sequence number) that the test advances.

constexpr int kSuccess = 0;
constexpr int kDeinitialized = 4;
constexpr int kNoDevice = 100;
constexpr int kInvalidHandle = 400;
constexpr int kNotReady = 600;

struct FakeEvent {
  bool destroyed = false;
  unsigned flags = 0;
  std::uint64_t seq = 0;  // 0 = never recorded
  void* stream = nullptr;
  double time_ms = 0.0;
};

struct Fake {
  int init_rc = kSuccess;
  int device_count = 2;
  void* current_ctx = reinterpret_cast<void*>(0x1000);
  int current_device = 0;          // CUdevice of the current context
  int retained = 0;
  int set_current_calls = 0;
  int create_fail_at = -1;         // cuEventCreate fails on this call (0-based), -1 never
  int record_rc = kSuccess;
  int query_rc = kSuccess;         // forced result for recorded+completed events
  int destroy_rc = kSuccess;
  int destroy_calls = 0;
  int elapsed_calls = 0;
  int elapsed_on_incomplete = 0;   // violations: elapsed time asked before completion
  int query_calls = 0;
  float forced_elapsed = -1.0f;    // >= 0 or < -1: returned as is (to test odd values)
  bool force_elapsed = false;
  std::uint64_t next_seq = 0;
  std::uint64_t completed = 0;     // marks with seq <= completed have been passed by the device
  double now_ms = 0.0;             // the fake device clock at the next record
  std::vector<FakeEvent> events;
};
Fake g;

FakeEvent* lookup(void* handle) {
  const auto i = reinterpret_cast<std::uintptr_t>(handle);
  if (i == 0 || i > g.events.size()) return nullptr;
  FakeEvent* e = &g.events[i - 1];
  return e->destroyed ? nullptr : e;
}
bool done(const FakeEvent& e) { return e.seq == 0 || e.seq <= g.completed; }

int fake_init(unsigned) { return g.init_rc; }
int fake_device_get_count(int* n) {
  *n = g.device_count;
  return kSuccess;
}
int fake_device_get(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= g.device_count) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *dev = ordinal;
  return kSuccess;
}
int fake_ctx_get_current(void** ctx) {
  *ctx = g.current_ctx;
  return kSuccess;
}
int fake_ctx_set_current(void* ctx) {
  ++g.set_current_calls;
  g.current_ctx = ctx;
  return kSuccess;
}
int fake_ctx_get_device(int* dev) {
  *dev = g.current_device;
  return kSuccess;
}
int fake_primary_ctx_retain(void** ctx, int dev) {
  ++g.retained;
  g.current_device = dev;
  *ctx = reinterpret_cast<void*>(static_cast<std::uintptr_t>(0x2000 + dev));
  return kSuccess;
}
int fake_event_create(void** ev, unsigned flags) {
  if (g.create_fail_at >= 0 && static_cast<int>(g.events.size()) == g.create_fail_at) return 2;
  g.events.push_back(FakeEvent{false, flags, 0, nullptr, 0.0});
  *ev = reinterpret_cast<void*>(static_cast<std::uintptr_t>(g.events.size()));
  return kSuccess;
}
int fake_event_record(void* ev, void* stream) {
  FakeEvent* e = lookup(ev);
  if (!e) return kInvalidHandle;
  if (g.record_rc != kSuccess) return g.record_rc;
  e->seq = ++g.next_seq;
  e->stream = stream;
  e->time_ms = g.now_ms;
  return kSuccess;
}
int fake_event_query(void* ev) {
  ++g.query_calls;
  FakeEvent* e = lookup(ev);
  if (!e) return kInvalidHandle;
  if (!done(*e)) return kNotReady;
  return g.query_rc;
}
int fake_event_elapsed_time(float* ms, void* a, void* b) {
  ++g.elapsed_calls;
  FakeEvent* s = lookup(a);
  FakeEvent* e = lookup(b);
  if (!s || !e || s->seq == 0 || e->seq == 0) return kInvalidHandle;
  if (!done(*s) || !done(*e)) {
    ++g.elapsed_on_incomplete;
    return kNotReady;
  }
  *ms = g.force_elapsed ? g.forced_elapsed : static_cast<float>(e->time_ms - s->time_ms);
  return kSuccess;
}
int fake_event_destroy(void* ev) {
  ++g.destroy_calls;
  if (g.destroy_rc != kSuccess) return g.destroy_rc;
  FakeEvent* e = lookup(ev);
  if (!e) return kInvalidHandle;
  e->destroyed = true;
  return kSuccess;
}
int fake_get_error_string(int rc, const char** text) {
  *text = rc == kNoDevice ? "no CUDA-capable device is detected" : "fake error";
  return kSuccess;
}

detail::CudaDriverApi fake_api() {
  detail::CudaDriverApi a;
  a.init = fake_init;
  a.device_get_count = fake_device_get_count;
  a.device_get = fake_device_get;
  a.ctx_get_current = fake_ctx_get_current;
  a.ctx_set_current = fake_ctx_set_current;
  a.ctx_get_device = fake_ctx_get_device;
  a.primary_ctx_retain = fake_primary_ctx_retain;
  a.event_create = fake_event_create;
  a.event_record = fake_event_record;
  a.event_query = fake_event_query;
  a.event_elapsed_time = fake_event_elapsed_time;
  a.event_destroy = fake_event_destroy;
  a.get_error_string = fake_get_error_string;
  return a;
}

class FakeDriver : public ::testing::Test {
 protected:
  void SetUp() override { g = Fake{}; }
  CudaBackendResult make(std::uint32_t capacity = 16, int device = -1) {
    return detail::make_cuda_backend_with(fake_api(), capacity, device);
  }
  int live_events() const {
    int n = 0;
    for (const auto& e : g.events) n += e.destroyed ? 0 : 1;
    return n;
  }
};

TEST_F(FakeDriver, CreatesTheWholePoolUpFrontWithTimingEvents) {
  auto r = make(16);
  ASSERT_NE(r.backend, nullptr) << r.reason;
  EXPECT_TRUE(r.reason.empty());
  EXPECT_STREQ(r.backend->name(), "cuda-event");
  EXPECT_EQ(r.backend->capacity(), 16u);
  ASSERT_EQ(g.events.size(), 16u);
  for (const auto& e : g.events) EXPECT_EQ(e.flags, 0u);  // CU_EVENT_DEFAULT: timing enabled
  EXPECT_EQ(g.retained, 0);                               // used the current context
  EXPECT_EQ(g.set_current_calls, 0);
}

TEST_F(FakeDriver, DestructorDestroysEveryEvent) {
  auto r = make(8);
  ASSERT_NE(r.backend, nullptr);
  r.backend.reset();
  EXPECT_EQ(g.destroy_calls, 8);
  EXPECT_EQ(live_events(), 0);
}

TEST_F(FakeDriver, DestructorAfterDriverShutdownDoesNotCrash) {
  auto r = make(8);
  ASSERT_NE(r.backend, nullptr);
  g.destroy_rc = kDeinitialized;  // process exit: the driver is gone
  r.backend.reset();
  EXPECT_EQ(g.destroy_calls, 1);  // stops at the first "deinitialized"
}

TEST_F(FakeDriver, NoDeviceAtInit) {
  g.init_rc = kNoDevice;
  auto r = make();
  EXPECT_EQ(r.backend, nullptr);
  EXPECT_EQ(r.reason, "no CUDA device");
  EXPECT_TRUE(g.events.empty());
}

TEST_F(FakeDriver, NoDeviceCounted) {
  g.device_count = 0;
  auto r = make();
  EXPECT_EQ(r.backend, nullptr);
  EXPECT_EQ(r.reason, "no CUDA device");
}

TEST_F(FakeDriver, StubLibraryIsNoDriver) {
  g.init_rc = 34;  // CUDA_ERROR_STUB_LIBRARY: the toolkit's libcuda stub was found
  auto r = make();
  EXPECT_EQ(r.backend, nullptr);
  EXPECT_TRUE(starts_with(r.reason, "no CUDA driver")) << r.reason;
}

TEST_F(FakeDriver, OtherInitErrorIsDescribed) {
  g.init_rc = 3;
  auto r = make();
  EXPECT_EQ(r.backend, nullptr);
  EXPECT_EQ(r.reason, "cuInit failed: CUDA error 3 (fake error)");
}

TEST_F(FakeDriver, NoCurrentContext) {
  g.current_ctx = nullptr;
  auto r = make(16, -1);
  EXPECT_EQ(r.backend, nullptr);
  EXPECT_TRUE(starts_with(r.reason, "no current CUDA context")) << r.reason;
  EXPECT_TRUE(g.events.empty());
  EXPECT_EQ(g.retained, 0);
}

TEST_F(FakeDriver, DeviceWithoutContextRetainsThePrimaryContext) {
  g.current_ctx = nullptr;
  auto r = make(16, 1);
  ASSERT_NE(r.backend, nullptr) << r.reason;
  EXPECT_EQ(g.retained, 1);
  EXPECT_EQ(g.set_current_calls, 1);
  EXPECT_EQ(g.current_ctx, reinterpret_cast<void*>(0x2001));
  // A second backend on the same thread finds the context current and retains nothing more.
  auto again = make(16, 1);
  ASSERT_NE(again.backend, nullptr) << again.reason;
  EXPECT_EQ(g.retained, 1);
}

TEST_F(FakeDriver, DeviceMismatchWithCurrentContextFailsAndChangesNothing) {
  g.current_device = 0;
  auto r = make(16, 1);
  EXPECT_EQ(r.backend, nullptr);
  EXPECT_FALSE(r.reason.empty());
  EXPECT_EQ(g.set_current_calls, 0);
  EXPECT_TRUE(g.events.empty());
  EXPECT_NE(make(16, 0).backend, nullptr);  // the current context's own device is fine
}

TEST_F(FakeDriver, BadArguments) {
  EXPECT_EQ(make(16, 2).reason, "CUDA device 2 does not exist (2 devices)");
  EXPECT_EQ(make(16, -2).backend, nullptr);
  EXPECT_EQ(make(0).backend, nullptr);
  EXPECT_EQ(make(1).backend, nullptr);
  EXPECT_FALSE(make(1).reason.empty());
  EXPECT_TRUE(g.events.empty());
}

TEST_F(FakeDriver, IncompleteTableIsRefused) {
  auto api = fake_api();
  api.event_query = nullptr;
  auto r = detail::make_cuda_backend_with(api, 16, -1);
  EXPECT_EQ(r.backend, nullptr);
  EXPECT_FALSE(r.reason.empty());
}

TEST_F(FakeDriver, CreationFailureReleasesWhatWasCreated) {
  g.create_fail_at = 5;
  auto r = make(16);
  EXPECT_EQ(r.backend, nullptr);
  EXPECT_EQ(r.reason, "cuEventCreate failed after 5 of 16 events: CUDA error 2 (fake error)");
  EXPECT_EQ(g.events.size(), 5u);
  EXPECT_EQ(live_events(), 0);
}

TEST_F(FakeDriver, RecordUsesTheStreamSetLast) {
  auto r = make(4);
  ASSERT_NE(r.backend, nullptr);
  auto& b = *r.backend;
  EXPECT_TRUE(b.record(0));
  EXPECT_EQ(g.events[0].stream, nullptr);  // the default stream until told otherwise
  void* stream = reinterpret_cast<void*>(0xabc);
  b.set_stream(stream);
  EXPECT_TRUE(b.record(1));
  EXPECT_EQ(g.events[1].stream, stream);
  EXPECT_FALSE(b.record(4));  // out of the pool
  g.record_rc = 2;
  EXPECT_FALSE(b.record(2));
}

TEST_F(FakeDriver, ElapsedOnlyOnceBothMarksCompleted) {
  auto r = make(4);
  ASSERT_NE(r.backend, nullptr);
  auto& b = *r.backend;
  g.now_ms = 10.0;
  ASSERT_TRUE(b.record(0));  // seq 1
  g.now_ms = 12.5;
  ASSERT_TRUE(b.record(1));  // seq 2
  double ms = -7.0;
  EXPECT_EQ(b.elapsed_ms(0, 1, ms), 0);  // nothing completed
  EXPECT_EQ(ms, -7.0);
  EXPECT_EQ(g.query_calls, 1);  // the end mark is asked first and stops it
  g.completed = 1;
  EXPECT_EQ(b.elapsed_ms(0, 1, ms), 0);  // start done, end not
  g.completed = 2;
  EXPECT_EQ(b.elapsed_ms(0, 1, ms), 1);
  EXPECT_DOUBLE_EQ(ms, 2.5);
  EXPECT_EQ(g.elapsed_calls, 1);
  EXPECT_EQ(g.elapsed_on_incomplete, 0);
}

TEST_F(FakeDriver, ElapsedErrors) {
  auto r = make(4);
  ASSERT_NE(r.backend, nullptr);
  auto& b = *r.backend;
  double ms = 0.0;
  EXPECT_EQ(b.elapsed_ms(0, 4, ms), -1);  // out of the pool
  EXPECT_EQ(b.elapsed_ms(0, 1, ms), -1);  // never recorded: the driver says invalid handle
  ASSERT_TRUE(b.record(0));
  ASSERT_TRUE(b.record(1));
  g.completed = 2;
  g.query_rc = 700;  // CUDA_ERROR_ILLEGAL_ADDRESS, say
  EXPECT_EQ(b.elapsed_ms(0, 1, ms), -1);
  g.query_rc = kSuccess;
  g.force_elapsed = true;
  g.forced_elapsed = -0.5f;  // marks on different streams, out of order
  EXPECT_EQ(b.elapsed_ms(0, 1, ms), -1);
  g.forced_elapsed = 0.0f;
  EXPECT_EQ(b.elapsed_ms(0, 1, ms), 1);
  EXPECT_EQ(ms, 0.0);
}

// The Recorder over the fake device: samples come out only when the device has passed the marks,
// with the device's times, and no call ever waits.
TEST_F(FakeDriver, RecorderReadsMarksOnlyOnceComplete) {
  auto r = make(64);
  ASSERT_NE(r.backend, nullptr);
  std::vector<StepSample> got;
  Recorder rec({1, {}, 4}, std::move(r.backend));
  rec.on_sample([&got](const StepSample& s) { got.push_back(s); });
  EXPECT_STREQ(rec.backend_name(), "cuda-event");
  const auto fwd = rec.stage("forward");
  const auto bwd = rec.stage("backward");

  for (int step = 0; step < 3; ++step) {
    rec.begin_step(step);
    for (int micro = 0; micro < 2; ++micro) {
      rec.begin(fwd);
      g.now_ms += 3.0;
      rec.end(fwd);
    }
    rec.begin(bwd);
    g.now_ms += 5.0;
    rec.end(bwd);
    rec.end_step();
  }
  EXPECT_TRUE(got.empty());  // the device has passed nothing yet
  EXPECT_EQ(g.elapsed_on_incomplete, 0);

  g.completed = 6;  // all of step 0's marks (2 + 2 + 2), none of step 1's
  rec.poll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step, 0);
  ASSERT_EQ(got[0].stages.size(), 2u);
  EXPECT_DOUBLE_EQ(got[0].stages[0].ms, 6.0);
  EXPECT_EQ(got[0].stages[0].calls, 2u);
  EXPECT_DOUBLE_EQ(got[0].stages[1].ms, 5.0);

  g.completed = 9;  // step 1 partly: its first forward interval and half of the second
  rec.poll();
  EXPECT_EQ(got.size(), 1u);

  g.completed = g.next_seq;
  rec.poll();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].step, 2);
  EXPECT_DOUBLE_EQ(got[2].stages[0].ms, 6.0);
  EXPECT_EQ(g.elapsed_on_incomplete, 0);
  EXPECT_EQ(rec.counters().dropped_steps, 0u);
  EXPECT_EQ(rec.counters().dropped_intervals, 0u);
}

TEST_F(FakeDriver, RecorderDropsTheOldestStepWhenTheDeviceFallsBehind) {
  auto r = make(64);
  ASSERT_NE(r.backend, nullptr);
  std::vector<StepSample> got;
  Recorder rec({1, {}, 2}, std::move(r.backend));
  rec.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto fwd = rec.stage("forward");
  for (int step = 0; step < 5; ++step) {
    rec.begin_step(step);
    { Section s(rec, fwd); }
    rec.end_step();
  }
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(rec.counters().dropped_steps, 3u);  // never blocked waiting for the device
  g.completed = g.next_seq;
  rec.poll();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].step, 3);
  EXPECT_EQ(got[1].step, 4);
}

TEST_F(FakeDriver, RecordFailureIsCountedNotFatal) {
  auto r = make(64);
  ASSERT_NE(r.backend, nullptr);
  std::vector<StepSample> got;
  Recorder rec({1, {}, 4}, std::move(r.backend));
  rec.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto fwd = rec.stage("forward");
  g.record_rc = 2;
  rec.begin_step(0);
  { Section s(rec, fwd); }
  rec.end_step();
  EXPECT_EQ(rec.counters().dropped_intervals, 1u);
  g.record_rc = kSuccess;
  rec.poll();
  ASSERT_EQ(got.size(), 1u);  // a step with no device interval is emitted with no stages
  EXPECT_TRUE(got[0].stages.empty());
}

TEST_F(FakeDriver, RecorderWaitsForADeferredValueOnlyOnceTheMarksAreComplete) {
  // The loss of each step is deferred (copied to the host without waiting) and resolved at
  // different times: before the device is done, after it, and never.
  auto r = make(64);
  ASSERT_NE(r.backend, nullptr);
  std::vector<StepSample> got;
  RecorderOptions o;
  o.interval = 1;
  o.max_pending_steps = 4;
  o.max_deferred_polls = 2;
  Recorder rec(o, std::move(r.backend));
  rec.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto fwd = rec.stage("forward");
  std::vector<Recorder::DeferToken> tokens;
  for (int step = 0; step < 3; ++step) {
    rec.begin_step(step);
    rec.begin(fwd);
    g.now_ms += 4.0;
    rec.end(fwd);
    tokens.push_back(rec.defer("loss"));
    rec.end_step();
  }
  EXPECT_TRUE(rec.resolve(tokens[0], 10.0));  // before the device has passed step 0
  g.completed = 2;  // step 0's marks
  rec.poll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].find_value("loss")->value, 10.0);
  EXPECT_DOUBLE_EQ(got[0].stages[0].ms, 4.0);

  g.completed = 4;  // step 1's marks; its loss is not there yet
  rec.poll();
  EXPECT_EQ(got.size(), 1u);
  EXPECT_TRUE(rec.resolve(tokens[1], 11.0));
  rec.poll();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].find_value("loss")->value, 11.0);

  g.completed = g.next_seq;  // step 2's marks; its loss never comes
  rec.poll();
  rec.poll();
  EXPECT_EQ(got.size(), 2u);
  rec.poll();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].find_value("loss"), nullptr);
  EXPECT_EQ(rec.counters().deferred_dropped, 1u);
  EXPECT_EQ(rec.counters().dropped_steps, 0u);
  EXPECT_EQ(g.elapsed_on_incomplete, 0);
}

}  // namespace
}  // namespace laggard
