#include "laggard/summary.hpp"

#include "laggard/detail/statistics.hpp"
#include "analysis/median.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

namespace laggard {

namespace {
std::string key_of(const std::string& cohort, const std::string& stage, const std::string& who) {
  std::string k;
  k.reserve(cohort.size() + stage.size() + who.size() + 2);
  k.append(cohort).push_back('\x1f');
  k.append(stage).push_back('\x1f');
  k.append(who);
  return k;
}
}  // namespace

RunAnalysis::RunAnalysis(DetectorOptions options, OnsetOptions onset)
    : detector_(options), onset_options_(onset), step_onset_(onset) {}

std::optional<std::int64_t> RunAnalysis::onset(const std::string& cohort, const std::string& stage,
                                               int rank) const {
  const auto it = rank_onsets_.find(key_of(cohort, stage, ""));
  if (it == rank_onsets_.end() || rank < 0 ||
      static_cast<std::size_t>(rank) >= it->second.slot.size())
    return std::nullopt;
  const std::int32_t slot = it->second.slot[static_cast<std::size_t>(rank)];
  if (slot < 0) return std::nullopt;
  return it->second.detectors.onset(slot);
}

const Report& RunAnalysis::add(const Window& window) {
  detector_.observe(window, last_);  // reuses the previous report's storage
  if (detector_.windows() == 1) first_step_ = window.step;
  last_step_ = window.step;
  samples_ += static_cast<std::int64_t>(window.samples.size());

  double slowest_step = 0.0;
  for (const auto& s : window.samples) {
    world_size_ = std::max(world_size_, s.world_size);
    if (s.rank >= 0) {
      if (static_cast<std::size_t>(s.rank) >= ranks_seen_.size()) ranks_seen_.resize(s.rank + 1);
      ranks_seen_[s.rank] = true;
    }
    slowest_step = std::max(slowest_step, s.step_ms);
  }
  sum_step_ms_ += slowest_step;
  sum_whatif_ms_ += last_.whatif_step_saving_ms;
  if (slowest_step > 0.0) {
    step_onset_.add(window.step, std::log(slowest_step));
    if (step_values_ < onset_options_.baseline_windows)
      step_first_[static_cast<std::size_t>(step_values_)] = {window.step, slowest_step};
    else
      step_later_log_sum_ += std::log(slowest_step);
    ++step_values_;
  }

  // Onsets: every rank's own time against its cohort's reference, log(t / ref), for the stages
  // whose flags make stragglers (a wait in communication is evidence, never a verdict).
  if (onset_options_.per_rank && onsets_at_.size() < last_.stages.size())
    onsets_at_.resize(last_.stages.size());
  for (std::size_t p = 0; p < last_.stages.size(); ++p) {
    const StageFigures& st = last_.stages[p];
    if (!onset_options_.per_rank) break;
    if (st.kind == StageKind::communication || !(st.ref_ms > 0.0)) continue;
    StageOnsetsAt& at = onsets_at_[p];
    if (!at.onsets || at.stage != st.stage || at.cohort != st.cohort) {
      key_ = key_of(st.cohort, st.stage, "");
      auto it = rank_onsets_.find(key_);
      if (it == rank_onsets_.end())
        it = rank_onsets_
                 .emplace(key_, StageOnsets{{}, detail::OnsetColumns(onset_options_, /*cap=*/0.0)})
                 .first;
      at.cohort = st.cohort;
      at.stage = st.stage;
      at.onsets = &it->second;  // (a map's elements stay where they are)
    }
    StageOnsets& so = *at.onsets;
    const double log_ref = std::log(st.ref_ms);
    for (std::size_t i = 0; i < st.rank_ids.size() && i < st.rank_ms.size(); ++i) {
      const int rank = st.rank_ids[i];
      const double t = st.rank_ms[i];
      if (rank < 0 || rank >= (1 << 22) || !(t > 0.0)) continue;
      if (static_cast<std::size_t>(rank) >= so.slot.size())
        so.slot.resize(static_cast<std::size_t>(rank) + 1, -1);
      std::int32_t& slot = so.slot[static_cast<std::size_t>(rank)];
      if (slot < 0) slot = so.detectors.add_series();
      so.detectors.stage(slot, window.step, std::log(t) - log_ref);
    }
    so.detectors.add_window();
  }
  // The run's bottleneck counts only windows with a persistent finding: a window where jitter
  // alone raised a flag says nothing about the job.
  const auto persistent = [](const std::vector<RankFinding>& v) {
    return std::any_of(v.begin(), v.end(), [](const RankFinding& f) { return f.confirmed; });
  };
  if (!last_.likely_bottleneck.empty() && (persistent(last_.stragglers) || persistent(last_.waiting)))
    ++bottleneck_windows_[last_.likely_bottleneck];

  for (const auto& w : last_.waiting) {
    if (!w.confirmed) continue;  // same persistence rule as stragglers
    auto& entry = waiting_[key_of(w.cohort, w.stage, std::to_string(w.rank))];
    entry.info.rank = w.rank;
    entry.info.host = w.host;
    entry.info.cohort = w.cohort;
    entry.info.stage = w.stage;
    ++entry.info.windows;
    entry.excess.push_back(w.ms - w.ref_ms);
  }
  for (const auto& h : last_.slow_hosts) {
    auto& entry = hosts_[key_of(h.cohort, h.stage, h.host)];
    entry.info.host = h.host;
    entry.info.cohort = h.cohort;
    entry.info.stage = h.stage;
    entry.info.ranks = h.ranks;
    ++entry.info.windows;
    entry.slowdowns.push_back(h.slowdown);
    entry.costs_ms.push_back(h.cost_ms);
    entry.shares.push_back(h.cost_share);
  }
  return last_;
}

RunSummary RunAnalysis::summary() const {
  RunSummary out;
  out.windows = detector_.windows();
  out.samples = samples_;
  out.ranks = static_cast<int>(std::count(ranks_seen_.begin(), ranks_seen_.end(), true));
  out.world_size = world_size_;
  out.first_step = first_step_;
  out.last_step = last_step_;
  out.last = last_;
  if (out.windows > 0) {
    out.mean_step_ms = sum_step_ms_ / static_cast<double>(out.windows);
    out.mean_whatif_saving_ms = sum_whatif_ms_ / static_cast<double>(out.windows);
  }

  for (const auto& c : detector_.confirmed()) {
    StragglerSummary s;
    s.rank = c.finding.rank;
    s.host = c.finding.host;
    s.cohort = c.finding.cohort;
    s.stage = c.finding.stage;
    s.kind = c.finding.kind;
    s.windows_flagged = c.finding.windows_flagged;
    s.windows_seen = c.windows_seen;
    s.first_flagged_step = c.first_flagged_step;
    s.confirmed_step = c.first_confirmed_step;
    std::vector<double> scratch;
    s.typical_slowdown = detail::typical_of(c.slowdowns.data(), c.slowdowns.size(), scratch);
    s.cost_ms = detail::typical_of(c.costs_ms.data(), c.costs_ms.size(), scratch);
    s.cost_share = detail::typical_of(c.cost_shares.data(), c.cost_shares.size(), scratch);
    s.last_ms = c.finding.ms;
    s.last_ref_ms = c.finding.ref_ms;
    s.onset_step = onset(s.cohort, s.stage, s.rank);
    // A verdict is shown only if it is material over all its windows, as it was over the run
    // of windows that confirmed it: a rank confirmed on a short run of slow windows and at the
    // reference ever since is not a straggler of this run. (Against a reference of 0 the ratio
    // says nothing: the cost decides.)
    const DetectorOptions& opt = detector_.options();
    const bool slow = s.typical_slowdown > opt.healthy_spread || !(s.last_ref_ms > 0.0);
    if (!slow || !(s.cost_share >= opt.min_cost_share)) continue;
    out.stragglers.push_back(std::move(s));
  }
  // Costliest first: what a user should look at first (ties: by rank, cohort, stage).
  std::sort(out.stragglers.begin(), out.stragglers.end(), [](const auto& a, const auto& b) {
    if (a.cost_ms != b.cost_ms) return a.cost_ms > b.cost_ms;
    return std::tie(a.rank, a.cohort, a.stage) < std::tie(b.rank, b.cohort, b.stage);
  });

  const int k = detector_.options().confirm_k;
  for (const auto& entry : waiting_) {
    const auto& w = entry.second;  // not a structured binding: a lambda captures it (C++17)
    // A confirmed straggler that also waited somewhere is reported as a straggler only.
    const bool is_straggler =
        std::any_of(out.stragglers.begin(), out.stragglers.end(),
                    [&](const auto& s) { return s.rank == w.info.rank && s.cohort == w.info.cohort; });
    if (is_straggler) continue;
    WaitingSummary ws = w.info;
    ws.typical_excess_ms = detail::median_of(w.excess);
    out.waiting.push_back(std::move(ws));
  }
  std::sort(out.waiting.begin(), out.waiting.end(), [](const auto& a, const auto& b) {
    return std::tie(a.rank, a.cohort, a.stage) < std::tie(b.rank, b.cohort, b.stage);
  });

  for (const auto& [key, h] : hosts_) {
    if (h.info.windows < k) continue;
    HostSummary hs = h.info;
    hs.typical_slowdown = detail::median_of(h.slowdowns);
    hs.cost_ms = detail::median_of(h.costs_ms);
    hs.cost_share = detail::median_of(h.shares);
    // The same materiality gate as a straggler's.
    const DetectorOptions& opt = detector_.options();
    if (!(hs.typical_slowdown > opt.healthy_spread && hs.cost_share >= opt.min_cost_share))
      continue;
    out.slow_hosts.push_back(std::move(hs));
  }
  std::stable_sort(out.slow_hosts.begin(), out.slow_hosts.end(),
                   [](const auto& a, const auto& b) { return a.cost_ms > b.cost_ms; });

  out.step_time_onset = step_onset_.onset();
  out.step_time_before_ms = step_onset_.baseline();
  out.step_time_since_ms = step_onset_.since();
  out.step_time_values = step_values_;
  out.step_time_baseline_values = onset_options_.baseline_windows;
  // No onset, yet the step time may have risen among the first values, which set the baseline
  // an onset is measured from: say so, with the step of the rise (the first split of those values
  // with every later value, on average, min_shift over the median before it).
  const int first = std::min(step_values_, onset_options_.baseline_windows);
  const double rise = 1.0 + onset_options_.min_shift;
  const int later = step_values_ - first;
  for (int i = 1; i < first && !out.step_time_onset; ++i) {
    std::vector<double> before, after;
    for (int j = 0; j < first; ++j)
      (j < i ? before : after).push_back(step_first_[static_cast<std::size_t>(j)].second);
    if (static_cast<int>(after.size()) + later < onset_options_.persist_windows) break;
    const double from = detail::median_of(before), to = detail::median_of(after);
    const double later_level = later > 0 ? std::exp(step_later_log_sum_ / later) : to;
    if (step_first_[static_cast<std::size_t>(i)].second >= rise * from && to >= rise * from &&
        later_level >= rise * from) {
      out.step_time_rise_in_baseline = step_first_[static_cast<std::size_t>(i)].first;
      out.step_time_rise_from_ms = from;
      out.step_time_rise_to_ms = later > 0 ? later_level : to;
      break;
    }
  }

  out.bottleneck_windows = bottleneck_windows_;
  int best = 0;
  for (const auto& [stage, n] : bottleneck_windows_) {
    if (n > best) {
      best = n;
      out.likely_bottleneck = stage;
    }
  }
  return out;
}

}  // namespace laggard
