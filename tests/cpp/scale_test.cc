// Tests for scale_runs (src/analysis/scale.cc): the first regressed size, the host boundary and
// the next size to try.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "laggard/scale.hpp"

namespace laggard {
namespace {

// A run at `world` ranks, `per_host` per host, whose communication takes comm_ms.
ScaleRun run(int world, int per_host, double comm_ms, double forward_ms = 40.0) {
  ScaleRun r;
  r.name = "ws-" + std::to_string(world);
  r.world_size = world;
  r.ranks = world;
  r.hosts = (world + per_host - 1) / per_host;
  std::uint64_t x = 12345 + static_cast<std::uint64_t>(world);
  const auto noise = [&]() {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return 1.0 + 0.01 * (static_cast<double>(x >> 40) / static_cast<double>(1ull << 24) - 0.5);
  };
  for (int step = 0; step < 30; ++step) {
    Window w;
    w.step = step;
    for (int rank = 0; rank < world; ++rank) {
      StepSample s;
      s.rank = rank;
      s.world_size = world;
      s.step = step;
      s.host = "h" + std::to_string(rank / per_host);
      s.stages.push_back({"forward", StageKind::compute, forward_ms * noise(), 1});
      s.stages.push_back({"communication", StageKind::communication, comm_ms * noise(), 1});
      s.step_ms = s.stages[0].ms + s.stages[1].ms;
      w.samples.push_back(s);
    }
    r.profile.add(w);
  }
  return r;
}

std::vector<ScaleRun> runs(std::vector<int> sizes, int per_host) {
  std::vector<ScaleRun> out;
  for (int w : sizes) out.push_back(run(w, per_host, w > per_host ? 18.0 : 10.0));
  return out;
}

TEST(Scale, TheFirstRegressedSizeAndStage) {
  const ScaleResult r = scale_runs(runs({2, 4, 8, 16}, 4));
  EXPECT_EQ(r.baseline_size, 2);
  EXPECT_EQ(r.first_regression_size, 8);
  ASSERT_GE(r.origin_stage, 0);
  EXPECT_EQ(r.stages[static_cast<std::size_t>(r.origin_stage)].stage, "communication");
  EXPECT_TRUE(r.first_multi_host);
  EXPECT_EQ(r.first_multi_host_size, 8);
  EXPECT_EQ(r.ranks_per_host, 4);
  EXPECT_EQ(r.bracket_low, 4);
  EXPECT_TRUE(r.next_sizes.empty());
  EXPECT_NE(r.next_reason.find("bracketed"), std::string::npos);
  // forward did not change; communication grew.
  EXPECT_EQ(r.stages[0].stage, "forward");
  EXPECT_EQ(r.stages[0].first_regressed_size, 0);
  EXPECT_LT(std::fabs(r.stages[0].growth), 0.05);
  EXPECT_GT(r.stages[1].growth, 0.1);
  ASSERT_EQ(r.stages[1].points.size(), 4u);
  EXPECT_EQ(r.stages[1].points[2].verdict, Verdict::regressed);
  EXPECT_NEAR(r.stages[1].points[2].ratio, 1.8, 0.05);
}

TEST(Scale, TheNextSizeWhenTheRunsDoNotBracketIt) {
  // 4 ranks per host: regressed at 32, not at 4; 8 is the smallest size on two hosts.
  ScaleResult r = scale_runs(runs({2, 4, 32}, 4));
  EXPECT_EQ(r.first_regression_size, 32);
  ASSERT_EQ(r.next_sizes.size(), 1u);
  EXPECT_EQ(r.next_sizes[0], 8);
  // Already past the host boundary: bisect the powers of two between.
  std::vector<ScaleRun> v;
  v.push_back(run(8, 4, 10.0));
  v.push_back(run(16, 4, 10.0));
  v.push_back(run(128, 4, 18.0));
  r = scale_runs(std::move(v));
  EXPECT_EQ(r.first_regression_size, 128);
  ASSERT_EQ(r.next_sizes.size(), 1u);
  EXPECT_EQ(r.next_sizes[0], 32);
  // No regression: double the largest size (or reach the second host).
  r = scale_runs(runs({2, 4}, 8));
  EXPECT_EQ(r.first_regression_size, 0);
  ASSERT_EQ(r.next_sizes.size(), 1u);
  EXPECT_EQ(r.next_sizes[0], 8);
}

TEST(Scale, AnotherBaselineSize) {
  const ScaleResult r = scale_runs(runs({2, 4, 8}, 4), 4);
  EXPECT_EQ(r.baseline_size, 4);
  EXPECT_EQ(r.first_regression_size, 8);
  EXPECT_EQ(r.stages[1].points[0].verdict, Verdict::same);  // 2 against 4
}

TEST(Scale, RefusesWhatCannotBeCompared) {
  EXPECT_THROW(scale_runs(runs({4}, 4)), std::invalid_argument);
  EXPECT_THROW(scale_runs(runs({4, 4}, 4)), std::invalid_argument);
  try {
    scale_runs(runs({2, 4}, 4), 3);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no run has the baseline size 3"), std::string::npos);
  }
}

}  // namespace
}  // namespace laggard
