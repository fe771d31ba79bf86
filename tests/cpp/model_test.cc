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
  EXPECT_EQ(default_stage_kind("data"), StageKind::data);
  EXPECT_EQ(default_stage_kind("load_data"), StageKind::data);
  EXPECT_EQ(default_stage_kind("DataLoader"), StageKind::data);
  EXPECT_EQ(default_stage_kind("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
            StageKind::data);
  // "data" inside another word is not input loading.
  EXPECT_EQ(default_stage_kind("metadata_sync"), StageKind::compute);
  EXPECT_EQ(default_stage_kind("update_metadata"), StageKind::compute);
}

// A collective whose name holds "data" is communication: TorchRec's input all-to-all is time
// spent waiting for other ranks, not input loading.
TEST(StageKind, CommunicationWordsWinOverData) {
  EXPECT_EQ(default_stage_kind("sparse_data_dist"), StageKind::communication);
  EXPECT_EQ(default_stage_kind("## sparse_data_dist ##"), StageKind::communication);
  EXPECT_EQ(default_stage_kind("data_all_to_all"), StageKind::communication);
  EXPECT_EQ(default_stage_kind("input_dist"), StageKind::communication);
  EXPECT_EQ(default_stage_kind("data_alltoall"), StageKind::communication);
  EXPECT_EQ(default_stage_kind("gloo_data_broadcast"), StageKind::communication);
  EXPECT_EQ(default_stage_kind("nccl:all_to_all"), StageKind::communication);
  // "dist" and "a2a" count only as whole words of the name.
  EXPECT_EQ(default_stage_kind("distill"), StageKind::compute);
  EXPECT_EQ(default_stage_kind("data_distribution_stats"), StageKind::data);
  EXPECT_EQ(default_stage_kind("embedding_a2a"), StageKind::communication);
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
