// The gather tree: its shape (gather_tree), and Analyzers gathering up it over the "local"
// transport: every window complete and in order, leaders forwarding, a lost leader costing its
// host's windows and nobody's training.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "laggard/analyzer.hpp"
#include "laggard/log.hpp"
#include "transport/sample_codec.hpp"

namespace laggard {
namespace {

std::vector<int> hosts_of(int world, int per_host) {
  std::vector<int> h(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) h[static_cast<std::size_t>(r)] = r / per_host;
  return h;
}

TEST(GatherTree, EveryRankReachesTheRootAndConnectionsStayBounded) {
  constexpr int kWorld = 16384, kPerHost = 8, kFan = 32;
  const auto hosts = hosts_of(kWorld, kPerHost);
  // Every leader's links (members are checked on a few hosts: each call is O(world)).
  std::vector<TreeLinks> leaders(kWorld / kPerHost);
  std::size_t max_links = 0, edges = 0;
  for (int h = 0; h < kWorld / kPerHost; ++h) {
    TreeLinks& l = leaders[static_cast<std::size_t>(h)];
    l = gather_tree(h * kPerHost, kWorld, 0, hosts, kFan);
    max_links = std::max(max_links, l.children.size() + (l.parent >= 0 ? 1 : 0));
    edges += l.children.size();
    for (int m = 1; m < kPerHost; ++m)  // its host's members are its children
      EXPECT_TRUE(std::binary_search(l.children.begin(), l.children.end(), h * kPerHost + m));
  }
  EXPECT_EQ(leaders[0].parent, -1);
  EXPECT_EQ(edges, static_cast<std::size_t>(kWorld - 1));  // a tree: every rank but the root once
  // A leader: 7 host members, at most 32 leaders below it, its parent.
  EXPECT_LE(max_links, static_cast<std::size_t>(kPerHost - 1 + kFan + 1));
  for (int h = 0; h < kWorld / kPerHost; ++h) {
    int hops = 0;
    for (int p = h * kPerHost; p != 0; p = leaders[static_cast<std::size_t>(p / kPerHost)].parent) {
      ASSERT_GE(p, 0);
      ASSERT_EQ(p % kPerHost, 0);
      ASSERT_LT(++hops, 5) << "host " << h << " does not reach the root";
    }
  }
  for (int r : {1, 7, 9, 8191, 16383}) {  // a host member: one link, to its leader
    const TreeLinks l = gather_tree(r, kWorld, 0, hosts, kFan);
    EXPECT_EQ(l.parent, r - r % kPerHost) << r;
    EXPECT_TRUE(l.children.empty()) << r;
  }
}

TEST(GatherTree, TheAnalysisRankLeadsItsHostAndTopsTheTree) {
  const auto hosts = hosts_of(12, 4);  // hosts {0..3} {4..7} {8..11}
  const TreeLinks root = gather_tree(6, 12, 6, hosts, 1);
  EXPECT_EQ(root.parent, -1);
  EXPECT_EQ(root.children, (std::vector<int>{0, 4, 5, 7}));  // its host, then host 0's leader
  EXPECT_EQ(gather_tree(4, 12, 6, hosts, 1).parent, 6);
  EXPECT_EQ(gather_tree(0, 12, 6, hosts, 1).parent, 6);
  EXPECT_EQ(gather_tree(0, 12, 6, hosts, 1).children, (std::vector<int>{1, 2, 3, 8}));
  EXPECT_EQ(gather_tree(8, 12, 6, hosts, 1).parent, 0);  // fan-out 1: a chain of leaders
  // No host information: every rank a host of its own, a fan_out-ary tree by rank.
  EXPECT_EQ(gather_tree(0, 7, 0, {}, 2).children, (std::vector<int>{1, 2}));
  EXPECT_EQ(gather_tree(5, 7, 0, {}, 2).parent, 2);
  EXPECT_THROW(gather_tree(3, 2, 0, {}, 2), std::invalid_argument);
  EXPECT_THROW(gather_tree(0, 2, 0, {1}, 2), std::invalid_argument);
  EXPECT_THROW(gather_tree(0, 2, 0, {}, 0), std::invalid_argument);
}

AnalyzerOptions rank_options(int rank, int world, const std::string& channel) {
  AnalyzerOptions o;
  o.enabled = true;
  o.interval = 1;
  o.rank = {rank, world, 0, "node-" + std::to_string(rank / 3), "dp"};
  o.channel = channel;
  o.ranks_per_host = 3;
  o.fan_out = 2;
  o.poll_interval_s = 0.001;
  o.close_timeout_s = 5.0;
  o.max_pending_windows = 1000;
  return o;
}

void step(Analyzer& an, int rank, std::int64_t s) {
  an.begin_step(s);
  an.add(an.stage("forward"), 10.0 + (rank == 7 ? 3.0 : 0.0));
  an.add(an.stage("backward"), 20.0);
  an.add(an.stage("communication"), rank == 7 ? 1.0 : 4.0);
  an.end_step();
}

TEST(Gather, TwelveRanksInFourHostsDeliverEveryWindowCompleteAndInOrder) {
  constexpr int kWorld = 12, kSteps = 40;
  std::vector<std::unique_ptr<Analyzer>> ranks(kWorld);
  std::vector<std::int64_t> steps;
  std::mutex mu;
  for (int r = 0; r < kWorld; ++r) {
    auto o = rank_options(r, kWorld, "twelve");
    if (r == 0)
      o.sinks.push_back([&](std::int64_t s, const Metrics&) {
        std::lock_guard<std::mutex> lock(mu);
        steps.push_back(s);
      });
    ranks[static_cast<std::size_t>(r)] = std::make_unique<Analyzer>(o);
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      for (int s = 0; s < kSteps; ++s) {
        step(*ranks[static_cast<std::size_t>(r)], r, s);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ranks[static_cast<std::size_t>(r)]->close();
    });
  for (auto& t : threads) t.join();
  const auto root = ranks[0]->counters();
  EXPECT_EQ(root.windows, static_cast<std::uint64_t>(kSteps));
  EXPECT_EQ(root.incomplete_windows, 0u);
  EXPECT_EQ(root.samples_received, static_cast<std::uint64_t>(kSteps * (kWorld - 1)));
  EXPECT_EQ(root.late_samples, 0u);
  EXPECT_EQ(root.samples_sent, static_cast<std::uint64_t>(kSteps));  // its own, into windows
  EXPECT_EQ(root.gather_dropped, 0u);
  std::vector<std::int64_t> want;
  for (int s = 0; s < kSteps; ++s) want.push_back(s);
  EXPECT_EQ(steps, want);
  // Leaders 3, 6, 9 forward their hosts' samples (6 and 9 also each other's: fan-out 2).
  std::uint64_t forwarded = 0;
  for (int r = 1; r < kWorld; ++r) {
    const auto c = ranks[static_cast<std::size_t>(r)]->counters();
    EXPECT_EQ(c.samples_sent, static_cast<std::uint64_t>(kSteps)) << r;
    EXPECT_EQ(c.gather_dropped, 0u) << r;
    EXPECT_EQ(c.errors, 0u) << r;
    forwarded += c.forwarded_samples;
    if (r % 3 != 0) {
      EXPECT_EQ(c.forwarded_samples, 0u) << r;
    }
  }
  EXPECT_GE(forwarded, static_cast<std::uint64_t>(kSteps * 6));
  EXPECT_EQ(ranks[0]->summary().stragglers.size(), 1u);
  EXPECT_EQ(ranks[0]->summary().stragglers.at(0).rank, 7);  // its report came through 2 hops
}

TEST(Gather, ALostLeaderCostsItsHostsWindowsNotTheTraining) {
  constexpr int kWorld = 9, kSteps = 60, kFailAt = 20;
  std::vector<std::string> messages;
  std::mutex log_mu;
  set_log_handler([&](LogLevel, std::string_view m) {
    std::lock_guard<std::mutex> lock(log_mu);
    messages.emplace_back(m);
  });
  std::vector<std::unique_ptr<Analyzer>> ranks(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    auto o = rank_options(r, kWorld, "lost-leader");
    o.fan_out = 8;  // leaders 3 and 6 both under the root
    o.window_timeout_s = 0.2;
    o.side_channel_timeout_s = 0.5;
    ranks[static_cast<std::size_t>(r)] = std::make_unique<Analyzer>(o);
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      for (int s = 0; s < kSteps; ++s) {
        if (r == 3 && s == kFailAt) ranks[3]->debug_fail_transport();  // host 1's leader dies
        step(*ranks[static_cast<std::size_t>(r)], r, s);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ranks[static_cast<std::size_t>(r)]->close(2.0);
    });
  for (auto& t : threads) t.join();
  set_log_handler({});
  for (int r = 0; r < kWorld; ++r)
    EXPECT_EQ(ranks[static_cast<std::size_t>(r)]->counters().sampled_steps,
              static_cast<std::uint64_t>(kSteps));
  const auto root = ranks[0]->counters();
  EXPECT_EQ(root.windows, static_cast<std::uint64_t>(kSteps));  // every window, in order
  EXPECT_GE(root.incomplete_windows, static_cast<std::uint64_t>(kSteps - kFailAt - 5));
  // The other hosts lost nothing; host 1's members count what they could not deliver.
  for (int r : {1, 2, 6, 7, 8}) {
    const auto c = ranks[static_cast<std::size_t>(r)]->counters();
    EXPECT_EQ(c.samples_sent, static_cast<std::uint64_t>(kSteps)) << r;
    EXPECT_EQ(c.gather_dropped, 0u) << r;
  }
  for (int r : {4, 5}) {
    const auto c = ranks[static_cast<std::size_t>(r)]->counters();
    EXPECT_GT(c.gather_dropped, 0u) << r;
    EXPECT_EQ(c.samples_sent + c.gather_dropped, static_cast<std::uint64_t>(kSteps)) << r;
  }
  std::size_t warned = 0;
  for (const auto& m : messages)
    if (m.find("rank 3's side channel is down") != std::string::npos ||
        m.find("presumed down") != std::string::npos)
      ++warned;
  EXPECT_GE(warned, 2u);  // ranks 4 and 5 warn
}

// Runs `ranks` in threads: `steps` steps each, then waits (at most 10 s) until `done(rank)`
// holds on every rank before closing, so that the last verdicts can come down the tree.
void run_ranks(std::vector<std::unique_ptr<Analyzer>>& ranks, int steps,
               const std::function<bool(Analyzer&)>& done) {
  std::vector<std::thread> threads;
  std::atomic<int> finished{0};
  const int world = static_cast<int>(ranks.size());
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      Analyzer& an = *ranks[static_cast<std::size_t>(r)];
      for (int s = 0; s < steps; ++s) {
        step(an, r, s);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!done(an) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      // Nobody closes (the root stops sending verdicts) before every rank has its verdict.
      ++finished;
      while (finished.load() < world && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      an.close();
    });
  for (auto& t : threads) t.join();
}

// The verdict's console lines ("straggler ..." at warning level) that the log handler gets while
// this lives.
class VerdictLines {
 public:
  VerdictLines() {
    set_log_handler([this](LogLevel level, std::string_view m) {
      std::lock_guard<std::mutex> lock(mu_);
      if (level == LogLevel::warning && m.rfind("straggler ", 0) == 0) lines_.emplace_back(m);
    });
  }
  ~VerdictLines() { set_log_handler({}); }
  VerdictLines(const VerdictLines&) = delete;
  VerdictLines& operator=(const VerdictLines&) = delete;
  /// Stops listening and gives what was said.
  std::vector<std::string> take() {
    set_log_handler({});
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// world ranks of one process, on the local channel `channel`.
std::vector<std::unique_ptr<Analyzer>> make_ranks(int world, const std::string& channel) {
  std::vector<std::unique_ptr<Analyzer>> ranks(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    ranks[static_cast<std::size_t>(r)] =
        std::make_unique<Analyzer>(rank_options(r, world, channel));
  return ranks;
}

bool names(const std::optional<StragglerVerdict>& v, int rank, const std::string& stage) {
  if (!v) return false;
  for (const VerdictFinding& f : v->confirmed)
    if (f.rank == rank && f.stage == stage) return true;
  return false;
}

TEST(Gather, EveryRankLearnsTheVerdictAndTheAnalysisRankSaysItOnce) {
  constexpr int kWorld = 12, kSteps = 60;
  VerdictLines console;
  auto ranks = make_ranks(kWorld, "verdict-twelve");
  run_ranks(ranks, kSteps, [](Analyzer& an) {
    return names(an.latest_verdict(), 7, "forward");
  });
  const std::vector<std::string> lines = console.take();
  // Rank 7 is 1.3x slower in forward (step()): every rank, two hops below the root included,
  // reads the verdict; rank 7 knows it is the one, with a score of about 10 / 13.
  for (int r = 0; r < kWorld; ++r) {
    Analyzer& an = *ranks[static_cast<std::size_t>(r)];
    const auto v = an.latest_verdict();
    ASSERT_TRUE(v) << r;
    EXPECT_TRUE(names(v, 7, "forward")) << r;
    EXPECT_EQ(v->num_confirmed, 1) << r;
    EXPECT_EQ(v->rank, r);
    EXPECT_EQ(v->self_confirmed, r == 7) << r;
    ASSERT_TRUE(std::isfinite(v->score)) << r;
    if (r == 7) {
      EXPECT_NEAR(v->score, 10.5 / 13.5, 0.01);
    } else {
      EXPECT_GT(v->score, 0.99) << r;
    }
    const VerdictFinding& f = v->confirmed.at(0);
    EXPECT_EQ(f.host, "node-2");
    EXPECT_NEAR(f.slowdown, 1.3, 0.01) << r;
    EXPECT_NEAR(f.cost_ms, 3.0, 0.01) << r;
    // It is faster in communication by 3 ms: the others wait for it there.
    EXPECT_NE(f.reason.find("its own compute"), std::string::npos) << f.reason;
    EXPECT_NE(f.reason.find("11 ranks wait for it in 'communication'"), std::string::npos)
        << f.reason;
    const Metrics m = an.latest_metrics();
    ASSERT_TRUE(m.count("straggler/confirmed")) << r;
    EXPECT_EQ(std::get<std::string>(m.at("straggler/confirmed")), "7:forward") << r;
    EXPECT_EQ(std::get<double>(m.at("straggler/num_confirmed")), 1.0) << r;
    EXPECT_EQ(std::get<double>(m.at("straggler/local_confirmed")), r == 7 ? 1.0 : 0.0) << r;
    EXPECT_NEAR(std::get<double>(m.at("straggler/local_score")), v->score, 1e-9) << r;
    const auto report = an.latest_report();
    ASSERT_TRUE(report) << r;
    ASSERT_FALSE(report->stragglers.empty()) << r;
    EXPECT_EQ(report->stragglers[0].rank, 7) << r;
    EXPECT_TRUE(report->stragglers[0].confirmed) << r;
    const auto c = an.counters();
    EXPECT_EQ(c.malformed_verdicts, 0u) << r;
    EXPECT_EQ(c.errors, 0u) << r;
    if (r != 0) {
      EXPECT_GT(c.verdicts_received, 0u) << r;
    }
  }
  EXPECT_GT(ranks[0]->counters().verdicts_sent, 0u);
  // The console: one line, when it was confirmed, with its cost and reason; nothing cleared.
  ASSERT_EQ(lines.size(), 1u) << (lines.empty() ? "" : lines[0]);
  EXPECT_EQ(lines[0].rfind("straggler confirmed: rank 7 (host node-2) in 'forward', 1.30x", 0), 0u)
      << lines[0];
  EXPECT_NE(lines[0].find("it costs every step 3.0 ms"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("why: its own compute; 11 ranks wait for it"), std::string::npos)
      << lines[0];
}

TEST(Gather, AStragglerThatRecoversIsClearedOnce) {
  constexpr int kWorld = 4, kSlowUntil = 50, kSteps = 110;
  VerdictLines console;
  auto ranks = make_ranks(kWorld, "verdict-recovers");
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      Analyzer& an = *ranks[static_cast<std::size_t>(r)];
      for (int s = 0; s < kSteps; ++s) {
        an.begin_step(s);
        an.add(an.stage("forward"), 10.0 + (r == 2 && s < kSlowUntil ? 10.0 : 0.0) + 0.01 * (s % 3));
        an.add(an.stage("backward"), 20.0 + 0.01 * ((s + r) % 5));
        an.end_step();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      an.close();
    });
  for (auto& t : threads) t.join();
  const std::vector<std::string> lines = console.take();
  std::size_t confirmed = 0, cleared = 0;
  for (const auto& l : lines) {
    confirmed += l.rfind("straggler confirmed: rank 2 ", 0) == 0;
    cleared += l.rfind("straggler cleared: rank 2 (host node-0) in 'forward'", 0) == 0;
  }
  EXPECT_EQ(confirmed, 1u);
  EXPECT_EQ(cleared, 1u);
  EXPECT_EQ(lines.size(), 2u);
}

// A transport that passes every call through to another (the tests' wrappers below override
// what they watch).
class PassThrough : public Transport {
 public:
  explicit PassThrough(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  int rank() const noexcept override { return inner_->rank(); }
  int world_size() const noexcept override { return inner_->world_size(); }
  TreeLinks links() const override { return inner_->links(); }
  bool send(int peer, std::string& message) override { return inner_->send(peer, message); }
  void receive(std::vector<TransportMessage>& out) override { inner_->receive(out); }
  void progress() override { inner_->progress(); }
  void broken_links(std::vector<std::pair<int, std::string>>& out) override {
    inner_->broken_links(out);
  }
  bool healthy() const override { return inner_->healthy(); }
  void fail() override { inner_->fail(); }
  void shutdown() override { inner_->shutdown(); }

 protected:
  std::unique_ptr<Transport> inner_;
};

// A transport that passes everything through to the local one, records the verdicts that
// arrive, and slips some bad ones in first.
class Tap final : public PassThrough {
 public:
  Tap(std::unique_ptr<Transport> inner, std::vector<TransportMessage> inject,
      std::shared_ptr<std::vector<std::string>> seen, std::shared_ptr<std::mutex> mu)
      : PassThrough(std::move(inner)), inject_(std::move(inject)), seen_(std::move(seen)),
        mu_(std::move(mu)) {}
  const char* name() const noexcept override { return "tap"; }
  void receive(std::vector<TransportMessage>& out) override {
    for (auto& m : inject_) out.push_back(std::move(m));
    inject_.clear();
    const std::size_t first = out.size();
    inner_->receive(out);
    std::lock_guard<std::mutex> lock(*mu_);
    for (std::size_t i = first; i < out.size(); ++i)
      if (out[i].bytes.size() > 3 && out[i].bytes[3] == 3) seen_->push_back(out[i].bytes);
  }

 private:
  std::vector<TransportMessage> inject_;
  std::shared_ptr<std::vector<std::string>> seen_;
  std::shared_ptr<std::mutex> mu_;
};

TEST(Gather, VerdictsCarryOnlyTheSubtreesScoresAndMalformedOnesAreCounted) {
  // Hosts {0,1,2} {3,4,5}: the root 0 sends to 1, 2 and leader 3; 3 to 4 and 5.
  constexpr int kWorld = 6, kSteps = 40;
  auto mu = std::make_shared<std::mutex>();
  std::vector<std::shared_ptr<std::vector<std::string>>> seen(kWorld);
  std::string good;
  {
    StragglerVerdict v;
    v.seq = 1;
    wire::encode_verdict(v, {}, good);
  }
  std::vector<std::unique_ptr<Analyzer>> ranks(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    seen[static_cast<std::size_t>(r)] = std::make_shared<std::vector<std::string>>();
    auto o = rank_options(r, kWorld, "verdict-tap");
    o.fan_out = 8;
    std::vector<TransportMessage> inject;
    if (r == 4) {
      inject.push_back({3, good.substr(0, good.size() - 1)});  // cut short
      inject.push_back({3, std::string("Lg", 2) + static_cast<char>(wire::kVersion) +
                               std::string("\x03\x00\x01\xff\xff\xff\xff\x0f", 8)});
      inject.push_back({5, good});  // well formed, but not from its parent
    }
    o.transport_factory = [inject, s = seen[static_cast<std::size_t>(r)], mu](
                              const TransportSetup& setup) -> std::unique_ptr<Transport> {
      return std::make_unique<Tap>(make_transport("local", setup), inject, s, mu);
    };
    ranks[static_cast<std::size_t>(r)] = std::make_unique<Analyzer>(o);
  }
  run_ranks(ranks, kSteps, [](Analyzer& an) {
    const auto v = an.latest_verdict();
    return v && v->step >= kSteps - 5 && std::isfinite(v->score);
  });
  EXPECT_EQ(ranks[4]->counters().malformed_verdicts, 3u);
  std::lock_guard<std::mutex> lock(*mu);
  for (int r = 1; r < kWorld; ++r) {
    const auto c = ranks[static_cast<std::size_t>(r)]->counters();
    EXPECT_GT(c.verdicts_received, 0u) << r;
    if (r != 4) {
      EXPECT_EQ(c.malformed_verdicts, 0u) << r;
    }
    // Leader 3 passes each verdict to its two members (none to a member that said its last
    // batch already, as it closes; one replaced by a newer before its link took it).
    if (r == 3) {
      EXPECT_LE(c.verdicts_sent, c.verdicts_received * 2);
      EXPECT_GE(c.verdicts_sent, c.verdicts_received);
    } else {
      EXPECT_EQ(c.verdicts_sent, 0u) << r;
    }
    const auto v = ranks[static_cast<std::size_t>(r)]->latest_verdict();
    ASSERT_TRUE(v) << r;
    EXPECT_TRUE(std::isfinite(v->score)) << r;
    // What came over the wire: the receiver's subtree's scores only.
    std::set<int> scored;
    std::size_t largest = 0;
    for (const std::string& bytes : *seen[static_cast<std::size_t>(r)]) {
      StragglerVerdict got;
      std::vector<wire::RankScore> scores;
      std::string error;
      if (!wire::decode_verdict(bytes, got, scores, error)) continue;  // the injected ones
      largest = std::max(largest, bytes.size());
      for (const auto& s : scores) scored.insert(s.rank);
    }
    const std::set<int> subtree = r == 3 ? std::set<int>{3, 4, 5} : std::set<int>{r};
    EXPECT_EQ(scored, subtree) << r;
    EXPECT_LT(largest, 64u) << r;  // healthy: no findings, a few scores
  }
}

// Acting on a verdict: every rank's on_straggler is called once, on its own thread, with the
// finding's onset and confirmation; a callback that throws is counted; the stop step the
// analysis rank agrees reaches every rank, and every rank stops before it.
TEST(Gather, CallbacksAndTheAgreedStopStepReachEveryRank) {
  constexpr int kWorld = 12;
  std::vector<std::unique_ptr<Analyzer>> ranks(kWorld);
  std::vector<int> called(kWorld, 0), thrown(kWorld, 0);
  std::vector<VerdictFinding> seen(kWorld);
  std::vector<std::int64_t> stopped_at(kWorld, -1), stop_of(kWorld, -1);
  for (int r = 0; r < kWorld; ++r) {
    auto o = rank_options(r, kWorld, "verdict-stop");
    o.stop_after_windows = 2;
    o.stop_lead_s = 0.2;
    auto& an = ranks[static_cast<std::size_t>(r)];
    an = std::make_unique<Analyzer>(o);
    const auto i = static_cast<std::size_t>(r);
    an->on_straggler([&called, &seen, i](const VerdictFinding& f, const StragglerVerdict&) {
      ++called[i];
      seen[i] = f;
    });
    an->on_straggler([&thrown, i](const VerdictFinding&, const StragglerVerdict&) {
      ++thrown[i];
      throw std::runtime_error("a callback that fails");
    });
  }
  std::vector<std::thread> threads;
  std::atomic<int> finished{0};
  for (int r = 0; r < kWorld; ++r)
    threads.emplace_back([&, r] {
      Analyzer& an = *ranks[static_cast<std::size_t>(r)];
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      std::int64_t s = 0;
      for (; std::chrono::steady_clock::now() < until; ++s) {
        const std::int64_t stop = an.stop_step();
        if (stop >= 0 && s >= stop) break;
        an.begin_step(s);  // a step of 2 ms (the stop's lead is reckoned in step time)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        an.add(an.stage("forward"), 10.0 + (r == 7 ? 3.0 : 0.0));
        an.add(an.stage("backward"), 20.0);
        an.add(an.stage("communication"), r == 7 ? 1.0 : 4.0);
        an.end_step();
      }
      stopped_at[static_cast<std::size_t>(r)] = s;
      stop_of[static_cast<std::size_t>(r)] = an.stop_step();
      ++finished;
      while (finished.load() < kWorld && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      an.close();
    });
  for (auto& t : threads) t.join();
  const std::int64_t stop = stop_of[0];
  ASSERT_GT(stop, 0);
  for (int r = 0; r < kWorld; ++r) {
    const auto i = static_cast<std::size_t>(r);
    EXPECT_EQ(stop_of[i], stop) << r;
    EXPECT_EQ(stopped_at[i], stop) << r;  // it stopped before the agreed step, not at a timeout
    EXPECT_EQ(called[i], 1) << r;         // once, not per verdict
    EXPECT_EQ(thrown[i], 1) << r;
    EXPECT_EQ(seen[i].rank, 7) << r;
    EXPECT_EQ(seen[i].stage, "forward") << r;
    EXPECT_LE(seen[i].onset_step, seen[i].confirmed_step) << r;
    EXPECT_GE(seen[i].windows_held, 1) << r;
    EXPECT_LT(seen[i].confirmed_step, stop) << r;
    EXPECT_EQ(ranks[i]->counters().errors, 1u) << r;  // the throwing callback, counted
  }
}


// A transport that passes everything through to the local one and writes down, per turn (a
// turn: one receive() call, which Gather::tick makes once), the verdicts this rank sends and
// receives and the acknowledgements it receives, alone or riding on a verdict.
struct WireLog {
  struct Verdict {
    int turn = 0;
    int peer = 0;  // sent: to; received: from
    bool sent = false;
    std::uint64_t seq = 0;
    std::int64_t step = 0;
    std::vector<int> confirmed;  // the ranks it names
    std::string key;             // its confirmed (rank, stage)s, their number, its stop step
    std::uint64_t ack = 0;       // an acknowledgement riding along
    std::chrono::steady_clock::time_point at;
  };
  std::mutex mu;
  std::atomic<int> turns{0};
  std::vector<Verdict> verdicts;
  std::size_t acks_alone = 0;     // acknowledgements received in messages of their own
  std::size_t acks_riding = 0;    // ... on a verdict
};

class Recording final : public PassThrough {
 public:
  Recording(std::unique_ptr<Transport> inner, std::shared_ptr<WireLog> log)
      : PassThrough(std::move(inner)), log_(std::move(log)) {}
  const char* name() const noexcept override { return "recording"; }
  bool send(int peer, std::string& message) override {
    const std::string copy = message;
    if (!inner_->send(peer, message)) return false;
    note(peer, copy, true);
    return true;
  }
  void receive(std::vector<TransportMessage>& out) override {
    ++log_->turns;
    const std::size_t first = out.size();
    inner_->receive(out);
    for (std::size_t i = first; i < out.size(); ++i) note(out[i].peer, out[i].bytes, false);
  }

 private:
  void note(int peer, const std::string& bytes, bool sent) {
    wire::Decoder::Header h;
    std::string error;
    if (!wire::Decoder::header(bytes, h, error)) return;
    std::lock_guard<std::mutex> lock(log_->mu);
    if (h.kind == wire::Kind::ack && !sent) ++log_->acks_alone;
    if (h.kind != wire::Kind::verdict) return;
    if (h.ack > 0 && !sent) ++log_->acks_riding;
    StragglerVerdict v;
    std::vector<wire::RankScore> scores;
    if (!wire::decode_verdict(bytes, v, scores, error)) return;
    WireLog::Verdict w;
    w.turn = log_->turns.load();
    w.peer = peer;
    w.sent = sent;
    w.seq = v.seq;
    w.step = v.step;
    w.ack = h.ack;
    std::vector<std::string> named;
    for (const VerdictFinding& f : v.confirmed) {
      w.confirmed.push_back(f.rank);
      named.push_back(std::to_string(f.rank) + ":" + f.stage);
    }
    std::sort(named.begin(), named.end());
    for (const std::string& n : named) w.key += n + ",";
    w.key += " " + std::to_string(v.num_confirmed) + " " + std::to_string(v.stop_step);
    w.at = std::chrono::steady_clock::now();
    log_->verdicts.push_back(std::move(w));
  }

  std::shared_ptr<WireLog> log_;
};

// Hosts {0,1,2} {3,4,5}: the root 0 sends to 1, 2 and leader 3; 3 to 4 and 5. Rank 4 is 1.3x
// slower in forward. Every rank's transport is recorded.
std::vector<std::unique_ptr<Analyzer>> recorded_ranks(
    const std::string& channel, double batch_period_s,
    std::vector<std::shared_ptr<WireLog>>& logs) {
  constexpr int kWorld = 6;
  std::vector<std::unique_ptr<Analyzer>> ranks(kWorld);
  logs.assign(kWorld, nullptr);
  for (int r = 0; r < kWorld; ++r) {
    auto log = std::make_shared<WireLog>();
    logs[static_cast<std::size_t>(r)] = log;
    auto o = rank_options(r, kWorld, channel);
    o.fan_out = 8;
    o.batch_period_s = batch_period_s;
    o.transport_factory = [log](const TransportSetup& setup) -> std::unique_ptr<Transport> {
      return std::make_unique<Recording>(make_transport("local", setup), log);
    };
    ranks[static_cast<std::size_t>(r)] = std::make_unique<Analyzer>(o);
  }
  return ranks;
}

void slow_four(Analyzer& an, int rank, std::int64_t s) {
  an.begin_step(s);
  an.add(an.stage("forward"), 10.0 + (rank == 4 ? 3.0 : 0.0));
  an.add(an.stage("backward"), 20.0);
  an.add(an.stage("communication"), rank == 4 ? 1.0 : 4.0);
  an.end_step();
}

bool names_rank(const std::vector<int>& confirmed, int rank) {
  return std::find(confirmed.begin(), confirmed.end(), rank) != confirmed.end();
}

// Each rank on a thread of its own: `steps` steps of slow_four, 1 ms apart; then it waits (10 s
// at most) until done(an, rank) holds and for every rank to be there, and calls
// at_close(an, rank) just before it closes.
template <class Done, class AtClose>
void run_slow_four(std::vector<std::unique_ptr<Analyzer>>& ranks, int steps, Done done,
                   AtClose at_close) {
  const int world = static_cast<int>(ranks.size());
  std::vector<std::thread> threads;
  std::atomic<int> finished{0};
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      Analyzer& an = *ranks[static_cast<std::size_t>(r)];
      for (int s = 0; s < steps; ++s) {
        slow_four(an, r, s);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!done(an, r) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ++finished;
      while (finished.load() < world && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      at_close(an, r);
      an.close();
    });
  for (auto& t : threads) t.join();
}

// Verdicts at most once per batch_period_s per child, the latest winning: with a period longer
// than the run, a child gets the first verdict, the one that confirms the straggler, and
// nothing more until close, however many windows there are. The confirmation goes at once:
// the analysis rank sends it to each child in the turn it is made, and the leader passes it on
// in the turn it arrives.
TEST(Gather, VerdictsAreHeldToTheBatchPeriodButAChangeInTheConfirmedSetGoesAtOnce) {
  constexpr int kWorld = 6, kSteps = 800;
  std::vector<std::shared_ptr<WireLog>> logs;
  // Batches still go every 64 samples (max_batch_samples): the windows keep coming.
  auto ranks = recorded_ranks("verdict-held", 60.0, logs);
  std::atomic<int> confirmed_turn{-1};
  set_log_handler([&](LogLevel level, std::string_view m) {
    if (level == LogLevel::warning && m.rfind("straggler confirmed: rank 4 ", 0) == 0)
      confirmed_turn.store(logs[0]->turns.load());  // said on the root's background thread
  });
  std::atomic<bool> windows_enough{false};
  run_slow_four(
      ranks, kSteps,
      [](Analyzer& an, int r) {  // every rank has the confirmation long before close
        return names(an.latest_verdict(), 4, "forward") &&
               (r != 0 || an.counters().windows >= kSteps / 2);
      },
      [&](Analyzer& an, int r) {  // (a held verdict would not come)
        EXPECT_TRUE(names(an.latest_verdict(), 4, "forward")) << "rank " << r << " before close";
        if (r == 0) windows_enough = an.counters().windows >= kSteps / 2;
      });
  set_log_handler({});
  ASSERT_TRUE(windows_enough.load());
  const auto root = ranks[0]->counters();
  EXPECT_EQ(root.windows, static_cast<std::uint64_t>(kSteps));
  // Each of the 3 children: the first verdict, the confirmation (the first may be it: the
  // first batches bring 64 windows at once), a few more only if the confirmed set flickered,
  // and the last at close; not one a window.
  EXPECT_GE(root.verdicts_sent, 3u);
  EXPECT_LE(root.verdicts_sent, 3u * 6u) << "windows " << root.windows;
  for (int r = 1; r < kWorld; ++r) {
    const auto c = ranks[static_cast<std::size_t>(r)]->counters();
    EXPECT_GE(c.verdicts_received, 1u) << r;
    EXPECT_LE(c.verdicts_received, 6u) << r;
    EXPECT_EQ(c.gather_dropped, 0u) << r;
    EXPECT_EQ(c.errors, 0u) << r;
  }
  // The root: the verdict naming rank 4 goes to every child in the turn it is confirmed.
  const int turn = confirmed_turn.load();
  ASSERT_GE(turn, 0);
  for (int child : {1, 2, 3}) {
    const WireLog& log = *logs[0];
    const auto it = std::find_if(log.verdicts.begin(), log.verdicts.end(), [&](const auto& v) {
      return v.sent && v.peer == child && names_rank(v.confirmed, 4);
    });
    ASSERT_NE(it, log.verdicts.end()) << child;
    EXPECT_EQ(it->turn, turn) << child;
  }
  // The leader: it passes it on to 4 and 5 in the turn it arrives.
  const WireLog& leader = *logs[3];
  const auto got = std::find_if(leader.verdicts.begin(), leader.verdicts.end(), [](const auto& v) {
    return !v.sent && names_rank(v.confirmed, 4);
  });
  ASSERT_NE(got, leader.verdicts.end());
  for (int child : {4, 5}) {
    const auto it = std::find_if(leader.verdicts.begin(), leader.verdicts.end(), [&](const auto& v) {
      return v.sent && v.peer == child && names_rank(v.confirmed, 4);
    });
    ASSERT_NE(it, leader.verdicts.end()) << child;
    EXPECT_EQ(it->turn, got->turn) << child;
    EXPECT_EQ(it->seq, got->seq) << child;
  }
}

// With a period shorter than the run, held verdicts do go (the latest, with the next
// acknowledgement to that child, or alone after two periods): every rank's verdict keeps up
// with the windows, yet two verdicts the analysis rank sends a child with the same confirmed
// set are a period apart or more, however often windows come (batches of 64 samples come
// faster than the period); acknowledgements ride on them.
TEST(Gather, HeldVerdictsGoAtMostOncePerPeriodTheLatestWinning) {
  constexpr int kWorld = 6, kSteps = 800;
  constexpr double kPeriod = 0.1;
  std::vector<std::shared_ptr<WireLog>> logs;
  auto ranks = recorded_ranks("verdict-period", kPeriod, logs);
  std::atomic<std::int64_t> closing_ns{0};  // when the first rank began to close
  const auto recent = [](Analyzer& an) {
    const auto v = an.latest_verdict();
    return v && v->step >= kSteps - 30;
  };
  run_slow_four(
      ranks, kSteps, [&](Analyzer& an, int) { return recent(an); },
      [&](Analyzer& an, int r) {
        EXPECT_TRUE(recent(an)) << "rank " << r << " before close";  // the held ones came
        std::int64_t zero = 0;
        closing_ns.compare_exchange_strong(
            zero, std::chrono::steady_clock::now().time_since_epoch().count());
      });
  const std::chrono::steady_clock::time_point closing{
      std::chrono::steady_clock::duration(closing_ns.load())};
  const auto root = ranks[0]->counters();
  EXPECT_EQ(root.windows, static_cast<std::uint64_t>(kSteps));
  std::size_t spaced = 0;
  {
    const WireLog& log = *logs[0];
    for (int child : {1, 2, 3}) {
      const WireLog::Verdict* last = nullptr;
      for (const auto& w : log.verdicts) {
        if (!w.sent || w.peer != child) continue;
        if (last != nullptr && w.key == last->key && w.at < closing) {
          ++spaced;
          EXPECT_GE(std::chrono::duration<double>(w.at - last->at).count(), kPeriod * 0.95)
              << "child " << child << " seq " << last->seq << " then " << w.seq;
        }
        last = &w;
      }
    }
  }
  EXPECT_GE(spaced, 3u);  // held verdicts went, not only changes
  for (int r = 1; r < kWorld; ++r) {
    const auto c = ranks[static_cast<std::size_t>(r)]->counters();
    EXPECT_EQ(c.gather_dropped, 0u) << r;
    EXPECT_EQ(c.errors, 0u) << r;
    EXPECT_LT(c.verdicts_received, static_cast<std::uint64_t>(kSteps / 10)) << r;
    // Successive verdicts a child receives: newer each time (the latest wins).
    const WireLog& log = *logs[static_cast<std::size_t>(r)];
    std::uint64_t last = 0;
    for (const auto& w : log.verdicts)
      if (!w.sent) {
        EXPECT_GT(w.seq, last) << r;
        last = w.seq;
      }
  }
  // The root's children are acknowledged on verdicts too, not only in messages of their own.
  std::size_t riding = 0;
  for (int r : {1, 2, 3}) riding += logs[static_cast<std::size_t>(r)]->acks_riding;
  EXPECT_GT(riding, 0u);
}

}  // namespace
}  // namespace laggard
