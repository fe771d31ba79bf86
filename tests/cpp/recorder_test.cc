#include "laggard/recorder.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "live/sample_ring.hpp"

namespace laggard {
namespace {

TEST(Recorder, SamplesEveryIntervalthStep) {
  std::vector<StepSample> got;
  Recorder r({/*interval=*/3, {2, 4, 0, "node-a", "pp0"}, 4});
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto fwd = r.stage("forward");
  for (int step = 0; step < 10; ++step) {
    r.begin_step(step);
    { Section s(r, fwd); }
    r.end_step();
  }
  ASSERT_EQ(got.size(), 4u);  // steps 0, 3, 6, 9
  EXPECT_EQ(got[0].step, 0);
  EXPECT_EQ(got[1].step, 3);
  EXPECT_EQ(got[3].step, 9);
  EXPECT_EQ(got[0].rank, 2);
  EXPECT_EQ(got[0].world_size, 4);
  EXPECT_EQ(got[0].host, "node-a");
  EXPECT_EQ(got[0].cohort, "pp0");
  EXPECT_EQ(r.counters().sampled_steps, 4u);
}

TEST(Recorder, IntervalZeroIsOff) {
  std::vector<StepSample> got;
  Recorder r({0, {}, 4});
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto fwd = r.stage("forward");
  EXPECT_FALSE(r.enabled());
  for (int step = 0; step < 5; ++step) {
    r.begin_step(step);
    EXPECT_FALSE(r.sampled());
    { Section s(r, fwd); }
    r.end_step();
  }
  EXPECT_TRUE(got.empty());
}

TEST(Recorder, NegativeIntervalIsRejected) {
  EXPECT_THROW(Recorder({-1, {}, 4}), std::invalid_argument);
}

TEST(Recorder, RepeatedStageAccumulatesAndCountsCalls) {
  std::vector<StepSample> got;
  Recorder r({1, {}, 4});
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto fwd = r.stage("forward");
  const auto comm = r.stage("communication");
  r.begin_step(0);
  for (int micro = 0; micro < 4; ++micro) {
    Section s(r, fwd);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  { Section s(r, comm); }
  r.end_step();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].stages.size(), 2u);
  EXPECT_EQ(got[0].stages[0].name, "forward");
  EXPECT_EQ(got[0].stages[0].calls, 4u);
  EXPECT_GE(got[0].stages[0].ms, 8.0);
  EXPECT_EQ(got[0].stages[1].kind, StageKind::communication);
  EXPECT_GE(got[0].step_ms, got[0].stages[0].ms);
}

TEST(Recorder, CancelledEntriesAreNotCounted) {
  std::vector<StepSample> got;
  Recorder r({1, {}, 4});
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto bwd = r.stage("backward");
  const auto opt = r.stage("optimizer");
  r.begin_step(0);
  r.begin(bwd);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  r.cancel(bwd);  // this long entry is dropped
  r.cancel(opt);  // not open: nothing happens
  r.cancel(-1);   // no such stage: nothing happens
  { Section s(r, bwd); }  // a short entry that counts
  r.end_step();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].stages.size(), 1u);
  EXPECT_EQ(got[0].stages[0].name, "backward");
  EXPECT_EQ(got[0].stages[0].calls, 1u);
  EXPECT_LT(got[0].stages[0].ms, 10.0);
  EXPECT_EQ(r.counters().unbalanced, 0u);
  // A stage cancelled and never entered again is left out of the sample.
  r.begin_step(1);
  r.begin(bwd);
  r.cancel(bwd);
  { Section s(r, opt); }
  r.end_step();
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(got[1].stages.size(), 1u);
  EXPECT_EQ(got[1].stages[0].name, "optimizer");
  EXPECT_EQ(r.counters().unbalanced, 0u);
}

TEST(Recorder, StagesNotEnteredAreLeftOut) {
  std::vector<StepSample> got;
  Recorder r({1, {}, 4});
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto a = r.stage("forward");
  const auto b = r.stage("backward");
  r.begin_step(0);
  { Section s(r, b); }
  r.end_step();
  r.begin_step(1);
  { Section s(r, a); }
  { Section s(r, b); }
  r.end_step();
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(got[0].stages.size(), 1u);
  EXPECT_EQ(got[0].stages[0].name, "backward");
  ASSERT_EQ(got[1].stages.size(), 2u);
  EXPECT_EQ(got[1].stages[0].name, "forward");
}

TEST(Recorder, ExtraStagesBeyondSlotsAreDroppedAndCounted) {
  std::vector<StepSample> got;
  Recorder r({1, {}, 4});
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  std::vector<Recorder::StageId> ids;
  for (int i = 0; i < Recorder::kMaxStages + 3; ++i) ids.push_back(r.stage("s" + std::to_string(i)));
  EXPECT_EQ(ids[Recorder::kMaxStages - 1], Recorder::kMaxStages - 1);
  EXPECT_EQ(ids[Recorder::kMaxStages], -1);
  r.begin_step(0);
  for (auto id : ids) {
    Section s(r, id);
  }
  r.end_step();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].stages.size(), static_cast<std::size_t>(Recorder::kMaxStages));
  EXPECT_EQ(r.counters().dropped_stages, 3u);
}

TEST(Recorder, AddedDurationsJoinTheStage) {
  std::vector<StepSample> got;
  Recorder r({2, {}, 4});
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto comm = r.stage("communication");
  r.begin_step(1);  // not sampled: ignored
  r.add(comm, 100.0);
  r.end_step();
  r.begin_step(2);
  r.add(comm, 2.5);
  r.add(comm, 1.5, 2);
  r.add(comm, -1.0);  // not a duration
  r.end_step();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].stages.size(), 1u);
  EXPECT_DOUBLE_EQ(got[0].stages[0].ms, 4.0);
  EXPECT_EQ(got[0].stages[0].calls, 3u);
  EXPECT_EQ(got[0].stages[0].kind, StageKind::communication);
}

TEST(Recorder, StageLookupIsStable) {
  Recorder r({1, {}, 4});
  EXPECT_EQ(r.stage("forward"), r.stage("forward"));
  EXPECT_NE(r.stage("forward"), r.stage("backward"));
}

TEST(Recorder, UnbalancedSectionsAreCountedNotFatal) {
  std::vector<StepSample> got;
  Recorder r({1, {}, 4});
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto a = r.stage("forward");
  r.begin_step(0);
  r.end(a);    // end without begin
  r.begin(a);  // left open at end of step
  r.end_step();
  EXPECT_EQ(r.counters().unbalanced, 2u);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].stages.empty());
}

TEST(Recorder, ThrowingCallbackDoesNotEscape) {
  Recorder r({1, {}, 4});
  r.on_sample([](const StepSample&) { throw std::runtime_error("sink failed"); });
  const auto a = r.stage("forward");
  for (int step = 0; step < 3; ++step) {
    r.begin_step(step);
    { Section s(r, a); }
    EXPECT_NO_THROW(r.end_step());
  }
  EXPECT_EQ(r.counters().dropped_steps, 3u);
}

// A device backend whose marks complete only when the test says so, as a GPU would later.
class ManualBackend : public TimingBackend {
 public:
  const char* name() const noexcept override { return "manual"; }
  std::uint32_t capacity() const noexcept override { return 1000; }
  bool record(std::uint32_t id) noexcept override {
    recorded.push_back(id);
    return true;
  }
  int elapsed_ms(std::uint32_t start, std::uint32_t, double& ms) noexcept override {
    ++queries;
    if (fail) return -1;
    if (!complete) return 0;
    ms = 1.5 + start * 0.0;  // each interval 1.5 ms
    return 1;
  }
  bool complete = false;
  bool fail = false;
  int queries = 0;
  std::vector<std::uint32_t> recorded;
};

TEST(Recorder, DeviceSamplesArriveOnlyOnceMarksComplete) {
  auto backend = std::make_unique<ManualBackend>();
  ManualBackend* dev = backend.get();
  std::vector<StepSample> got;
  Recorder r({1, {}, 4}, std::move(backend));
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  EXPECT_STREQ(r.backend_name(), "manual");
  const auto fwd = r.stage("forward");
  r.begin_step(0);
  { Section s(r, fwd); }
  { Section s(r, fwd); }
  r.end_step();
  EXPECT_TRUE(got.empty());  // not complete: nothing waits, nothing is emitted
  EXPECT_EQ(dev->recorded.size(), 4u);
  dev->complete = true;
  r.poll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_DOUBLE_EQ(got[0].stages[0].ms, 3.0);
  EXPECT_EQ(got[0].stages[0].calls, 2u);
}

TEST(Recorder, DeviceFallingBehindDropsOldestStep) {
  auto backend = std::make_unique<ManualBackend>();
  ManualBackend* dev = backend.get();
  std::vector<StepSample> got;
  Recorder r({1, {}, 2}, std::move(backend));
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto fwd = r.stage("forward");
  for (int step = 0; step < 5; ++step) {
    r.begin_step(step);
    { Section s(r, fwd); }
    r.end_step();
  }
  EXPECT_EQ(r.counters().dropped_steps, 3u);
  dev->complete = true;
  r.poll();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].step, 3);
  EXPECT_EQ(got[1].step, 4);
}

TEST(Recorder, DeviceCancelledEntryIsNotTimed) {
  auto backend = std::make_unique<ManualBackend>();
  ManualBackend* dev = backend.get();
  std::vector<StepSample> got;
  Recorder r({1, {}, 4}, std::move(backend));
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto bwd = r.stage("backward");
  r.begin_step(0);
  r.begin(bwd);
  r.cancel(bwd);  // its start mark was recorded; it is not used
  { Section s(r, bwd); }
  r.end_step();
  dev->complete = true;
  r.poll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_DOUBLE_EQ(got[0].stages[0].ms, 1.5);  // one interval, not two
  EXPECT_EQ(got[0].stages[0].calls, 1u);
  EXPECT_EQ(r.counters().unbalanced, 0u);
}

TEST(Recorder, DeviceErrorDropsTheStep) {
  auto backend = std::make_unique<ManualBackend>();
  ManualBackend* dev = backend.get();
  std::vector<StepSample> got;
  Recorder r({1, {}, 4}, std::move(backend));
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const auto fwd = r.stage("forward");
  r.begin_step(0);
  { Section s(r, fwd); }
  dev->fail = true;
  r.end_step();
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(r.counters().dropped_steps, 1u);
}

TEST(Recorder, RecordedValuesLandInSampledStepsOnlyBitForBit) {
  std::vector<StepSample> got;
  Recorder r({/*interval=*/2, {0, 1, 0, "", ""}, 4});
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int step = 0; step < 4; ++step) {
    r.begin_step(step);
    r.record("loss", step == 2 ? nan : 0.1 + 0.2);
    if (step == 0) r.record("tokens", 4096.0);
    r.record_resource("host_gc_pause_ms", -std::numeric_limits<double>::infinity());
    r.end_step();
  }
  ASSERT_EQ(got.size(), 2u);  // steps 0 and 2; the values of steps 1 and 3 went nowhere
  ASSERT_EQ(got[0].values.size(), 2u);
  EXPECT_EQ(got[0].values[0].name, "loss");
  EXPECT_EQ(got[0].values[0].value, 0.1 + 0.2);
  EXPECT_EQ(got[0].find_value("tokens")->value, 4096.0);
  ASSERT_EQ(got[1].values.size(), 1u);  // tokens was not recorded in step 2
  EXPECT_TRUE(std::isnan(got[1].values[0].value));
  ASSERT_EQ(got[1].resources.size(), 1u);
  EXPECT_TRUE(std::isinf(got[1].resources[0].value));
}

TEST(Recorder, ValuesBeyondTheSlotsAreDroppedAndCounted) {
  std::vector<StepSample> got;
  Recorder r({/*interval=*/1, {0, 1, 0, "", ""}, 4});
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  r.begin_step(0);
  for (int i = 0; i < Recorder::kMaxValues + 3; ++i) r.record("v" + std::to_string(i), i);
  r.end_step();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].values.size(), static_cast<std::size_t>(Recorder::kMaxValues));
  EXPECT_EQ(r.counters().dropped_values, 3u);
}

// ---------------------------------------------------------------------------------------------
// Deferred values: a value (the loss on a GPU) that becomes known after the step was recorded.

// A device recorder at interval 1 with a manual backend; `got` collects the samples.
struct DeferFixture {
  explicit DeferFixture(int max_pending = 4, int max_deferred_polls = 8) {
    auto backend = std::make_unique<ManualBackend>();
    dev = backend.get();
    RecorderOptions o;
    o.interval = 1;
    o.max_pending_steps = max_pending;
    o.max_deferred_polls = max_deferred_polls;
    rec = std::make_unique<Recorder>(o, std::move(backend));
    rec->on_sample([this](const StepSample& s) { got.push_back(s); });
    fwd = rec->stage("forward");
  }
  // One step with a forward section; the loss deferred in it; returns the token.
  Recorder::DeferToken step(std::int64_t n) {
    rec->begin_step(n);
    { Section s(*rec, fwd); }
    const auto token = rec->defer("loss");
    rec->record("tokens", 4096.0);
    rec->end_step();
    return token;
  }
  ManualBackend* dev = nullptr;
  std::unique_ptr<Recorder> rec;
  std::vector<StepSample> got;
  Recorder::StageId fwd = -1;
};

TEST(RecorderDefer, ValueResolvedBeforeTheMarksCompleteIsInTheSample) {
  DeferFixture f;
  f.rec->begin_step(0);
  { Section s(*f.rec, f.fwd); }
  const auto token = f.rec->defer("loss");
  EXPECT_NE(token, 0u);
  EXPECT_TRUE(f.rec->resolve(token, 2.5));  // while the step is still being recorded
  EXPECT_FALSE(f.rec->resolve(token, 9.0));  // once only
  f.rec->end_step();
  const auto token1 = f.step(1);
  EXPECT_TRUE(f.rec->resolve(token1, 1.25));  // after end_step, before the device is done
  EXPECT_TRUE(f.got.empty());
  f.dev->complete = true;
  f.rec->poll();
  ASSERT_EQ(f.got.size(), 2u);
  ASSERT_NE(f.got[0].find_value("loss"), nullptr);
  EXPECT_EQ(f.got[0].find_value("loss")->value, 2.5);
  EXPECT_EQ(f.got[1].find_value("loss")->value, 1.25);
  EXPECT_EQ(f.got[1].find_value("tokens")->value, 4096.0);
  EXPECT_DOUBLE_EQ(f.got[1].stages[0].ms, 1.5);
  EXPECT_EQ(f.rec->counters().deferred_dropped, 0u);
  EXPECT_EQ(f.rec->counters().dropped_steps, 0u);
}

TEST(RecorderDefer, CompleteStepWaitsForItsValueAndLaterStepsWaitBehindIt) {
  DeferFixture f;
  const auto t0 = f.step(0);
  const auto t1 = f.step(1);
  EXPECT_TRUE(f.rec->resolve(t1, 1.0));  // the second's value first
  f.dev->complete = true;
  f.rec->poll();
  EXPECT_TRUE(f.got.empty());  // step 0 waits for its loss; step 1 behind it, in order
  f.rec->poll();
  EXPECT_TRUE(f.got.empty());
  EXPECT_TRUE(f.rec->resolve(t0, 0.5));
  f.rec->poll();
  ASSERT_EQ(f.got.size(), 2u);
  EXPECT_EQ(f.got[0].step, 0);
  EXPECT_EQ(f.got[0].find_value("loss")->value, 0.5);
  EXPECT_EQ(f.got[1].step, 1);
  EXPECT_EQ(f.got[1].find_value("loss")->value, 1.0);
  EXPECT_EQ(f.rec->counters().deferred_dropped, 0u);
  EXPECT_EQ(f.rec->counters().samples_emitted, 2u);
}

TEST(RecorderDefer, NeverResolvedGoesAfterTheBoundedPollsCountedSampleKept) {
  DeferFixture f(/*max_pending=*/4, /*max_deferred_polls=*/3);
  const auto token = f.step(0);
  f.rec->poll();  // marks not complete: this poll does not count against the value
  f.dev->complete = true;
  for (int i = 0; i < 3; ++i) {
    f.rec->poll();
    EXPECT_TRUE(f.got.empty()) << "poll " << i;
  }
  f.rec->poll();  // the fourth poll with the marks complete: it goes without the loss
  ASSERT_EQ(f.got.size(), 1u);
  EXPECT_EQ(f.got[0].find_value("loss"), nullptr);
  EXPECT_EQ(f.got[0].find_value("tokens")->value, 4096.0);  // the rest of the sample is whole
  ASSERT_EQ(f.got[0].stages.size(), 1u);
  EXPECT_EQ(f.rec->counters().deferred_dropped, 1u);
  EXPECT_EQ(f.rec->counters().dropped_steps, 0u);
  EXPECT_FALSE(f.rec->resolve(token, 1.0));  // too late: nothing changes
  EXPECT_EQ(f.rec->counters().samples_emitted, 1u);
}

TEST(RecorderDefer, ZeroPollsEmitsAtOnce) {
  DeferFixture f(/*max_pending=*/4, /*max_deferred_polls=*/0);
  f.dev->complete = true;
  f.step(0);  // end_step polls: complete, nothing to wait for
  ASSERT_EQ(f.got.size(), 1u);
  EXPECT_EQ(f.got[0].find_value("loss"), nullptr);
  EXPECT_EQ(f.rec->counters().deferred_dropped, 1u);
}

TEST(RecorderDefer, FullQueueEmitsTheOldestWithoutItsValueInsteadOfDroppingIt) {
  DeferFixture f(/*max_pending=*/2, /*max_deferred_polls=*/1000);
  f.dev->complete = true;
  const auto t0 = f.step(0);
  const auto t1 = f.step(1);
  EXPECT_TRUE(f.got.empty());  // both complete, both waiting for their loss
  const auto t2 = f.step(2);   // the queue was full: step 0 goes, without its loss
  ASSERT_EQ(f.got.size(), 1u);
  EXPECT_EQ(f.got[0].step, 0);
  EXPECT_EQ(f.got[0].find_value("loss"), nullptr);
  EXPECT_EQ(f.rec->counters().deferred_dropped, 1u);
  EXPECT_EQ(f.rec->counters().dropped_steps, 0u);
  EXPECT_FALSE(f.rec->resolve(t0, 1.0));
  EXPECT_TRUE(f.rec->resolve(t1, 1.0));
  EXPECT_TRUE(f.rec->resolve(t2, 2.0));
  f.rec->poll();
  ASSERT_EQ(f.got.size(), 3u);
  EXPECT_EQ(f.got[2].find_value("loss")->value, 2.0);
  EXPECT_EQ(f.rec->counters().deferred_dropped, 1u);
}

TEST(RecorderDefer, FullQueueOfIncompleteStepsStillDropsTheOldest) {
  DeferFixture f(/*max_pending=*/2, /*max_deferred_polls=*/1000);
  for (int step = 0; step < 4; ++step) f.step(step);  // the device passes nothing
  EXPECT_EQ(f.rec->counters().dropped_steps, 2u);  // as without deferred values
  EXPECT_EQ(f.rec->counters().deferred_dropped, 0u);  // counted with its step, not again
}

TEST(RecorderDefer, FlushEmitsCompleteStepsWithoutTheirMissingValues) {
  DeferFixture f;
  const auto t0 = f.step(0);
  const auto t1 = f.step(1);
  EXPECT_TRUE(f.rec->resolve(t1, 3.0));
  f.rec->flush();  // marks not complete: flush does not wait for the device either
  EXPECT_TRUE(f.got.empty());
  f.dev->complete = true;
  f.rec->flush();
  ASSERT_EQ(f.got.size(), 2u);
  EXPECT_EQ(f.got[0].find_value("loss"), nullptr);
  EXPECT_EQ(f.got[1].find_value("loss")->value, 3.0);
  EXPECT_EQ(f.rec->counters().deferred_dropped, 1u);
  EXPECT_FALSE(f.rec->resolve(t0, 1.0));
}

TEST(RecorderDefer, DeviceErrorDropsTheStepWithItsValues) {
  DeferFixture f;
  f.step(0);
  f.dev->fail = true;
  f.rec->poll();
  EXPECT_TRUE(f.got.empty());
  EXPECT_EQ(f.rec->counters().dropped_steps, 1u);
  EXPECT_EQ(f.rec->counters().deferred_dropped, 0u);
}

TEST(RecorderDefer, LaterRecordOrDeferOfTheNameReplacesIt) {
  DeferFixture f;
  f.rec->begin_step(0);
  const auto a = f.rec->defer("loss");
  f.rec->record("loss", 7.0);  // replaces the deferred one
  EXPECT_FALSE(f.rec->resolve(a, 1.0));
  f.rec->end_step();
  f.rec->begin_step(1);
  f.rec->record("loss", 7.0);
  const auto b = f.rec->defer("loss");  // replaces the recorded one
  const auto c = f.rec->defer("loss");  // and this the deferred one (gradient accumulation)
  EXPECT_NE(b, c);
  EXPECT_FALSE(f.rec->resolve(b, 1.0));
  EXPECT_TRUE(f.rec->resolve(c, 2.0));
  f.rec->end_step();
  f.dev->complete = true;
  f.rec->poll();
  ASSERT_EQ(f.got.size(), 2u);
  EXPECT_EQ(f.got[0].find_value("loss")->value, 7.0);
  EXPECT_EQ(f.got[1].find_value("loss")->value, 2.0);
  EXPECT_EQ(f.rec->counters().deferred_dropped, 0u);
}

TEST(RecorderDefer, NothingIsDeferredOnStepsNotSampledOrBeyondTheNames) {
  auto backend = std::make_unique<ManualBackend>();
  ManualBackend* dev = backend.get();
  std::vector<StepSample> got;
  Recorder r({2, {}, 4}, std::move(backend));
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  r.begin_step(1);
  EXPECT_EQ(r.defer("loss"), 0u);  // not sampled
  r.end_step();
  EXPECT_FALSE(r.resolve(0, 1.0));
  r.begin_step(2);
  for (int i = 0; i < Recorder::kMaxValues; ++i) r.record("v" + std::to_string(i), i);
  EXPECT_EQ(r.defer("loss"), 0u);  // no name slot left: dropped_values, as for record
  EXPECT_EQ(r.counters().dropped_values, 1u);
  EXPECT_FALSE(r.resolve(0xfffu, 1.0));  // a made-up token
  r.end_step();
  dev->complete = true;
  r.poll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(r.counters().deferred_dropped, 0u);
}

TEST(RecorderDefer, HostClockDefersNothingAndEmitsAtEndStep) {
  std::vector<StepSample> got;
  Recorder r({1, {}, 4});
  r.on_sample([&got](const StepSample& s) { got.push_back(s); });
  r.begin_step(0);
  EXPECT_EQ(r.defer("loss"), 0u);  // the caller records the value itself, as before
  r.record("loss", 0.75);
  r.end_step();
  ASSERT_EQ(got.size(), 1u);  // at end_step, as always
  EXPECT_EQ(got[0].find_value("loss")->value, 0.75);
  r.flush();  // nothing pending: nothing happens
  EXPECT_EQ(got.size(), 1u);
  EXPECT_EQ(r.counters().deferred_dropped, 0u);
}

TEST(RecorderDefer, NegativePollBoundIsRejected) {
  RecorderOptions o;
  o.max_deferred_polls = -1;
  EXPECT_THROW(Recorder r(o), std::invalid_argument);
}


// The Analyzer's path: sampled steps as numbers by slot into a StepRing, the samples built by
// the consumer from the names it was given. They must equal what on_sample hands out.
void expect_same_sample(const StepSample& a, const StepSample& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.host, b.host);
  EXPECT_EQ(a.cohort, b.cohort);
  EXPECT_TRUE(std::isnan(a.work) && std::isnan(b.work));
  ASSERT_EQ(a.stages.size(), b.stages.size());
  for (std::size_t i = 0; i < a.stages.size(); ++i) {
    EXPECT_EQ(a.stages[i].name, b.stages[i].name);
    EXPECT_EQ(a.stages[i].kind, b.stages[i].kind);
    EXPECT_EQ(a.stages[i].calls, b.stages[i].calls);
    EXPECT_GE(a.stages[i].ms, 0.0);
    EXPECT_GE(b.stages[i].ms, 0.0);
  }
  for (const auto* pair : {&a.values, &a.resources}) {
    const auto& other = pair == &a.values ? b.values : b.resources;
    ASSERT_EQ(pair->size(), other.size());
    for (std::size_t i = 0; i < pair->size(); ++i) {
      EXPECT_EQ((*pair)[i].name, other[i].name);
      EXPECT_EQ(std::memcmp(&(*pair)[i].value, &other[i].value, sizeof(double)), 0);
    }
  }
}

// Runs the same calls on a recorder with on_sample and on one with a StepRing; returns both
// recorders' samples (the ring's popped after each step, as the log writer would).
void run_twins(std::unique_ptr<TimingBackend> dev_a, std::unique_ptr<TimingBackend> dev_b,
               ManualBackend* complete_a, ManualBackend* complete_b) {
  const RankInfo who{3, 8, 1, "node-b", "tp1"};
  Recorder a({2, who, 4}, std::move(dev_a));
  Recorder b({2, who, 4}, std::move(dev_b));
  std::vector<StepSample> got_a, got_b;
  a.on_sample([&got_a](const StepSample& s) { got_a.push_back(s); });
  b.on_sample([](const StepSample&) { ADD_FAILURE() << "on_sample called with a raw sink"; });
  StepRing ring(4);
  ring.set_source(who, nullptr);
  const std::string long_name(70, 'x');  // beyond the names' reserved 32 characters
  // Names registered before the sink is set are handed over at once, later ones as they come.
  for (Recorder* r : {&a, &b}) {
    r->stage("dataloader");
    r->stage("forward");
  }
  b.set_raw_sink(&ring);
  StepSample popped;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int step = 0; step < 12; ++step) {
    for (Recorder* r : {&a, &b}) {
      r->begin_step(step);
      const auto fwd = r->stage("forward");
      const auto comm = r->stage("communication", StageKind::communication);
      { Section s(*r, fwd); }
      if (step % 4 == 0) {  // some steps enter a stage the others leave out
        Section s(*r, comm);
        r->add(comm, 0.25);
      }
      if (step == 6) r->begin(r->stage(long_name));  // never ended: dropped, counted
      r->record("loss", step == 4 ? nan : 1.0 / (step + 1));
      if (step >= 4) r->record(long_name, -0.0);
      r->record_resource("host_cpu_util_pct", 12.5);
      const int slot = r->resource_slot("host_gc_collections");
      if (step != 8) r->record_resource_at(slot, step);
      if (step % 4 == 2) {
        // Readings by slot handed to end_step: recorded after the others (the slot recorded
        // during the step takes the later value), a new name's slot, a slot < 0 left out.
        const std::int8_t slots[] = {
            static_cast<std::int8_t>(r->resource_slot("host_mem_rss_mb")),
            static_cast<std::int8_t>(slot), -1};
        const double values[] = {step * 1.5, -2.0, 7.0};
        r->end_step(std::chrono::steady_clock::now(), {slots, values, 3});
      } else {
        r->end_step();
      }
    }
    if (complete_a != nullptr) {
      complete_a->complete = complete_b->complete = true;
      a.poll();
      b.poll();
    }
    while (ring.pop(popped)) got_b.push_back(popped);
  }
  ASSERT_EQ(got_a.size(), 6u);
  ASSERT_EQ(got_b.size(), got_a.size());
  for (std::size_t i = 0; i < got_a.size(); ++i) expect_same_sample(got_a[i], got_b[i]);
  EXPECT_EQ(got_b[2].stages.size(), 2u);  // step 4: forward and communication
  EXPECT_EQ(got_b[2].stages[1].kind, StageKind::communication);
  EXPECT_TRUE(std::isnan(got_b[2].values[0].value));
  EXPECT_EQ(got_b[3].values[1].name, long_name);
  EXPECT_TRUE(std::signbit(got_b[3].values[1].value));
  EXPECT_EQ(got_b[4].resources.size(), 1u);  // step 8: host_gc_collections not recorded
  for (const std::size_t i : {1u, 3u}) {  // steps 2 and 6: the readings handed to end_step
    ASSERT_EQ(got_b[i].resources.size(), 3u);
    EXPECT_EQ(got_b[i].resources[1].name, "host_gc_collections");
    EXPECT_EQ(got_b[i].resources[1].value, -2.0);
    EXPECT_EQ(got_b[i].resources[2].name, "host_mem_rss_mb");
    EXPECT_EQ(got_b[i].resources[2].value, static_cast<double>(got_b[i].step) * 1.5);
  }
  EXPECT_EQ(a.counters().samples_emitted, b.counters().samples_emitted);
  EXPECT_EQ(a.counters().unbalanced, b.counters().unbalanced);
  EXPECT_EQ(ring.dropped(), 0u);
}

TEST(RecorderRawSink, HostClockSamplesEqualOnSample) { run_twins(nullptr, nullptr, nullptr, nullptr); }

TEST(RecorderRawSink, DeviceSamplesEqualOnSample) {
  auto dev_a = std::make_unique<ManualBackend>();
  auto dev_b = std::make_unique<ManualBackend>();
  ManualBackend* a = dev_a.get();
  ManualBackend* b = dev_b.get();
  run_twins(std::move(dev_a), std::move(dev_b), a, b);
}

TEST(RecorderRawSink, FullRingDropsAndCountsTheStepNeverWaits) {
  Recorder r({1, {0, 1, 0, "h", ""}, 4});
  StepRing ring(2);
  ring.set_source({0, 1, 0, "h", ""}, nullptr);
  r.set_raw_sink(&ring);
  const auto fwd = r.stage("forward");
  for (int step = 0; step < 5; ++step) {
    r.begin_step(step);
    { Section s(r, fwd); }
    r.end_step();
  }
  EXPECT_EQ(r.counters().samples_emitted, 5u);
  EXPECT_EQ(ring.dropped(), 3u);
  StepSample s;
  ASSERT_TRUE(ring.pop(s));
  EXPECT_EQ(s.step, 0);
  EXPECT_EQ(s.host, "h");
  ASSERT_EQ(s.stages.size(), 1u);
  EXPECT_EQ(s.stages[0].name, "forward");
  ASSERT_TRUE(ring.pop(s));
  EXPECT_EQ(s.step, 1);
  EXPECT_FALSE(ring.pop(s));
  EXPECT_TRUE(ring.empty());
  r.begin_step(5);  // room again
  r.end_step();
  ASSERT_TRUE(ring.pop(s));
  EXPECT_EQ(s.step, 5);
  EXPECT_TRUE(s.stages.empty());
}

}  // namespace
}  // namespace laggard
