// The gather tree: its shape (gather_tree), and Analyzers gathering up it over the "local"
// transport: every window complete and in order, leaders forwarding, a lost leader costing its
// host's windows and nobody's training.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "laggard/analyzer.hpp"
#include "laggard/log.hpp"

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

}  // namespace
}  // namespace laggard
