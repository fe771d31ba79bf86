#include "laggard/model.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace laggard {

const char* to_string(StageKind kind) noexcept {
  switch (kind) {
    case StageKind::compute:
      return "compute";
    case StageKind::communication:
      return "communication";
    case StageKind::data:
      return "data";
    case StageKind::other:
      return "other";
  }
  return "other";
}

std::optional<StageKind> parse_stage_kind(std::string_view text) noexcept {
  if (text == "compute") return StageKind::compute;
  if (text == "communication") return StageKind::communication;
  if (text == "data") return StageKind::data;
  if (text == "other") return StageKind::other;
  return std::nullopt;
}

namespace {
bool contains_ci(std::string_view haystack, std::string_view needle) {
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                        [](char a, char b) {
                          return std::tolower(static_cast<unsigned char>(a)) == b;
                        });
  return it != haystack.end();
}

// True when `name`, split at every character that is not a letter or digit, has `word` as one
// of its parts (case-insensitive): "sparse_data_dist" has "dist", "distill" does not.
bool has_word_ci(std::string_view name, std::string_view word) {
  std::size_t i = 0;
  while (i < name.size()) {
    while (i < name.size() && !std::isalnum(static_cast<unsigned char>(name[i]))) ++i;
    std::size_t j = i;
    while (j < name.size() && std::isalnum(static_cast<unsigned char>(name[j]))) ++j;
    if (j - i == word.size() && contains_ci(name.substr(i, j - i), word)) return true;
    i = j;
  }
  return false;
}
}  // namespace

StageKind default_stage_kind(std::string_view name) noexcept {
  // Names trainers commonly give to collectives and to input loading. Communication words win
  // over "data": TorchRec's "sparse_data_dist" is the input all-to-all, time spent waiting for
  // other ranks, and calling it data would blame input loading for a collective.
  static constexpr std::array<std::string_view, 17> kCommunication = {
      "communication", "comm",       "allreduce", "all_reduce", "allgather", "all_gather",
      "reduce_scatter", "reducescatter", "alltoall", "all_to_all", "all2all", "broadcast",
      "nccl",          "gloo",       "p2p",       "collective", "barrier"};
  // Whole words only: as a substring they would catch "distill", "a2aux" and the like.
  static constexpr std::array<std::string_view, 3> kCommunicationWords = {"dist", "a2a", "mpi"};
  // Input loading: a data loader, or "data" as a whole word ("load_data", not "metadata").
  static constexpr std::array<std::string_view, 2> kData = {"dataloader", "data_loader"};
  for (auto word : kCommunication)
    if (contains_ci(name, word)) return StageKind::communication;
  for (auto word : kCommunicationWords)
    if (has_word_ci(name, word)) return StageKind::communication;
  for (auto word : kData)
    if (contains_ci(name, word)) return StageKind::data;
  if (has_word_ci(name, "data")) return StageKind::data;
  return StageKind::compute;
}

const StageTime* StepSample::find(std::string_view name) const noexcept {
  for (const auto& s : stages)
    if (s.name == name) return &s;
  return nullptr;
}

namespace {
const NamedValue* find_named(const std::vector<NamedValue>& list, std::string_view name) {
  for (const auto& v : list)
    if (v.name == name) return &v;
  return nullptr;
}
}  // namespace

const NamedValue* StepSample::find_value(std::string_view name) const noexcept {
  return find_named(values, name);
}

const NamedValue* StepSample::find_resource(std::string_view name) const noexcept {
  return find_named(resources, name);
}

}  // namespace laggard
