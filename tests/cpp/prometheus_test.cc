#include "laggard/prometheus.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "laggard/analyzer.hpp"
#include "temp_dir.hpp"

namespace laggard {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

Metrics report_metrics() {
  Metrics m;
  m["straggler/backward/local_ms"] = 20.5;
  m["straggler/backward/max_ms"] = 41.0;
  m["straggler/backward/top_rank"] = 1.0;
  m["straggler/confirmed"] = std::string("1:backward,3:data loader");
  m["straggler/likely_bottleneck"] = std::string("backward");
  m["straggler/hints"] = std::string("measured: ...");
  m["straggler/whatif_step_saving_ms"] = 12.25;
  m["straggler/num_confirmed"] = 2.0;
  return m;
}

TEST(PrometheusText, NamesLabelsAndOneFamilyPerName) {
  const std::string text = prometheus_text(40, report_metrics(), {0, 4, 0, "node-\"a\"", ""});
  const std::string expected =
      "# HELP laggard_confirmed_straggler 1 for each (rank, stage) confirmed in the latest "
      "report\n"
      "# TYPE laggard_confirmed_straggler gauge\n"
      "laggard_confirmed_straggler{rank=\"1\",stage=\"backward\"} 1\n"
      "laggard_confirmed_straggler{rank=\"3\",stage=\"data loader\"} 1\n"
      "# HELP laggard_likely_bottleneck 1 for the stage that most likely limits the step\n"
      "# TYPE laggard_likely_bottleneck gauge\n"
      "laggard_likely_bottleneck{stage=\"backward\"} 1\n"
      "# HELP laggard_num_confirmed straggler/num_confirmed\n"
      "# TYPE laggard_num_confirmed gauge\n"
      "laggard_num_confirmed 2\n"
      "# HELP laggard_report_step the step of the latest report\n"
      "# TYPE laggard_report_step gauge\n"
      "laggard_report_step 40\n"
      "# HELP laggard_stage_local_ms the analysis rank's own time in the stage (ms)\n"
      "# TYPE laggard_stage_local_ms gauge\n"
      "laggard_stage_local_ms{stage=\"backward\",rank=\"0\",host=\"node-\\\"a\\\"\"} 20.5\n"
      "# HELP laggard_stage_max_ms straggler/<stage>/max_ms\n"
      "# TYPE laggard_stage_max_ms gauge\n"
      "laggard_stage_max_ms{stage=\"backward\"} 41\n"
      "# HELP laggard_stage_top_rank straggler/<stage>/top_rank\n"
      "# TYPE laggard_stage_top_rank gauge\n"
      "laggard_stage_top_rank{stage=\"backward\"} 1\n"
      "# HELP laggard_whatif_step_saving_ms straggler/whatif_step_saving_ms\n"
      "# TYPE laggard_whatif_step_saving_ms gauge\n"
      "laggard_whatif_step_saving_ms 12.25\n";
  EXPECT_EQ(text, expected);
}

TEST(PrometheusText, NonFiniteValuesAndOddNames) {
  Metrics m;
  m["straggler/a.b-c/mean_ms"] = std::numeric_limits<double>::quiet_NaN();
  m["straggler/odd-name"] = std::numeric_limits<double>::infinity();
  m["straggler/confirmed"] = std::string(",bad,:x,2:,5:fwd");  // malformed items are skipped
  m["other/metric"] = 1.0;                                     // not laggard's: left out
  const std::string text = prometheus_text(0, m, {});
  EXPECT_NE(text.find("laggard_stage_mean_ms{stage=\"a.b-c\"} NaN\n"), std::string::npos) << text;
  EXPECT_NE(text.find("laggard_odd_name +Inf\n"), std::string::npos) << text;
  EXPECT_NE(text.find("laggard_confirmed_straggler{rank=\"5\",stage=\"fwd\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("rank=\"2\""), std::string::npos) << text;
  EXPECT_EQ(text.find("other"), std::string::npos) << text;
}

TEST(PrometheusTextfile, WritesAtomicallyAndReplacesTheFile) {
  testing::TempDir dir("laggard-prom");
  const std::string path = dir.path() + "/laggard.prom";
  std::string error;
  ASSERT_TRUE(write_file_atomically(path, "first 1\n", error)) << error;
  ASSERT_TRUE(write_file_atomically(path, "second 2\n", error)) << error;
  EXPECT_EQ(slurp(path), "second 2\n");
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"laggard.prom"});  // no temp left
}

TEST(PrometheusTextfile, AFailedWriteKeepsTheOldFileAndSaysWhy) {
  testing::TempDir dir("laggard-prom");
  std::string error;
  EXPECT_FALSE(write_file_atomically(dir.path() + "/missing/laggard.prom", "x 1\n", error));
  EXPECT_NE(error.find("missing"), std::string::npos) << error;
  // A directory in the way of the rename: the write fails, nothing is left behind.
  const std::string blocked = dir.path() + "/blocked.prom";
  fs::create_directory(blocked);
  fs::create_directory(blocked + "/child");
  EXPECT_FALSE(write_file_atomically(blocked, "x 1\n", error));
  EXPECT_NE(error.find("blocked.prom"), std::string::npos) << error;
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"blocked.prom"});
}

TEST(PrometheusTextfile, SetupMisuseThrowsNamingThePath) {
  EXPECT_THROW(prometheus_textfile_sink("", {}), std::invalid_argument);
  try {
    prometheus_textfile_sink("/tmp/laggard.txt", {});
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("/tmp/laggard.txt"), std::string::npos) << e.what();
  }
}

// The sink in a live Analyzer: 3 thread ranks, rank 2's forward slow; the file node-exporter
// would read names it, and a sink that cannot write is counted, not raised.
TEST(PrometheusTextfile, AnalyzerWritesTheConfirmedStraggler) {
  testing::TempDir dir("laggard-prom");
  const std::string path = dir.path() + "/laggard.prom";
  constexpr int kRanks = 3;
  constexpr int kSteps = 24;
  std::vector<std::unique_ptr<Analyzer>> ranks(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    AnalyzerOptions o;
    o.enabled = true;
    o.interval = 1;
    o.rank = {r, kRanks, 0, "node-" + std::to_string(r), "dp"};
    o.channel = "prometheus-textfile";
    o.poll_interval_s = 0.001;
    o.close_timeout_s = 5.0;
    o.max_pending_windows = 64;
    o.sinks.push_back(prometheus_textfile_sink(path, o.rank));
    o.sinks.push_back(prometheus_textfile_sink(dir.path() + "/missing/x.prom", o.rank));
    ranks[r] = std::make_unique<Analyzer>(o);
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&ranks, r] {
      Analyzer& an = *ranks[r];
      const auto fwd = an.stage("forward");
      const auto comm = an.stage("communication");
      for (int step = 0; step < kSteps; ++step) {
        an.begin_step(step);
        an.add(fwd, r == 2 ? 15.0 : 10.0);
        an.add(comm, r == 2 ? 1.0 : 6.0);
        an.end_step();
      }
      an.close();
    });
  }
  for (auto& t : threads) t.join();
  const std::string text = slurp(path);
  EXPECT_NE(text.find("laggard_confirmed_straggler{rank=\"2\",stage=\"forward\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("laggard_report_step 23\n"), std::string::npos) << text;
  EXPECT_NE(text.find("laggard_stage_local_ms{stage=\"forward\",rank=\"0\",host=\"node-0\"} 10\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("laggard_stage_top_rank{stage=\"forward\"} 2\n"), std::string::npos)
      << text;
  const auto c = ranks[0]->counters();
  EXPECT_GE(c.reports, 1u);
  EXPECT_EQ(c.errors, c.reports) << c.windows;  // the sink into the missing directory
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"laggard.prom"});
}

}  // namespace
}  // namespace laggard
