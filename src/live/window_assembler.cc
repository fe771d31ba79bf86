#include "live/window_assembler.hpp"

#include <algorithm>
#include <utility>

namespace laggard {

WindowAssembler::WindowAssembler(int world_size, Clock::duration timeout, std::size_t max_pending)
    : world_size_(std::max(1, world_size)),
      timeout_(timeout),
      max_pending_(std::max<std::size_t>(1, max_pending)),
      finished_(static_cast<std::size_t>(std::max(1, world_size)), 0) {}

WindowAssembler::Added WindowAssembler::add(StepSample&& sample, Clock::time_point now) {
  if (sample.rank < 0 || sample.rank >= world_size_) return Added::bad_rank;
  if (last_released_ && sample.step <= *last_released_) return Added::late;
  auto [it, inserted] = pending_.try_emplace(sample.step);
  Pending& p = it->second;
  if (inserted) {
    p.first_seen = now;
    p.present.assign(static_cast<std::size_t>(world_size_), 0);
  }
  char& seen = p.present[static_cast<std::size_t>(sample.rank)];
  if (seen) return Added::duplicate;
  seen = 1;
  p.samples.push_back(std::move(sample));
  return Added::ok;
}

void WindowAssembler::finished(int rank) {
  if (rank < 0 || rank >= world_size_) return;
  char& f = finished_[static_cast<std::size_t>(rank)];
  if (!f) {
    f = 1;
    ++finished_count_;
  }
}

bool WindowAssembler::complete(const Pending& p) const {
  for (int r = 0; r < world_size_; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (!p.present[i] && !finished_[i]) return false;
  }
  return true;
}

bool WindowAssembler::next(Window& out, bool& is_complete, Clock::time_point now, bool final) {
  if (pending_.empty()) return false;
  auto it = pending_.begin();
  Pending& p = it->second;
  const bool done = complete(p);
  const bool stale = now - p.first_seen >= timeout_ || pending_.size() > max_pending_;
  if (!(done || stale || final)) return false;
  is_complete = static_cast<int>(p.samples.size()) == world_size_;
  out.step = it->first;
  out.samples = std::move(p.samples);
  // Rank order, whatever order the samples arrived in: reports do not depend on arrival.
  const auto by_rank = [](const StepSample& a, const StepSample& b) { return a.rank < b.rank; };
  if (!std::is_sorted(out.samples.begin(), out.samples.end(), by_rank))  // often they are
    std::sort(out.samples.begin(), out.samples.end(), by_rank);
  last_released_ = it->first;
  pending_.erase(it);
  return true;
}

}  // namespace laggard
