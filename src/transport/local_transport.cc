// "local": the side channel between Analyzers of one process. With world size 1 it carries
// nothing; with several ranks that are threads (an inference engine with a thread per device,
// say), those sharing a channel name and world size pass messages through per-rank inboxes.
// The gather tree is the same as across processes (gather_tree, ranks_per_host ranks a host).
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "transport/builtin.hpp"

namespace laggard::detail {
namespace {

struct Inbox {
  std::deque<TransportMessage> messages;
  bool down = false;  // its rank's side channel failed or closed
  std::function<void()> wake;  // its Analyzer's, called after a message is put here
};

struct LocalGroup {
  explicit LocalGroup(int n) : inboxes(static_cast<std::size_t>(n)) {}
  std::mutex mu;
  std::vector<Inbox> inboxes;
};

std::shared_ptr<LocalGroup> group_for(const std::string& key, int world_size) {
  static std::mutex mu;
  static auto* groups = new std::map<std::string, std::weak_ptr<LocalGroup>>;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = groups->begin(); it != groups->end();)  // forget groups nobody uses
    it = it->second.expired() ? groups->erase(it) : std::next(it);
  auto& weak = (*groups)[key];
  auto group = weak.lock();
  if (!group) {
    group = std::make_shared<LocalGroup>(world_size);
    weak = group;
  }
  return group;
}

// Messages a rank may have waiting in its inbox from one peer before sends to it are refused:
// the gather's acknowledgements bound what is in flight long before this.
constexpr std::size_t kMaxInbox = 1u << 16;

class LocalTransport final : public Transport {
 public:
  explicit LocalTransport(const TransportSetup& setup)
      : rank_(setup.rank.rank), world_size_(setup.rank.world_size), warn_(setup.warn) {
    std::vector<int> hosts;
    if (setup.ranks_per_host > 0) {
      hosts.resize(static_cast<std::size_t>(world_size_));
      for (int r = 0; r < world_size_; ++r) hosts[static_cast<std::size_t>(r)] = r / setup.ranks_per_host;
    }
    links_ = gather_tree(rank_, world_size_, setup.analysis_rank, hosts, setup.fan_out);
    if (world_size_ > 1)
      group_ = group_for(setup.channel + "#" + std::to_string(world_size_), world_size_);
  }

  const char* name() const noexcept override { return "local"; }
  int rank() const noexcept override { return rank_; }
  int world_size() const noexcept override { return world_size_; }
  TreeLinks links() const override { return links_; }

  bool send(int peer, std::string& message) override {
    if (failed_ || !group_ || peer < 0 || peer >= world_size_) return false;
    std::lock_guard<std::mutex> lock(group_->mu);
    Inbox& box = group_->inboxes[static_cast<std::size_t>(peer)];
    if (box.down) {
      if (warned_down_.insert(peer).second && warn_)
        warn_("side channel", "rank " + std::to_string(peer) +
                                  "'s side channel is down; messages to it are dropped");
      return false;
    }
    if (box.messages.size() >= kMaxInbox) return false;
    box.messages.push_back(TransportMessage{rank_, std::move(message)});
    if (box.wake) box.wake();  // never waits, takes no lock (Transport::set_wake)
    return true;
  }

  bool set_wake(std::function<void()> wake) override {
    if (!group_) return false;
    std::lock_guard<std::mutex> lock(group_->mu);
    group_->inboxes[static_cast<std::size_t>(rank_)].wake = std::move(wake);
    return true;
  }

  void receive(std::vector<TransportMessage>& out) override {
    if (failed_ || !group_) return;
    std::lock_guard<std::mutex> lock(group_->mu);
    Inbox& box = group_->inboxes[static_cast<std::size_t>(rank_)];
    for (auto& m : box.messages) out.push_back(std::move(m));
    box.messages.clear();
  }

  bool healthy() const override { return !failed_; }

  void fail() override {
    failed_ = true;
    close_inbox();
  }

  void shutdown() override { close_inbox(); }

  ~LocalTransport() override { close_inbox(); }  // nobody wakes an Analyzer that is gone

 private:
  void close_inbox() {
    if (!group_) return;
    std::lock_guard<std::mutex> lock(group_->mu);
    Inbox& box = group_->inboxes[static_cast<std::size_t>(rank_)];
    box.down = true;
    box.messages.clear();
    box.wake = nullptr;
  }

  int rank_;
  int world_size_;
  TreeLinks links_;
  std::function<void(std::string_view, std::string_view)> warn_;
  std::set<int> warned_down_;
  std::shared_ptr<LocalGroup> group_;
  bool failed_ = false;
};

}  // namespace

std::unique_ptr<Transport> make_local_transport(const TransportSetup& setup) {
  if (setup.rank.world_size < 1)
    throw std::invalid_argument("local transport: world_size must be >= 1");
  return std::make_unique<LocalTransport>(setup);
}

}  // namespace laggard::detail
