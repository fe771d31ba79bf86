// The gather tree every rank computes alike (laggard/transport.hpp): hosts, their leaders, and
// the leaders' tree under the analysis rank.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "laggard/transport.hpp"

namespace laggard {

TreeLinks gather_tree(int rank, int world_size, int root, const std::vector<int>& host_of,
                      int fan_out) {
  if (world_size < 1) throw std::invalid_argument("gather_tree: world_size must be >= 1");
  if (rank < 0 || rank >= world_size)
    throw std::invalid_argument("gather_tree: rank " + std::to_string(rank) + " outside [0, " +
                                std::to_string(world_size) + ")");
  if (root < 0 || root >= world_size)
    throw std::invalid_argument("gather_tree: root " + std::to_string(root) + " outside [0, " +
                                std::to_string(world_size) + ")");
  if (!host_of.empty() && host_of.size() != static_cast<std::size_t>(world_size))
    throw std::invalid_argument("gather_tree: host_of has " + std::to_string(host_of.size()) +
                                " entries for " + std::to_string(world_size) + " ranks");
  if (fan_out < 1) throw std::invalid_argument("gather_tree: fan_out must be >= 1");
  const auto host = [&](int r) { return host_of.empty() ? r : host_of[static_cast<std::size_t>(r)]; };

  // Hosts in the order of their lowest rank; the root's host first.
  std::unordered_map<int, int> position;  // host id -> index into `leaders`
  std::vector<int> leaders;               // per host position: its leader
  position.reserve(static_cast<std::size_t>(world_size));
  position.emplace(host(root), 0);
  leaders.push_back(root);
  for (int r = 0; r < world_size; ++r) {
    if (position.emplace(host(r), static_cast<int>(leaders.size())).second) leaders.push_back(r);
  }
  const int mine = position.at(host(rank));
  const int leader = leaders[static_cast<std::size_t>(mine)];
  TreeLinks out;
  if (rank != leader) {
    out.parent = leader;
    return out;
  }
  if (mine > 0) out.parent = leaders[static_cast<std::size_t>((mine - 1) / fan_out)];
  const int h = host(rank);
  for (int r = 0; r < world_size; ++r)
    if (r != rank && host(r) == h) out.children.push_back(r);
  const long long first = static_cast<long long>(mine) * fan_out + 1;
  for (long long p = first; p < first + fan_out && p < static_cast<long long>(leaders.size()); ++p)
    out.children.push_back(leaders[static_cast<std::size_t>(p)]);
  std::sort(out.children.begin(), out.children.end());
  return out;
}

}  // namespace laggard
