#include "laggard/analyzer.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "laggard/jsonl.hpp"
#include "laggard/laggard.hpp"

namespace laggard {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("laggard-analyzer-" + std::to_string(::getpid()) + "-" +
                                         info->test_suite_name() + "-" + info->name());
    fs::remove_all(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<std::string> read_lines(const fs::path& p) {
  std::vector<std::string> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Collects laggard's messages for the duration of a test; restores the default handler.
class CapturedLog {
 public:
  CapturedLog() {
    set_log_handler([this](LogLevel level, std::string_view message) {
      std::lock_guard<std::mutex> lock(mu_);
      messages_.push_back(std::string(to_string(level)) + ": " + std::string(message));
    });
  }
  ~CapturedLog() { set_log_handler({}); }
  std::vector<std::string> messages() const {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_;
  }
  std::size_t count(std::string_view needle) const {
    std::size_t n = 0;
    for (const auto& m : messages())
      if (m.find(needle) != std::string::npos) ++n;
    return n;
  }
  std::string all() const {
    std::string s;
    for (const auto& m : messages()) s += m + "\n";
    return s;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> messages_;
};

AnalyzerOptions enabled_options(int rank = 0, int world_size = 1) {
  AnalyzerOptions o;
  o.enabled = true;
  o.interval = 1;
  o.rank = {rank, world_size, 0, "node-" + std::to_string(rank / 2), "dp"};
  o.poll_interval_s = 0.001;
  o.close_timeout_s = 5.0;
  return o;
}

double number(const Metrics& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return -1.0;
  const double* d = std::get_if<double>(&it->second);
  return d ? *d : -1.0;
}

std::string text(const Metrics& m, const std::string& key) {
  auto it = m.find(key);
  if (it == m.end()) return "<missing>";
  const std::string* s = std::get_if<std::string>(&it->second);
  return s ? *s : "<not text>";
}

// One simulated data-parallel step with durations given through add(): rank `slow_rank`'s
// forward takes `slow` ms more, and the others wait for it in communication.
void simulated_step(Analyzer& an, int rank, std::int64_t step, int slow_rank, double slow) {
  const auto fwd = an.stage("forward");
  const auto bwd = an.stage("backward");
  const auto comm = an.stage("communication");
  an.begin_step(step);
  const double extra = rank == slow_rank ? slow : 0.0;
  an.add(fwd, 10.0 + extra);
  an.add(bwd, 20.0);
  an.add(comm, 2.0 + (slow - extra));  // the fast ranks wait for the slow one
  an.end_step();
}

TEST(Analyzer, DisabledCreatesNothingAndEveryCallIsANoOp) {
  TempDir dir;
  AnalyzerOptions o;  // enabled = false by default
  o.log_dir = dir.path().string();
  o.interval = -5;  // not even validated: nothing is set up
  Analyzer an(o);
  EXPECT_FALSE(an.enabled());
  EXPECT_EQ(an.stage("forward"), -1);
  for (int step = 0; step < 20; ++step) {
    an.begin_step(step);
    EXPECT_FALSE(an.sampled());
    { Analyzer::Section s(an, "forward"); }
    an.add(0, 1.0);
    an.end_step();
  }
  an.close();
  EXPECT_TRUE(an.latest_metrics().empty());
  EXPECT_FALSE(an.latest_report().has_value());
  EXPECT_EQ(an.counters().sampled_steps, 0u);
  EXPECT_EQ(an.recorder(), nullptr);
  EXPECT_STREQ(an.backend_name(), "");
  EXPECT_FALSE(fs::exists(dir.path()));
}

TEST(Analyzer, InvalidOptionsThrowNamingTheSetting) {
  auto expect_invalid = [](AnalyzerOptions o, const std::string& name) {
    try {
      Analyzer an(o);
      ADD_FAILURE() << "no exception for " << name;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  auto o = enabled_options();
  o.interval = -1;
  expect_invalid(o, "interval");
  o = enabled_options();
  o.relative_threshold = 0.5;
  expect_invalid(o, "relative_threshold");
  o = enabled_options();
  o.confirm_k = 4;
  expect_invalid(o, "confirm_k");
  o = enabled_options(0, 4);
  o.analysis_rank = 4;
  expect_invalid(o, "analysis_rank");
  o = enabled_options(5, 4);
  expect_invalid(o, "rank.rank");
  o = enabled_options();
  o.queue_capacity = 0;
  expect_invalid(o, "queue_capacity");
  o = enabled_options();
  o.poll_interval_s = 0.0;
  expect_invalid(o, "poll_interval_s");
}

TEST(Analyzer, SingleRankWritesRankLogReportsAndCallsSinks) {
  TempDir dir;
  auto o = enabled_options();
  o.interval = 2;
  o.log_dir = (dir.path() / "run").string();
  std::mutex mu;
  std::vector<std::int64_t> sink_steps;
  std::vector<double> sink_ranks;
  o.sinks.push_back([&](std::int64_t step, const Metrics& m) {
    std::lock_guard<std::mutex> lock(mu);
    sink_steps.push_back(step);
    sink_ranks.push_back(number(m, "straggler/ranks"));
  });
  Analyzer an(o);
  ASSERT_TRUE(an.enabled());
  EXPECT_TRUE(an.is_analysis_rank());
  EXPECT_STREQ(an.backend_name(), "host-clock");
  EXPECT_STREQ(an.transport_name(), "local");
  for (int step = 0; step < 10; ++step) simulated_step(an, 0, step, -1, 0.0);
  an.close();

  const auto lines = read_lines(dir.path() / "run" / "rank-0.jsonl");
  ASSERT_EQ(lines.size(), 5u);
  SampleParser parser;
  StepSample s;
  std::string error;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    ASSERT_TRUE(parser.parse(lines[i], s, error)) << error;
    EXPECT_EQ(s.step, static_cast<std::int64_t>(2 * i));
    EXPECT_EQ(s.cohort, "dp");
    ASSERT_NE(s.find("forward"), nullptr);
    EXPECT_DOUBLE_EQ(s.find("forward")->ms, 10.0);
    EXPECT_EQ(s.find("communication")->kind, StageKind::communication);
  }
  const auto reports = read_lines(dir.path() / "run" / "reports.jsonl");
  ASSERT_EQ(reports.size(), 5u);
  EXPECT_EQ(reports[0].rfind("{\"step\":0,", 0), 0u) << reports[0];
  EXPECT_NE(reports[4].find("\"straggler/forward/local_ms\":10"), std::string::npos);
  EXPECT_NE(reports[4].find("\"stragglers\":[]"), std::string::npos);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(sink_steps, (std::vector<std::int64_t>{0, 2, 4, 6, 8}));
    EXPECT_EQ(sink_ranks, (std::vector<double>(5, 1.0)));
  }
  const Metrics m = an.latest_metrics();
  EXPECT_DOUBLE_EQ(number(m, "straggler/forward/local_ms"), 10.0);
  EXPECT_DOUBLE_EQ(number(m, "straggler/report_errors"), 0.0);
  EXPECT_DOUBLE_EQ(number(m, "straggler/dropped_samples"), 0.0);
  EXPECT_EQ(text(m, "straggler/confirmed"), "");
  const auto c = an.counters();
  EXPECT_EQ(c.sampled_steps, 5u);
  EXPECT_EQ(c.samples_logged, 5u);
  EXPECT_EQ(c.windows, 5u);
  EXPECT_EQ(c.reports, 5u);
  EXPECT_EQ(c.errors, 0u);
  ASSERT_TRUE(an.latest_report().has_value());
  EXPECT_EQ(an.latest_report()->step, 8);
}

TEST(Analyzer, FourThreadRanksConfirmTheSlowRankNotTheWaitingOnes) {
  constexpr int kRanks = 4;
  constexpr int kSteps = 24;
  std::vector<std::unique_ptr<Analyzer>> ranks(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    auto o = enabled_options(r, kRanks);
    o.channel = "four-thread-ranks";
    o.max_pending_windows = 64;  // the threads start at their own pace: no window goes stale
    ranks[r] = std::make_unique<Analyzer>(o);
  }
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&ranks, r] {
      for (int step = 0; step < kSteps; ++step) simulated_step(*ranks[r], r, step, 2, 5.0);
      ranks[r]->close();
    });
  }
  for (auto& t : threads) t.join();

  Analyzer& analysis = *ranks[0];
  const auto c = analysis.counters();
  EXPECT_EQ(c.windows, static_cast<std::uint64_t>(kSteps));
  EXPECT_EQ(c.incomplete_windows, 0u);
  EXPECT_EQ(c.samples_received, static_cast<std::uint64_t>(kSteps * (kRanks - 1)));
  EXPECT_EQ(c.late_samples, 0u);
  const Metrics m = analysis.latest_metrics();
  EXPECT_EQ(text(m, "straggler/confirmed"), "2:forward");
  EXPECT_DOUBLE_EQ(number(m, "straggler/forward/top_rank"), 2.0);
  EXPECT_DOUBLE_EQ(number(m, "straggler/forward/max_ms"), 15.0);
  EXPECT_EQ(text(m, "straggler/likely_bottleneck"), "forward");
  EXPECT_DOUBLE_EQ(number(m, "straggler/ranks"), 4.0);
  const RunSummary s = analysis.summary();
  ASSERT_EQ(s.stragglers.size(), 1u);
  EXPECT_EQ(s.stragglers[0].rank, 2);
  EXPECT_EQ(s.stragglers[0].stage, "forward");
  EXPECT_EQ(s.stragglers[0].host, "node-1");
  for (const auto& w : s.waiting) EXPECT_NE(w.rank, 2);
  for (int r = 1; r < kRanks; ++r) {
    EXPECT_FALSE(ranks[r]->is_analysis_rank());
    EXPECT_TRUE(ranks[r]->latest_metrics().empty());
    EXPECT_EQ(ranks[r]->counters().samples_sent, static_cast<std::uint64_t>(kSteps));
    EXPECT_EQ(ranks[r]->counters().send_dropped, 0u);
  }
}

TEST(Analyzer, ConfirmedPairsAreListedCostliestFirstOnEveryRank) {
  // Rank 1 is 5 ms slow in forward, rank 3 30 ms slow in backward, a later stage: the analysis
  // rank's straggler/confirmed, and the verdict that the others read, start with the costlier.
  constexpr int kRanks = 4;
  constexpr int kSteps = 24;
  std::vector<std::unique_ptr<Analyzer>> ranks(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    auto o = enabled_options(r, kRanks);
    o.channel = "costliest-first";
    o.max_pending_windows = 64;
    ranks[r] = std::make_unique<Analyzer>(o);
  }
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&ranks, r] {
      Analyzer& an = *ranks[r];
      const auto fwd = an.stage("forward");
      const auto bwd = an.stage("backward");
      for (int step = 0; step < kSteps; ++step) {
        an.begin_step(step);
        an.add(fwd, r == 1 ? 15.0 : 10.0);
        an.add(bwd, r == 3 ? 50.0 : 20.0);
        an.end_step();
      }
      an.close();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(text(ranks[0]->latest_metrics(), "straggler/confirmed"), "3:backward,1:forward");
  EXPECT_DOUBLE_EQ(number(ranks[0]->latest_metrics(), "straggler/num_confirmed"), 2.0);
  for (int r = 1; r < kRanks; ++r) {
    const Metrics other = ranks[r]->latest_metrics();
    if (other.count("straggler/confirmed"))  // a verdict that arrived before close
      EXPECT_EQ(text(other, "straggler/confirmed"), "3:backward,1:forward") << r;
  }
}

TEST(Analyzer, LiveTriageWarnsOfANanLossAndGivesTheStragglerItsReason) {
  // 4 thread ranks: rank 2 slow in forward with 30 ms of GC pauses a step (its readings say
  // so), rank 1's loss NaN at step 10. The analysis rank warns once about the loss, counts it
  // in straggler/correctness/*, and gives rank 2 its reason (docs/howto/triage.md).
  constexpr int kRanks = 4;
  constexpr int kSteps = 24;
  CapturedLog log;
  std::vector<std::unique_ptr<Analyzer>> ranks(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    auto o = enabled_options(r, kRanks);
    o.channel = "live-triage";
    o.max_pending_windows = 64;
    ranks[r] = std::make_unique<Analyzer>(o);
  }
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&ranks, r] {
      Analyzer& an = *ranks[r];
      const auto fwd = an.stage("forward");
      const auto comm = an.stage("communication");
      for (int step = 0; step < kSteps; ++step) {
        an.begin_step(step);
        const bool slow = r == 2 && step >= 4;
        an.add(fwd, slow ? 40.0 : 10.0);
        an.add(comm, slow ? 2.0 : 32.0);
        an.record("loss", r == 1 && step >= 10 ? std::nan("") : 2.0 - 0.01 * step);
        an.record_resource("host_gc_pause_ms", slow ? 30.0 : 0.2);
        an.end_step();
      }
      an.close();
    });
  }
  for (auto& t : threads) t.join();
  const Metrics m = ranks[0]->latest_metrics();
  EXPECT_EQ(text(m, "straggler/confirmed"), "2:forward");
  EXPECT_DOUBLE_EQ(number(m, "straggler/correctness/findings"), 14.0);
  EXPECT_EQ(text(m, "straggler/correctness/first"), "loss non_finite at step 10 on rank 1");
  EXPECT_EQ(text(m, "straggler/2/reason"), "gc_pauses");
  EXPECT_NE(text(m, "straggler/hints").find("measured: rank 2 gc_pauses (Python garbage "
                                            "collection"),
            std::string::npos)
      << text(m, "straggler/hints");
  EXPECT_EQ(log.count("correctness: 'loss' is not finite at step 10 on rank 1"), 1u) << log.all();
  // Triage runs on the analysis rank only: another rank's metrics are the verdict sent down the
  // gather tree (when it arrived before close), never the triage's own keys.
  const std::set<std::string> verdict_keys = {
      "straggler/verdict_step", "straggler/local_score",       "straggler/local_confirmed",
      "straggler/num_confirmed", "straggler/confirmed",        "straggler/likely_bottleneck",
      "straggler/whatif_step_saving_ms", "straggler/ranks",    "straggler/step_ms"};
  for (int r = 1; r < kRanks; ++r) {
    const Metrics other = ranks[r]->latest_metrics();
    for (const auto& [key, value] : other) EXPECT_TRUE(verdict_keys.count(key)) << r << " " << key;
    if (other.count("straggler/confirmed")) {
      EXPECT_EQ(text(other, "straggler/confirmed"), "2:forward");
    }
  }
}

TEST(Analyzer, FailingSinkIsCountedAndItsWarningRateLimited) {
  CapturedLog log;
  auto o = enabled_options();
  std::atomic<int> calls{0};
  o.sinks.push_back([&calls](std::int64_t, const Metrics&) {
    ++calls;
    throw std::runtime_error("tracker offline");
  });
  std::vector<double> seen_errors;
  std::mutex mu;
  o.sinks.push_back([&](std::int64_t, const Metrics& m) {  // later sinks still get reports
    std::lock_guard<std::mutex> lock(mu);
    seen_errors.push_back(number(m, "straggler/report_errors"));
  });
  Analyzer an(o);
  for (int step = 0; step < 12; ++step) simulated_step(an, 0, step, -1, 0.0);
  an.close();
  EXPECT_EQ(calls.load(), 12);
  EXPECT_EQ(an.counters().errors, 12u);
  EXPECT_EQ(log.count("sink: tracker offline"), 1u) << log.all();  // one per minute
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen_errors.size(), 12u);
  EXPECT_DOUBLE_EQ(seen_errors.front(), 0.0);  // metrics are built before the sinks run
  EXPECT_DOUBLE_EQ(seen_errors.back(), 11.0);
  EXPECT_DOUBLE_EQ(number(an.latest_metrics(), "straggler/report_errors"), 11.0);
}

TEST(Analyzer, UnwritableLogDirIsAWarningNotAnError) {
  CapturedLog log;
  TempDir dir;
  fs::create_directories(dir.path());
  std::ofstream(dir.path() / "a-file") << "x";
  auto o = enabled_options();
  o.log_dir = (dir.path() / "a-file" / "run").string();  // a directory under a regular file
  Analyzer an(o);
  for (int step = 0; step < 5; ++step) simulated_step(an, 0, step, -1, 0.0);
  an.close();
  const auto c = an.counters();
  EXPECT_EQ(c.samples_logged, 0u);
  EXPECT_GE(c.errors, 5u);  // the rank log for each sample, and the report log
  EXPECT_EQ(c.reports, 5u);  // the analysis went on
  EXPECT_GE(log.count("rank log: cannot open"), 1u) << log.all();
}

TEST(Analyzer, ABlockedSinkHoldsUpNeitherTrainingNorTheRankLog) {
  CapturedLog log;
  TempDir dir;
  struct Gate {
    std::atomic<bool> open{false};
    std::atomic<bool> entered{false};
    std::atomic<int> returned{0};
  };
  auto gate = std::make_shared<Gate>();
  auto o = enabled_options();
  o.queue_capacity = 32;
  o.log_dir = dir.path().string();
  o.sinks.push_back([gate](std::int64_t, const Metrics&) {
    gate->entered = true;
    while (!gate->open) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++gate->returned;
  });
  auto an = std::make_unique<Analyzer>(o);
  simulated_step(*an, 0, 0, -1, 0.0);
  while (!gate->entered) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The background thread is stuck in the sink: the training loop must go on regardless (a
  // millisecond per step: the log writer, which looks every millisecond, keeps up with it).
  for (int step = 1; step < 300; ++step) {
    simulated_step(*an, 0, step, -1, 0.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto before_close = an->counters();
  EXPECT_EQ(before_close.sampled_steps, 300u);
  EXPECT_EQ(before_close.samples_emitted, 300u);
  an->close(2.0);  // gives up on the stuck thread after 2 s
  EXPECT_EQ(log.count("left behind"), 1u) << log.all();
  // The log writer does not wait for the stuck thread: every sample is in the rank log; what
  // the analysis missed (its ring of 32 was full) is counted as analysis_dropped.
  const auto c = an->counters();
  EXPECT_EQ(c.queue_dropped, 0u);
  EXPECT_EQ(c.samples_logged, 300u);
  EXPECT_GE(c.analysis_dropped, 300u - 32u - 2u);
  std::ifstream in(dir.path() / "rank-0.jsonl");
  std::string line;
  std::int64_t next = 0;
  while (std::getline(in, line)) {
    StepSample s;
    std::string error;
    ASSERT_TRUE(SampleParser().parse(line, s, error)) << error;
    EXPECT_EQ(s.step, next++);
  }
  EXPECT_EQ(next, 300);
  an.reset();  // the left-behind thread keeps what it uses alive
  gate->open = true;
  while (gate->returned.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(Analyzer, SideChannelFailureDrillLetsEveryRankFinish) {
  CapturedLog log;
  constexpr int kRanks = 3;
  constexpr int kSteps = 40;
  std::vector<std::unique_ptr<Analyzer>> ranks(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    auto o = enabled_options(r, kRanks);
    o.channel = "failure-drill";
    ranks[r] = std::make_unique<Analyzer>(o);
  }
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < kSteps; ++step) {
        if (r != 0 && step == kSteps / 2) {  // wait until rank 0's side channel is dead
          while (failed.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        simulated_step(*ranks[r], r, step, -1, 0.0);
        if (r == 0 && step == 5) {
          ranks[0]->debug_fail_transport();
          // The background thread applies it and counts it as a failure: wait for that.
          while (ranks[0]->counters().errors == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          failed = 1;
        }
      }
      ranks[r]->close(1.0);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    const auto c = ranks[r]->counters();
    EXPECT_EQ(c.sampled_steps, static_cast<std::uint64_t>(kSteps)) << "rank " << r;
    EXPECT_FALSE(c.side_channel_healthy) << "rank " << r;
  }
  EXPECT_GE(ranks[1]->counters().send_dropped, static_cast<std::uint64_t>(kSteps / 2));
  EXPECT_GE(ranks[2]->counters().send_dropped, static_cast<std::uint64_t>(kSteps / 2));
  EXPECT_GE(log.count("rank 0: side channel: stopped by debug_fail_transport"), 1u) << log.all();
  EXPECT_GE(log.count("rank 1: side channel: rank 0's side channel is down"), 1u) << log.all();
  EXPECT_GE(log.count("rank 2: side channel: rank 0's side channel is down"), 1u) << log.all();
  EXPECT_LE(ranks[0]->counters().windows, 8u);  // analysis stopped with the side channel
}

TEST(Analyzer, MissingRankWindowsAreAnalysedAfterTheirTimeout) {
  CapturedLog log;
  auto o = enabled_options(0, 2);  // rank 1 never shows up
  o.channel = "missing-rank";
  o.window_timeout_s = 0.02;
  o.max_pending_windows = 3;
  Analyzer an(o);
  for (int step = 0; step < 10; ++step) simulated_step(an, 0, step, -1, 0.0);
  an.close(1.0);  // waits 0.8 s for rank 1's last samples, then analyses without them
  const auto c = an.counters();
  EXPECT_EQ(c.windows, 10u);
  EXPECT_EQ(c.incomplete_windows, 10u);
  EXPECT_DOUBLE_EQ(number(an.latest_metrics(), "straggler/incomplete_windows"), 10.0);
  EXPECT_DOUBLE_EQ(number(an.latest_metrics(), "straggler/ranks"), 1.0);
  EXPECT_EQ(log.count("closed before every rank sent its last samples"), 1u) << log.all();
}

TEST(Analyzer, CudaTimingWithoutADeviceFallsBackToTheHostClock) {
  CapturedLog log;
  auto o = enabled_options();
  o.timing = Timing::cuda;
  Analyzer an(o);
  if (std::string(an.backend_name()) == "cuda-event") GTEST_SKIP() << "a CUDA device is present";
  EXPECT_STREQ(an.backend_name(), "host-clock");
  an.set_stream(nullptr);  // harmless without a device backend
  for (int step = 0; step < 3; ++step) simulated_step(an, 0, step, -1, 0.0);
  an.close();
  EXPECT_EQ(an.counters().reports, 3u);
  for (const auto& m : log.messages()) {
    if (m.find("CUDA") != std::string::npos) {
      EXPECT_NE(m.find("using the host clock"), std::string::npos) << m;
    }
  }
}

// A device backend whose marks all complete once `complete` is set, as a GPU would later.
class LateDevice : public TimingBackend {
 public:
  explicit LateDevice(std::shared_ptr<std::atomic<bool>> complete)
      : complete_(std::move(complete)) {}
  const char* name() const noexcept override { return "late-device"; }
  std::uint32_t capacity() const noexcept override { return 1024; }
  bool record(std::uint32_t) noexcept override { return true; }
  int elapsed_ms(std::uint32_t, std::uint32_t, double& ms) noexcept override {
    if (!complete_->load()) return 0;
    ms = 2.0;
    return 1;
  }

 private:
  std::shared_ptr<std::atomic<bool>> complete_;
};

TEST(Analyzer, CloseEmitsStepsWaitingForDeferredValuesWithoutThemCounted) {
  TempDir dir;
  auto complete = std::make_shared<std::atomic<bool>>(false);
  auto o = enabled_options();
  o.log_dir = dir.path().string();
  o.timing_backend = [complete] { return std::make_unique<LateDevice>(complete); };
  Analyzer an(o);
  EXPECT_STREQ(an.backend_name(), "late-device");
  const auto fwd = an.stage("forward");
  std::vector<Recorder::DeferToken> tokens;
  for (int step = 0; step < 3; ++step) {
    an.begin_step(step);
    { Analyzer::Section s(an, fwd); }
    tokens.push_back(an.defer("loss"));
    an.end_step();
  }
  EXPECT_NE(tokens[0], 0u);
  EXPECT_TRUE(an.resolve(tokens[0], 0.5));
  EXPECT_TRUE(an.resolve(tokens[2], 2.5));  // step 1's loss never arrives
  complete->store(true);
  an.close();  // nobody resolves from here: step 1 goes without its loss
  const AnalyzerCounters c = an.counters();
  EXPECT_EQ(c.samples_emitted, 3u);
  EXPECT_EQ(c.recorder.deferred_dropped, 1u);
  EXPECT_EQ(c.recorder_dropped, 1u);
  EXPECT_EQ(c.recorder.dropped_steps, 0u);
  EXPECT_FALSE(an.resolve(tokens[1], 1.5));  // closed
  const auto lines = read_lines(dir.path() / "rank-0.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  SampleParser parser;
  std::vector<StepSample> got(3);
  std::string error;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(parser.parse(lines[i], got[i], error)) << error;
  ASSERT_NE(got[0].find_value("loss"), nullptr);
  EXPECT_EQ(got[0].find_value("loss")->value, 0.5);
  EXPECT_EQ(got[1].find_value("loss"), nullptr);
  ASSERT_NE(got[2].find_value("loss"), nullptr);
  EXPECT_EQ(got[2].find_value("loss")->value, 2.5);
  EXPECT_DOUBLE_EQ(got[1].find("forward")->ms, 2.0);
}

TEST(Analyzer, HostClockDefersNothing) {
  Analyzer an(enabled_options());
  an.begin_step(0);
  EXPECT_EQ(an.defer("loss"), 0u);  // the value is recorded at once instead
  an.record("loss", 1.0);
  an.end_step();
  an.close();
  EXPECT_EQ(an.counters().samples_emitted, 1u);
  EXPECT_EQ(an.counters().recorder.deferred_dropped, 0u);
  Analyzer off;  // disabled: nothing to defer
  off.begin_step(0);
  EXPECT_EQ(off.defer("loss"), 0u);
  EXPECT_FALSE(off.resolve(1u, 1.0));
}

TEST(Analyzer, SectionsTimeByIdAndByNameOnSampledStepsOnly) {
  TempDir dir;
  auto o = enabled_options();
  o.interval = 3;
  o.log_dir = dir.path().string();
  Analyzer an(o);
  const auto fwd = an.stage("forward");
  for (int step = 0; step < 6; ++step) {
    an.begin_step(step);
    EXPECT_EQ(an.sampled(), step % 3 == 0);
    for (int micro = 0; micro < 2; ++micro) {
      Analyzer::Section s(an, fwd);
    }
    { Analyzer::Section s(an, "optimizer"); }
    {
      Section raw(*an.recorder(), an.stage("dataloader"));  // the Recorder's own RAII scope
    }
    an.end_step();
  }
  an.close();
  const auto lines = read_lines(dir.path() / "rank-0.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  SampleParser parser;
  StepSample s;
  std::string error;
  ASSERT_TRUE(parser.parse(lines[1], s, error)) << error;
  EXPECT_EQ(s.step, 3);
  ASSERT_EQ(s.stages.size(), 3u);
  EXPECT_EQ(s.stages[0].name, "forward");
  EXPECT_EQ(s.stages[0].calls, 2u);
  EXPECT_EQ(s.stages[1].name, "optimizer");
  EXPECT_EQ(s.stages[1].calls, 1u);
  EXPECT_EQ(s.stages[2].name, "dataloader");
  EXPECT_EQ(s.stages[2].kind, StageKind::data);
}

TEST(Analyzer, CloseIsIdempotentAndLaterCallsDoNothing) {
  auto o = enabled_options();
  Analyzer an(o);
  simulated_step(an, 0, 0, -1, 0.0);
  an.begin_step(1);  // left open: close ends it
  an.close();
  an.close();
  EXPECT_FALSE(an.enabled());
  EXPECT_EQ(an.recorder(), nullptr);
  const auto before = an.counters();
  EXPECT_EQ(before.sampled_steps, 2u);
  EXPECT_EQ(before.reports, 2u);
  simulated_step(an, 0, 2, -1, 0.0);
  an.debug_fail_transport();
  an.add_sink([](std::int64_t, const Metrics&) {});
  EXPECT_EQ(an.counters().sampled_steps, 2u);
  EXPECT_EQ(an.stage("forward"), -1);
}

// A process forked from one with a running Analyzer (a data-loader worker, a checkpoint writer)
// gets a copy of it without its threads, maybe with mutexes those threads held. The child
// records nothing, counts its steps, warns once, and its close() and destructor return at once
// without touching what the threads own; the parent's rank log holds the parent's samples only.
TEST(Analyzer, AForkedChildRecordsNothingCountsItsStepsAndReturnsAtOnce) {
  CapturedLog log;
  TempDir dir;
  auto o = enabled_options();
  o.log_dir = dir.path().string();
  o.close_timeout_s = 20.0;  // a child waiting for the parent's threads would take this long
  auto an = std::make_unique<Analyzer>(o);
  for (int step = 0; step < 3; ++step) simulated_step(*an, 0, step, -1, 0.0);
  const auto before = an->counters();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // gtest assertions do not reach the parent: the exit code says what went wrong.
    const auto start = std::chrono::steady_clock::now();
    int code = 0;
    for (int step = 3; step < 10; ++step) simulated_step(*an, 0, step, -1, 0.0);
    const auto c = an->counters();
    if (an->enabled() || an->sampled()) code = 10;
    if (c.forked_steps_dropped != 7) code = 11;
    if (c.errors != before.errors + 1) code = 12;  // one fork warning, counted
    if (c.samples_emitted != before.samples_emitted) code = 13;
    an->close();
    an.reset();
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(5)) code = 14;
    if (log.count("was forked from pid") != 1) code = 15;
    std::_Exit(code);
  }
  for (int step = 3; step < 6; ++step) simulated_step(*an, 0, step, -1, 0.0);
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 600 && done == 0; ++i) {  // up to 60 s
    done = ::waitpid(child, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (done == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    FAIL() << "the forked child did not finish within 60 s";
  }
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the exit codes in the child's branch";
  an->close();
  EXPECT_EQ(an->counters().forked_steps_dropped, 0u);
  EXPECT_EQ(an->counters().errors, 0u);
  const auto lines = read_lines(dir.path() / "rank-0.jsonl");
  ASSERT_EQ(lines.size(), 6u);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    StepSample s;
    std::string error;
    ASSERT_TRUE(SampleParser().parse(lines[i], s, error)) << error;
    EXPECT_EQ(s.step, static_cast<std::int64_t>(i));
  }
}

TEST(Analyzer, IntervalZeroRecordsNothing) {
  auto o = enabled_options();
  o.interval = 0;
  Analyzer an(o);
  EXPECT_TRUE(an.enabled());
  for (int step = 0; step < 5; ++step) simulated_step(an, 0, step, -1, 0.0);
  an.close();
  EXPECT_EQ(an.counters().sampled_steps, 0u);
  EXPECT_EQ(an.counters().reports, 0u);
}

TEST(Analyzer, UnknownTransportIsAWarningAndTheRankStillLogs) {
  CapturedLog log;
  TempDir dir;
  auto o = enabled_options(1, 2);
  o.transport = "carrier-pigeon";
  o.log_dir = dir.path().string();
  Analyzer an(o);
  ASSERT_TRUE(an.enabled());
  EXPECT_STREQ(an.transport_name(), "");
  for (int step = 0; step < 4; ++step) simulated_step(an, 1, step, -1, 0.0);
  an.close();
  EXPECT_EQ(read_lines(dir.path() / "rank-1.jsonl").size(), 4u);
  EXPECT_EQ(an.counters().errors, 1u);
  EXPECT_EQ(log.count("unknown transport 'carrier-pigeon' (known: local"), 1u) << log.all();
}

// A transport of the test's own, chosen by name: it refuses every message, as a side channel to
// an overloaded analysis rank would.
class RefusingTransport final : public Transport {
 public:
  explicit RefusingTransport(const TransportSetup& s) : setup_(s) {}
  const char* name() const noexcept override { return "refusing"; }
  int rank() const noexcept override { return setup_.rank.rank; }
  int world_size() const noexcept override { return setup_.rank.world_size; }
  TreeLinks links() const override {
    return gather_tree(setup_.rank.rank, setup_.rank.world_size, setup_.analysis_rank, {}, 32);
  }
  bool send(int peer, std::string&) override {
    if (peer == setup_.analysis_rank) ++finals();
    return false;
  }
  void receive(std::vector<TransportMessage>&) override {}
  bool healthy() const override { return true; }
  void fail() override {}
  void shutdown() override {}
  static std::atomic<int>& finals() {
    static std::atomic<int> n{0};
    return n;
  }

 private:
  TransportSetup setup_;
};

TEST(Analyzer, TransportsAreChosenByNameFromTheRegistry) {
  const auto names = transport_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "local"), names.end());
  EXPECT_THROW(register_transport("", [](const TransportSetup& s) {
                 return std::make_unique<RefusingTransport>(s);
               }),
               std::invalid_argument);
  EXPECT_THROW(register_transport("x", nullptr), std::invalid_argument);
  EXPECT_THROW(make_transport("nope", TransportSetup{}), std::invalid_argument);

  RefusingTransport::finals() = 0;
  register_transport("refusing", [](const TransportSetup& s) {
    return std::make_unique<RefusingTransport>(s);
  });
  auto o = enabled_options(1, 2);
  o.transport = "refusing";
  Analyzer an(o);
  EXPECT_STREQ(an.transport_name(), "refusing");
  for (int step = 0; step < 6; ++step) simulated_step(an, 1, step, -1, 0.0);
  an.close();
  EXPECT_EQ(an.counters().send_dropped, 6u);
  EXPECT_EQ(an.counters().samples_sent, 0u);
  EXPECT_GE(RefusingTransport::finals().load(), 1);  // the batches, and the last at close
}

TEST(LogHandler, DeliversToTheHandlerAndSurvivesOneThatThrows) {
  std::vector<std::string> got;
  set_log_handler([&got](LogLevel level, std::string_view m) {
    got.push_back(std::string(to_string(level)) + ":" + std::string(m));
  });
  log_message(LogLevel::warning, "hello");
  EXPECT_EQ(got, (std::vector<std::string>{"warning:hello"}));
  set_log_handler([](LogLevel, std::string_view) { throw std::runtime_error("broken"); });
  EXPECT_NO_THROW(log_message(LogLevel::error, "still fine"));
  set_log_handler({});
  EXPECT_NO_THROW(log_message(LogLevel::debug, "default handler, below its threshold"));
}

}  // namespace
}  // namespace laggard
