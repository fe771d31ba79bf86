// Tests for the timeline analysis (src/analysis/timeline.cc): collectives matched across ranks,
// the wait inside them, and which bubbles are named.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "laggard/timeline.hpp"
#include "laggard/trace.hpp"
#include "temp_dir.hpp"

namespace laggard {
namespace {

const std::string kData = LAGGARD_TEST_DATA;

RankTrace rank_with(int rank, std::vector<double> collective_ms, double data_wait = 0.0,
                    double launch = 0.0) {
  RankTrace t;
  t.info.rank = rank;
  t.info.host = "h" + std::to_string(rank / 2);
  t.has_device_activity = true;
  for (int step = 0; step < 4; ++step) {
    StepTimeline x;
    x.step = step;
    x.window_ms = x.step_ms = 100.0;
    x.data_wait_ms = data_wait;
    x.launch_wait_ms = launch;
    x.busy_ms = 100.0 - data_wait - launch;
    for (std::uint32_t i = 0; i < collective_ms.size(); ++i) {
      CollectiveKernel c;
      c.step = step;
      c.ordinal = i;
      c.group = 1;
      c.signature = 42 + i;
      c.ms = collective_ms[i];
      c.name = "allreduce";
      t.collectives.push_back(c);
      x.comm_ms += c.ms;
    }
    t.timeline.push_back(x);
  }
  return t;
}

TEST(Timeline, TheWaitInsideACollectiveIsItsTimeOverTheShortest) {
  // Rank 2 arrives last: its kernels are the shortest; the others wait 8 and 3 ms longer.
  std::vector<RankTrace> ranks = {rank_with(0, {10, 5}), rank_with(1, {10, 5}),
                                  rank_with(2, {2, 2}), rank_with(3, {10, 5})};
  const TimelineSummary s = analyze_timeline(ranks);
  EXPECT_EQ(s.collectives_matched, 8u);
  EXPECT_EQ(s.collectives_mismatched, 0u);
  EXPECT_DOUBLE_EQ(ranks[0].timeline[0].comm_wait_ms, 8.0 + 3.0);
  EXPECT_DOUBLE_EQ(ranks[2].timeline[0].comm_wait_ms, 0.0);
  ASSERT_EQ(s.ranks.size(), 4u);
  EXPECT_EQ(s.ranks[2].arrived_last, 8u);
  EXPECT_EQ(s.ranks[2].collectives, 8u);
  ASSERT_FALSE(s.findings.empty());
  const TimelineFinding& f = s.findings.front();
  EXPECT_EQ(f.kind, TimelineFinding::Kind::late_arrival);
  EXPECT_EQ(f.ranks, std::vector<int>{2});
  EXPECT_DOUBLE_EQ(f.others_wait_ms, 11.0);
}

TEST(Timeline, OneRanksBubbleAgainstTheMedianAndTheWholeJobs) {
  std::vector<RankTrace> ranks = {rank_with(0, {}, 1.0), rank_with(1, {}, 30.0),
                                  rank_with(2, {}, 1.0), rank_with(3, {}, 1.0, 20.0)};
  TimelineSummary s = analyze_timeline(ranks);
  ASSERT_EQ(s.findings.size(), 2u);
  EXPECT_EQ(s.findings[0].kind, TimelineFinding::Kind::data_wait);
  EXPECT_EQ(s.findings[0].ranks, std::vector<int>{1});
  EXPECT_FALSE(s.findings[0].every_rank);
  EXPECT_DOUBLE_EQ(s.findings[0].ms_per_step, 30.0);
  EXPECT_DOUBLE_EQ(s.findings[0].median_ms, 1.0);
  EXPECT_EQ(s.findings[1].kind, TimelineFinding::Kind::launch_bound);
  EXPECT_EQ(s.findings[1].ranks, std::vector<int>{3});
  // Every rank starved alike: the job's bubble, not one rank's.
  std::vector<RankTrace> all = {rank_with(0, {}, 20.0), rank_with(1, {}, 21.0),
                                rank_with(2, {}, 20.0)};
  s = analyze_timeline(all);
  ASSERT_EQ(s.findings.size(), 1u);
  EXPECT_TRUE(s.findings[0].every_rank);
  EXPECT_EQ(s.findings[0].ranks.size(), 3u);
  // Small bubbles are no finding.
  std::vector<RankTrace> calm = {rank_with(0, {}, 1.0), rank_with(1, {}, 2.0)};
  EXPECT_TRUE(analyze_timeline(calm).findings.empty());
}

TEST(Timeline, CollectivesThatDifferAreNotCompared) {
  std::vector<RankTrace> ranks = {rank_with(0, {10}), rank_with(1, {4}), rank_with(2, {10})};
  for (auto& c : ranks[1].collectives) c.signature = 7;  // another collective at that place
  const TimelineSummary s = analyze_timeline(ranks);
  EXPECT_EQ(s.collectives_mismatched, 4u);
  EXPECT_DOUBLE_EQ(ranks[0].timeline[0].comm_wait_ms, 0.0);
  EXPECT_EQ(s.ranks[1].collectives, 0u);
}

TEST(Timeline, FromTracesWithADataStallAndALaunchBoundRank) {
  TraceRunReader reader(kData + "/trace-bubbles");
  reader.load();
  std::vector<RankTrace> ranks = reader.ranks();
  const TimelineSummary s = analyze_timeline(ranks);
  ASSERT_EQ(s.ranks.size(), 4u);
  EXPECT_EQ(s.ranks_without_device, 0u);
  std::vector<TimelineFinding::Kind> kinds;
  for (const auto& f : s.findings) kinds.push_back(f.kind);
  ASSERT_GE(s.findings.size(), 3u);
  EXPECT_EQ(s.findings[0].kind, TimelineFinding::Kind::late_arrival);
  EXPECT_EQ(s.findings[0].ranks, std::vector<int>{1});
  EXPECT_EQ(s.findings[1].kind, TimelineFinding::Kind::data_wait);
  EXPECT_EQ(s.findings[1].ranks, std::vector<int>{1});
  EXPECT_EQ(s.findings[2].kind, TimelineFinding::Kind::launch_bound);
  EXPECT_EQ(s.findings[2].ranks, std::vector<int>{3});
  for (const RankTrace& r : ranks)
    for (const StepTimeline& x : r.timeline)
      EXPECT_NEAR(x.busy_ms + x.copy_ms + x.data_wait_ms + x.comm_idle_ms + x.launch_wait_ms +
                      x.other_idle_ms,
                  x.window_ms, 1e-6);
}

// A profiler trace of one rank, in Kineto's format: each step [s, s + 100 ms) has one host
// region `region` from the step's start for 60 ms, and a kernel launched at `launch_at` ms into
// the step that runs from `kernel_at` ms to the step's end: the GPU idles for `kernel_at` ms.
std::string one_rank_trace(const std::string& region, double launch_at, double kernel_at) {
  const auto ev = [](const std::string& cat, const std::string& name, long pid, long tid,
                     double ts_us, double dur_us, const std::string& args = "") {
    std::string e = "{\"ph\": \"X\", \"cat\": \"" + cat + "\", \"name\": \"" + name +
                    "\", \"pid\": " + std::to_string(pid) + ", \"tid\": " + std::to_string(tid) +
                    ", \"ts\": " + std::to_string(ts_us) + ", \"dur\": " + std::to_string(dur_us);
    if (!args.empty()) e += ", \"args\": {" + args + "}";
    return e + "}";
  };
  std::string s =
      "{\"distributedInfo\": {\"rank\": 0, \"world_size\": 16}, \"traceEvents\": [\n";
  for (int step = 0; step < 4; ++step) {
    const double t0 = 1e6 + step * 1e5;
    const std::string c = "\"correlation\": " + std::to_string(100 + step);
    for (const std::string& e :
         {ev("user_annotation", "ProfilerStep#" + std::to_string(step), 1, 1, t0, 1e5),
          ev("user_annotation", region, 1, 1, t0, 6e4),
          ev("cuda_runtime", "cudaLaunchKernel", 1, 1, t0 + launch_at * 1e3, 5, c),
          ev("kernel", "void gemm_kernel<float>(float*)", 0, 7, t0 + kernel_at * 1e3,
             (100.0 - kernel_at) * 1e3, c)})
      s += (step == 0 && e.find("ProfilerStep") != std::string::npos ? "" : ",\n") + e;
  }
  return s + "\n]}";
}

struct TraceDir : laggard::testing::TempDir {
  TraceDir() : laggard::testing::TempDir("laggard-timeline-test") {}
};

// TorchRec's input all-to-all: the GPU idles while the host is in "## sparse_data_dist ##".
// Its name holds "data" but no data loading explains the idle time: the host was in a
// collective, launched or not the next kernel: communication idle, all of it.
TEST(Timeline, AnAllToAllNamedDataIsCommunicationIdle) {
  TraceDir dir;
  std::vector<RankTrace> ranks = {
      read_trace(dir.file("rank-0.json", one_rank_trace("## sparse_data_dist ##", 20, 60)))};
  ASSERT_EQ(ranks[0].timeline.size(), 4u);
  for (const StepTimeline& x : ranks[0].timeline) {
    EXPECT_NEAR(x.data_wait_ms, 0.0, 1e-9) << "step " << x.step;
    EXPECT_NEAR(x.comm_idle_ms, 60.0, 1e-6) << "step " << x.step;
    EXPECT_NEAR(x.launch_wait_ms, 0.0, 1e-6) << "step " << x.step;
    EXPECT_NEAR(x.other_idle_ms, 0.0, 1e-6) << "step " << x.step;
  }
  const TimelineSummary s = analyze_timeline(ranks);
  for (const TimelineFinding& f : s.findings)
    EXPECT_NE(f.kind, TimelineFinding::Kind::data_wait) << to_string(f.kind);
  ASSERT_EQ(s.findings.size(), 1u);
  EXPECT_EQ(s.findings[0].kind, TimelineFinding::Kind::comm_idle);
  EXPECT_NEAR(s.findings[0].ms_per_step, 60.0, 1e-6);
  EXPECT_STREQ(to_string(s.findings[0].kind), "comm_idle");
}

// A region whose name holds neither a data nor a communication word explains nothing: the
// same gap is launch-bound until the kernel's launch returned, then other idle.
TEST(Timeline, AnUnnamedRegionExplainsNoIdleTime) {
  TraceDir dir;
  std::vector<RankTrace> ranks = {
      read_trace(dir.file("rank-0.json", one_rank_trace("## embedding_lookup ##", 20, 60)))};
  for (const StepTimeline& x : ranks[0].timeline) {
    EXPECT_NEAR(x.data_wait_ms + x.comm_idle_ms, 0.0, 1e-9) << "step " << x.step;
    EXPECT_NEAR(x.launch_wait_ms, 20.005, 1e-6) << "step " << x.step;
    EXPECT_NEAR(x.other_idle_ms, 60.0 - 20.005, 1e-6) << "step " << x.step;
  }
}

// Rank 0 of a 16-rank TorchRec job on a GPU (tests/data/trace-torchrec: real, trimmed to three
// steps). The device idles while the host is in "## sparse_data_dist ##", the input all-to-all;
// the trace has no DataLoader event: the only data wait is host-to-device copies running alone.
TEST(Timeline, TorchRecsInputAllToAllIsCommunicationIdleNotADataWait) {
  TraceRunReader reader(kData + "/trace-torchrec");
  reader.load();
  std::vector<RankTrace> ranks = reader.ranks();
  ASSERT_EQ(ranks.size(), 1u);
  ASSERT_EQ(ranks[0].timeline.size(), 3u);
  const StepTimeline& mid = ranks[0].timeline[1];  // step 552: whole on both sides
  EXPECT_EQ(mid.step, 552);
  EXPECT_NEAR(mid.comm_idle_ms, 96.9, 0.05);
  EXPECT_NEAR(mid.data_wait_ms, 3.48, 0.05);
  const TimelineSummary s = analyze_timeline(ranks);
  ASSERT_EQ(s.ranks.size(), 1u);
  EXPECT_GT(s.ranks[0].comm_idle_ms, 25.0 * s.ranks[0].data_wait_ms);
  for (const TimelineFinding& f : s.findings)
    EXPECT_NE(f.kind, TimelineFinding::Kind::data_wait) << to_string(f.kind);
  ASSERT_FALSE(s.findings.empty());
  EXPECT_EQ(s.findings[0].kind, TimelineFinding::Kind::comm_idle);
}

// The same idle time under a slow DataLoader's __next__: data loading explains it.
TEST(Timeline, ASlowDataLoaderIsADataWait) {
  TraceDir dir;
  std::vector<RankTrace> ranks = {read_trace(dir.file(
      "rank-0.json",
      one_rank_trace("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 60, 60.01)))};
  ASSERT_EQ(ranks[0].timeline.size(), 4u);
  for (const StepTimeline& x : ranks[0].timeline) {
    EXPECT_NEAR(x.data_wait_ms, 60.0, 1e-6) << "step " << x.step;
    EXPECT_NEAR(x.launch_wait_ms, 0.005, 1e-6) << "step " << x.step;
  }
  const TimelineSummary s = analyze_timeline(ranks);
  ASSERT_FALSE(s.findings.empty());
  EXPECT_EQ(s.findings[0].kind, TimelineFinding::Kind::data_wait);
  EXPECT_NEAR(s.findings[0].ms_per_step, 60.0, 1e-6);
}

}  // namespace
}  // namespace laggard
