#include "laggard/summary.hpp"

#include <gtest/gtest.h>

namespace laggard {
namespace {

// One window of a data-parallel job: every rank runs forward then waits in the all-reduce for
// the slowest; `slow` maps rank → forward multiplier.
Window make_window(std::int64_t step, int world, const std::vector<double>& forward_ms) {
  Window w;
  w.step = step;
  double slowest = 0.0;
  for (double f : forward_ms) slowest = std::max(slowest, f);
  for (int r = 0; r < world; ++r) {
    StepSample s;
    s.rank = r;
    s.world_size = world;
    s.step = step;
    s.host = "node-" + std::to_string(r / 2);
    s.cohort = "dp";
    const double fwd = forward_ms[static_cast<std::size_t>(r)];
    const double comm = 5.0 + (slowest - fwd);
    s.stages = {{"forward", StageKind::compute, fwd, 1},
                {"communication", StageKind::communication, comm, 1}};
    s.step_ms = fwd + comm;
    w.samples.push_back(s);
  }
  return w;
}

TEST(RunAnalysis, NamesTheSlowRankAndListsTheWaitingOnes) {
  RunAnalysis analysis(DetectorOptions::rfc());  // the figures below are the RFC rule's
  for (int i = 0; i < 10; ++i) {
    const double slow = i >= 3 ? 90.0 : 60.0;
    analysis.add(make_window(i * 10, 4, {60.0, 60.0, 60.0, slow}));
  }
  const RunSummary s = analysis.summary();
  EXPECT_EQ(s.windows, 10);
  EXPECT_EQ(s.samples, 40);
  EXPECT_EQ(s.ranks, 4);
  EXPECT_EQ(s.first_step, 0);
  EXPECT_EQ(s.last_step, 90);
  ASSERT_EQ(s.stragglers.size(), 1u);
  EXPECT_EQ(s.stragglers[0].rank, 3);
  EXPECT_EQ(s.stragglers[0].stage, "forward");
  EXPECT_EQ(s.stragglers[0].host, "node-1");
  EXPECT_EQ(s.stragglers[0].first_flagged_step, 30);
  EXPECT_EQ(s.stragglers[0].confirmed_step, 40);  // 2 of the last 3 windows
  EXPECT_EQ(s.stragglers[0].windows_flagged, 7);
  EXPECT_NEAR(s.stragglers[0].typical_slowdown, 90.0 / 67.5, 1e-9);
  ASSERT_EQ(s.waiting.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(s.waiting[r].rank, r);
    EXPECT_EQ(s.waiting[r].stage, "communication");
    EXPECT_EQ(s.waiting[r].windows, 6);  // persistent from the second slow window on
  }
  EXPECT_EQ(s.likely_bottleneck, "forward");
  EXPECT_GT(s.mean_whatif_saving_ms, 0.0);
}

TEST(RunAnalysis, HealthyRunNamesNobody) {
  RunAnalysis analysis(DetectorOptions::rfc());  // the figures below are the RFC rule's
  for (int i = 0; i < 10; ++i) analysis.add(make_window(i, 4, {60.0, 60.5, 59.5, 60.2}));
  const RunSummary s = analysis.summary();
  EXPECT_TRUE(s.stragglers.empty());
  EXPECT_TRUE(s.waiting.empty());
  EXPECT_TRUE(s.slow_hosts.empty());
  EXPECT_EQ(s.likely_bottleneck, "");
}

TEST(RunAnalysis, WholeSlowHostIsNamed) {
  RunAnalysis analysis(DetectorOptions::rfc());  // the figures below are the RFC rule's
  for (int i = 0; i < 5; ++i) analysis.add(make_window(i, 6, {60, 60, 90, 90, 60, 60}));
  const RunSummary s = analysis.summary();
  ASSERT_EQ(s.slow_hosts.size(), 1u);
  EXPECT_EQ(s.slow_hosts[0].host, "node-1");
  EXPECT_EQ(s.slow_hosts[0].stage, "forward");
  EXPECT_EQ(s.slow_hosts[0].ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(s.slow_hosts[0].windows, 5);
  // Each of its ranks is 20 ms over the mean (70 ms) in a 95 ms step.
  EXPECT_DOUBLE_EQ(s.slow_hosts[0].cost_ms, 20.0);
  EXPECT_DOUBLE_EQ(s.slow_hosts[0].cost_share, 20.0 / 95.0);
}

TEST(RunAnalysis, VerdictsComeCostliestFirstWithTheirCost) {
  // Rank 1 is 12 ms slow in forward, rank 4 30 ms: every rank's step is the slowest's 90 ms
  // plus 5 ms of all-reduce.
  RunAnalysis analysis;  // the default detector
  for (int i = 0; i < 20; ++i) {
    const bool slow = i >= 3;
    analysis.add(make_window(i, 6, {60, slow ? 72.0 : 60.0, 60, 60, slow ? 90.0 : 60.0, 60}));
  }
  const RunSummary s = analysis.summary();
  ASSERT_EQ(s.stragglers.size(), 2u);
  EXPECT_EQ(s.stragglers[0].rank, 4);
  EXPECT_DOUBLE_EQ(s.stragglers[0].cost_ms, 30.0);
  EXPECT_DOUBLE_EQ(s.stragglers[0].cost_share, 30.0 / 95.0);
  EXPECT_EQ(s.stragglers[1].rank, 1);
  EXPECT_DOUBLE_EQ(s.stragglers[1].cost_ms, 12.0);
  EXPECT_DOUBLE_EQ(s.stragglers[1].cost_share, 12.0 / 95.0);
  EXPECT_DOUBLE_EQ(s.stragglers[1].typical_slowdown, 1.2);
}

TEST(RunAnalysis, AVerdictUnderTheFloorIsNotListed) {
  // The same run, with the floor at 15 % of the step: rank 1 (12.6 %) is left out.
  DetectorOptions o;
  o.min_cost_share = 0.15;
  RunAnalysis analysis(o);
  for (int i = 0; i < 20; ++i) {
    const bool slow = i >= 3;
    analysis.add(make_window(i, 6, {60, slow ? 72.0 : 60.0, 60, 60, slow ? 90.0 : 60.0, 60}));
  }
  const RunSummary s = analysis.summary();
  ASSERT_EQ(s.stragglers.size(), 1u);
  EXPECT_EQ(s.stragglers[0].rank, 4);
}

TEST(RunAnalysis, ARiseAmongTheBaselineStepsIsNamedAsTheReasonForNoOnset) {
  // Step time ~6 ms, then ~26 ms from the third window: among the 8 that set the baseline.
  RunAnalysis early;
  for (int i = 0; i < 30; ++i) {
    const double f = (i >= 2 ? 21.0 : 1.0) + 0.01 * (i % 3);
    early.add(make_window(i * 10, 4, {f, f, f, f}));
  }
  const RunSummary s = early.summary();
  EXPECT_FALSE(s.step_time_onset);
  ASSERT_TRUE(s.step_time_rise_in_baseline);
  EXPECT_EQ(*s.step_time_rise_in_baseline, 20);
  EXPECT_NEAR(s.step_time_rise_from_ms, 6.0, 0.1);
  EXPECT_NEAR(s.step_time_rise_to_ms, 26.0, 0.1);
  EXPECT_EQ(s.step_time_values, 30);
  EXPECT_EQ(s.step_time_baseline_values, 8);

  // A flat, noisy step time, a rise after the baseline (an onset), and a fall: no such reason.
  RunAnalysis flat, late, fall;
  for (int i = 0; i < 30; ++i) {
    const double noise = 0.5 * ((i * 7) % 5 - 2);
    flat.add(make_window(i, 4, {60.0 + noise, 60.0, 60.0, 60.0}));
    const double l = (i >= 15 ? 90.0 : 60.0) + noise;
    late.add(make_window(i, 4, {l, l, l, l}));
    const double d = (i >= 2 ? 30.0 : 60.0) + noise;
    fall.add(make_window(i, 4, {d, d, d, d}));
  }
  EXPECT_FALSE(flat.summary().step_time_rise_in_baseline);
  EXPECT_TRUE(late.summary().step_time_onset);
  EXPECT_FALSE(late.summary().step_time_rise_in_baseline);
  EXPECT_FALSE(fall.summary().step_time_rise_in_baseline);
}

TEST(RunAnalysis, EmptyRunHasAnEmptySummary) {
  RunAnalysis analysis(DetectorOptions::rfc());  // the figures below are the RFC rule's
  const RunSummary s = analysis.summary();
  EXPECT_EQ(s.windows, 0);
  EXPECT_EQ(s.mean_step_ms, 0.0);
  EXPECT_TRUE(s.stragglers.empty());
}

TEST(RunAnalysis, RejectsInvalidOptions) {
  DetectorOptions bad;
  bad.confirm_k = 5;
  bad.confirm_n = 3;
  EXPECT_THROW(RunAnalysis{bad}, std::invalid_argument);
}

}  // namespace
}  // namespace laggard
