#include "laggard/model.hpp"

#include <gtest/gtest.h>

namespace laggard {
namespace {

TEST(StageKind, NamesRoundTrip) {
  for (auto k : {StageKind::compute, StageKind::communication, StageKind::data, StageKind::other}) {
    auto parsed = parse_stage_kind(to_string(k));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_FALSE(parse_stage_kind("Compute").has_value());
  EXPECT_FALSE(parse_stage_kind("").has_value());
}

TEST(StageKind, DefaultsForWellKnownNames) {
  EXPECT_EQ(default_stage_kind("forward"), StageKind::compute);
  EXPECT_EQ(default_stage_kind("backward"), StageKind::compute);
  EXPECT_EQ(default_stage_kind("optimizer"), StageKind::compute);
  EXPECT_EQ(default_stage_kind("communication"), StageKind::communication);
  EXPECT_EQ(default_stage_kind("grad_allreduce"), StageKind::communication);
  EXPECT_EQ(default_stage_kind("AllGather"), StageKind::communication);
  EXPECT_EQ(default_stage_kind("dataloader"), StageKind::data);
  EXPECT_EQ(default_stage_kind("attention"), StageKind::compute);
}

TEST(StepSample, FindsStagesByName) {
  StepSample s;
  s.stages.push_back({"forward", StageKind::compute, 3.0, 1});
  s.stages.push_back({"backward", StageKind::compute, 6.0, 2});
  ASSERT_NE(s.find("backward"), nullptr);
  EXPECT_EQ(s.find("backward")->calls, 2u);
  EXPECT_EQ(s.find("optimizer"), nullptr);
}

}  // namespace
}  // namespace laggard
