#include "laggard/prometheus.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
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

// The temporary file was a predictable name (.laggard.prom.<pid>.tmp) opened with O_CREAT |
// O_TRUNC: another user who planted a link there made the sink truncate and write the file the
// link pointed to. Now it is made by mkstemp (a fresh name, O_EXCL): the planted link and its
// target stay as they were, and the .prom file is a regular file node-exporter can read.
TEST(PrometheusTextfile, APlantedLinkAtTheTemporaryNameIsNotWrittenThrough) {
  testing::TempDir dir("laggard-prom");
  const std::string victim = dir.path() + "/victim";
  {
    std::ofstream(victim) << "secret\n";
  }
  ASSERT_EQ(::chmod(victim.c_str(), 0600), 0);
  const std::string path = dir.path() + "/laggard.prom";
  const std::string planted = dir.path() + "/.laggard.prom." + std::to_string(::getpid()) + ".tmp";
  fs::create_symlink(victim, planted);
  std::string error;
  ASSERT_TRUE(write_file_atomically(path, "laggard_up 1\n", error)) << error;
  EXPECT_EQ(slurp(victim), "secret\n");
  struct stat st {};
  ASSERT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  const mode_t mask = ::umask(022);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0644u & ~mask);
  EXPECT_EQ(slurp(path), "laggard_up 1\n");
  EXPECT_TRUE(fs::is_symlink(planted));  // left alone
  // A link at the .prom path itself is replaced by the new file, its target left alone.
  fs::remove(path);
  fs::create_symlink(victim, path);
  ASSERT_TRUE(write_file_atomically(path, "laggard_up 2\n", error)) << error;
  EXPECT_EQ(slurp(victim), "secret\n");
  EXPECT_FALSE(fs::is_symlink(path));
  EXPECT_EQ(slurp(path), "laggard_up 2\n");
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
// Three thread ranks, rank 2 slow in forward; the analysis rank writes `path` (and tries a
// directory that does not exist). Returns the analysis rank's counters.
AnalyzerCounters run_with_textfile_sink(const std::string& path, const std::string& missing) {
  constexpr int kRanks = 3;
  constexpr int kSteps = 24;
  std::vector<std::unique_ptr<Analyzer>> ranks(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    AnalyzerOptions o;
    o.enabled = true;
    o.interval = 1;
    o.rank = {r, kRanks, 0, "node-" + std::to_string(r), "dp"};
    o.channel = "prometheus-textfile-" + path;
    o.poll_interval_s = 0.001;
    o.close_timeout_s = 5.0;
    o.max_pending_windows = 64;
    o.sinks.push_back(prometheus_textfile_sink(path, o.rank));
    if (!missing.empty()) o.sinks.push_back(prometheus_textfile_sink(missing, o.rank));
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
  return ranks[0]->counters();
}

TEST(PrometheusTextfile, AnalyzerWritesTheConfirmedStraggler) {
  testing::TempDir dir("laggard-prom");
  const std::string path = dir.path() + "/laggard.prom";
  const auto c = run_with_textfile_sink(path, dir.path() + "/missing/x.prom");
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
  EXPECT_GE(c.reports, 1u);
  EXPECT_EQ(c.errors, c.reports) << c.windows;  // the sink into the missing directory
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"laggard.prom"});
}

// node-exporter: Debian's prometheus-node-exporter, or LAGGARD_NODE_EXPORTER; "" when missing.
std::string node_exporter() {
  if (const char* env = std::getenv("LAGGARD_NODE_EXPORTER")) return env;
  for (const char* p : {"/usr/bin/prometheus-node-exporter", "/usr/local/bin/node_exporter"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) ::close(fd);
  return ok ? ntohs(a.sin_port) : -1;
}

// The body of GET http://127.0.0.1:port/path (HTTP/1.0: the server closes when done), or "".
std::string http_get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buf[65536];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) response.append(buf, n);
    }
  }
  ::close(fd);
  const std::size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || response.find(" 200 ") == std::string::npos ||
      body == std::string::npos)
    return "";
  return response.substr(body + 4);
}

// The textfile as Prometheus gets it: node-exporter's textfile collector reads the directory
// and serves it, scraped here over HTTP on localhost.
TEST(PrometheusTextfile, NodeExporterServesItOverHttp) {
  const std::string exporter = node_exporter();
  if (exporter.empty())
    GTEST_SKIP() << "node-exporter not installed (Debian: prometheus-node-exporter, which "
                    "scripts/install-deps.sh installs)";
  testing::TempDir dir("laggard-prom-http");
  const std::string textfiles = dir.path() + "/textfile";
  fs::create_directories(textfiles);
  run_with_textfile_sink(textfiles + "/laggard.prom", "");
  const int port = free_port();
  ASSERT_GT(port, 0);
  const std::string log = dir.path() + "/node-exporter.log";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(port);
    const std::string dir_flag = "--collector.textfile.directory=" + textfiles;
    std::FILE* out = std::freopen(log.c_str(), "w", stdout);
    if (out != nullptr) ::dup2(::fileno(stdout), 2);
    ::execl(exporter.c_str(), exporter.c_str(), "--collector.disable-defaults",
            "--collector.textfile", dir_flag.c_str(), listen.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  std::string body;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (body.empty() && std::chrono::steady_clock::now() < deadline) {
    body = http_get(port, "/metrics");
    if (body.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_FALSE(body.empty()) << "no answer from node-exporter on port " << port << ":\n"
                             << slurp(log);
  // node-exporter parsed the file (a bad one is a scrape error) and serves its samples, labels
  // sorted by name.
  EXPECT_NE(body.find("node_textfile_scrape_error 0\n"), std::string::npos) << body;
  EXPECT_NE(body.find("laggard_confirmed_straggler{rank=\"2\",stage=\"forward\"} 1\n"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("laggard_stage_top_rank{stage=\"forward\"} 2\n"), std::string::npos)
      << body;
  EXPECT_NE(body.find("laggard_stage_local_ms{host=\"node-0\",rank=\"0\",stage=\"forward\"} 10\n"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("laggard_report_step 23\n"), std::string::npos) << body;
}

}  // namespace
}  // namespace laggard
