#include "laggard/recorder.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace laggard
