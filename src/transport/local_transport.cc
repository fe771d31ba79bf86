// "local": the side channel between Analyzers of one process. With world size 1 it carries
// nothing; with several ranks that are threads (an inference engine with a thread per device,
// say), those sharing a channel name and world size hand batches to the analysis rank through a
// bounded in-memory inbox.
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "transport/builtin.hpp"

namespace laggard::detail {
namespace {

struct LocalGroup {
  std::mutex mu;
  std::deque<SampleBatch> inbox;
  std::size_t queued_samples = 0;
  bool down = false;  // the analysis rank's side channel failed or closed
};

std::shared_ptr<LocalGroup> group_for(const std::string& key) {
  static std::mutex mu;
  static auto* groups = new std::map<std::string, std::weak_ptr<LocalGroup>>;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = groups->begin(); it != groups->end();)  // forget groups nobody uses
    it = it->second.expired() ? groups->erase(it) : std::next(it);
  auto& weak = (*groups)[key];
  auto group = weak.lock();
  if (!group) {
    group = std::make_shared<LocalGroup>();
    weak = group;
  }
  return group;
}

class LocalTransport final : public Transport {
 public:
  explicit LocalTransport(const TransportSetup& setup)
      : rank_(setup.rank.rank),
        world_size_(setup.rank.world_size),
        analysis_rank_(setup.analysis_rank),
        max_unacked_(setup.max_unacked_samples),
        warn_(setup.warn) {
    if (world_size_ > 1)
      group_ = group_for(setup.channel + "#" + std::to_string(world_size_));
  }

  const char* name() const noexcept override { return "local"; }
  int rank() const noexcept override { return rank_; }
  int world_size() const noexcept override { return world_size_; }

  bool send(SampleBatch& batch) override {
    if (failed_ || !group_) return false;
    std::lock_guard<std::mutex> lock(group_->mu);
    if (group_->down) {
      peer_down_ = true;
      warn("the analysis rank's side channel is down; samples are dropped (the rank log still "
           "has them)");
      return false;
    }
    if (batch.samples > 0 && group_->queued_samples + batch.samples > max_unacked_) {
      warn("the analysis rank is behind (" + std::to_string(group_->queued_samples) +
           " samples waiting); samples are dropped");
      return false;
    }
    group_->queued_samples += batch.samples;
    group_->inbox.push_back(std::move(batch));
    return true;
  }

  void receive(std::vector<SampleBatch>& out) override {
    if (failed_ || !group_) return;
    std::lock_guard<std::mutex> lock(group_->mu);
    for (auto& b : group_->inbox) out.push_back(std::move(b));
    group_->inbox.clear();
    group_->queued_samples = 0;
  }

  bool settled() const override { return true; }  // a hand-off in memory is delivered at once

  bool healthy() const override { return !failed_ && !peer_down_; }

  void fail() override {
    failed_ = true;
    close_inbox();
  }

  void shutdown() override { close_inbox(); }

 private:
  void close_inbox() {
    if (!group_ || rank_ != analysis_rank_) return;
    std::lock_guard<std::mutex> lock(group_->mu);
    group_->down = true;
    group_->inbox.clear();
    group_->queued_samples = 0;
  }

  void warn(const std::string& message) {
    if (warn_) warn_("side channel", message);
  }

  int rank_;
  int world_size_;
  int analysis_rank_;
  std::size_t max_unacked_;
  std::function<void(std::string_view, std::string_view)> warn_;
  std::shared_ptr<LocalGroup> group_;
  bool failed_ = false;
  bool peer_down_ = false;
};

}  // namespace

std::unique_ptr<Transport> make_local_transport(const TransportSetup& setup) {
  if (setup.rank.world_size < 1)
    throw std::invalid_argument("local transport: world_size must be >= 1");
  return std::make_unique<LocalTransport>(setup);
}

}  // namespace laggard::detail
