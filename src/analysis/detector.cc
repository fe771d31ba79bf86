// laggard — the detector's options (validation, presets), the report's metric names
// (Report::metrics) and persistence over windows (Detector: episodes, confirmation, publishing).
// The threshold method and the per-window flags: detector_threshold.cc; the sequential method:
// detector_sequential.cc; findings' wording: detector_wording.cc (docs/detection.md).
#include "laggard/detector.hpp"

#include "analysis/detector_internal.hpp"
#include "analysis/detector_wording.hpp"
#include "analysis/median.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace laggard {

using namespace detector_detail;

// ---------------------------------------------------------------------------------------------
// Options

const char* to_string(Reference ref) noexcept {
  switch (ref) {
    case Reference::mean:
      return "mean";
    case Reference::median:
      return "median";
    case Reference::robust:
      return "robust";
  }
  return "mean";
}

Reference parse_reference(std::string_view text) {
  if (text == "mean") return Reference::mean;
  if (text == "median") return Reference::median;
  if (text == "robust") return Reference::robust;
  throw std::invalid_argument("unknown straggler reference '" + std::string(text) +
                              "': expected mean, median or robust");
}

namespace {

[[noreturn]] void bad_option(const char* setting, const std::string& value, const char* rule) {
  throw std::invalid_argument(std::string("DetectorOptions.") + setting + " must be " + rule +
                              ", got " + value);
}

}  // namespace

const char* to_string(Method method) noexcept {
  return method == Method::threshold ? "threshold" : "sequential";
}

Method parse_method(std::string_view text) {
  if (text == "sequential") return Method::sequential;
  if (text == "threshold") return Method::threshold;
  throw std::invalid_argument("unknown detector method '" + std::string(text) +
                              "': expected sequential or threshold");
}

void DetectorOptions::validate() const {
  // Written as !(ok) so that NaN fails every check.
  if (!(std::isfinite(relative_threshold) && relative_threshold >= 1.0))
    bad_option("relative_threshold", number(relative_threshold), "finite and >= 1.0");
  if (!(absolute_ms_threshold >= 0.0))
    bad_option("absolute_ms_threshold", number(absolute_ms_threshold), ">= 0");
  if (!(std::isfinite(mad_z) && mad_z > 0.0)) bad_option("mad_z", number(mad_z), "finite and > 0");
  if (confirm_k < 1) bad_option("confirm_k", std::to_string(confirm_k), ">= 1");
  if (confirm_n > 32) bad_option("confirm_n", std::to_string(confirm_n), "<= 32");
  if (confirm_k > confirm_n)
    bad_option("confirm_k", std::to_string(confirm_k),
               ("<= confirm_n (" + std::to_string(confirm_n) + ")").c_str());
  if (!(std::isfinite(healthy_spread) && healthy_spread >= 1.0))
    bad_option("healthy_spread", number(healthy_spread), "finite and >= 1.0");
  if (!(min_cost_share >= 0.0 && min_cost_share < 1.0))
    bad_option("min_cost_share", number(min_cost_share), "in [0, 1)");
  if (method == Method::sequential) {
    if (!(relative_threshold > 1.0))
      bad_option("relative_threshold", number(relative_threshold),
                 "> 1.0 with the sequential method");
    if (!(std::isfinite(healthy_spread) && healthy_spread >= 1.0 &&
          healthy_spread < relative_threshold))
      bad_option("healthy_spread", number(healthy_spread),
                 (">= 1.0 and < relative_threshold (" + number(relative_threshold) + ")").c_str());
    if (!(pause_rate > 0.0 && pause_rate < 1.0))
      bad_option("pause_rate", number(pause_rate), "in (0, 1)");
    if (!(false_alarm_budget > 0.0 && false_alarm_budget < 1.0))
      bad_option("false_alarm_budget", number(false_alarm_budget), "in (0, 1)");
    if (!(std::isfinite(budget_windows) && budget_windows >= 1.0))
      bad_option("budget_windows", number(budget_windows), "finite and >= 1");
  }
}

DetectorOptions DetectorOptions::rfc() {
  DetectorOptions o;
  o.method = Method::threshold;
  o.ref = Reference::mean;
  o.relative_threshold = 1.2;
  o.absolute_ms_threshold = 5.0;
  o.confirm_k = 2;
  o.confirm_n = 3;
  return o;
}

DetectorOptions DetectorOptions::recommended(int) { return DetectorOptions{}; }

DetectorOptions DetectorOptions::preset(std::string_view name, int world_size) {
  if (name == "rfc") return rfc();
  if (name == "default" || name == "recommended") return recommended(world_size);
  throw std::invalid_argument("unknown detector preset '" + std::string(name) +
                              "': expected default, recommended or rfc");
}

double evidence_threshold(const DetectorOptions& options, double pairs) {
  const double watched = std::max(1.0, pairs) * options.budget_windows;
  return std::log(watched / options.false_alarm_budget);
}

// ---------------------------------------------------------------------------------------------
// Metric names

Metrics Report::metrics(int local_rank) const {
  Metrics out;
  // Per stage name, the cohort whose worst rank is furthest above its reference.
  std::vector<std::pair<std::string_view, const StageFigures*>> chosen;
  for (const StageFigures& f : stages) {
    auto it = std::find_if(chosen.begin(), chosen.end(),
                           [&](const auto& c) { return c.first == f.stage; });
    if (it == chosen.end())
      chosen.emplace_back(f.stage, &f);
    else if (f.max_ms - f.ref_ms > it->second->max_ms - it->second->ref_ms)
      it->second = &f;
  }
  for (const auto& [name, f] : chosen) {
    const std::string prefix = "straggler/" + std::string(name) + "/";
    // The local rank's own time, from whichever cohort it belongs to.
    const StageFigures* own = nullptr;
    std::size_t at = 0;
    auto holds = [&](const StageFigures& g) {
      auto it = std::find(g.rank_ids.begin(), g.rank_ids.end(), local_rank);
      if (it == g.rank_ids.end() || g.rank_ms.size() != g.rank_ids.size()) return false;
      own = &g;
      at = static_cast<std::size_t>(it - g.rank_ids.begin());
      return true;
    };
    if (!holds(*f))
      for (const StageFigures& g : stages)
        if (&g != f && g.stage == name && holds(g)) break;
    if (own) out[prefix + "local_ms"] = own->rank_ms[at];
    out[prefix + "mean_ms"] = f->mean_ms;
    out[prefix + "max_ms"] = f->max_ms;
    out[prefix + "slowdown_ratio"] = f->slowdown_ratio;
    out[prefix + "relative_score"] = f->relative_score;
    out[prefix + "top_rank"] = static_cast<double>(f->top_rank);
    out[prefix + "num_stragglers"] = static_cast<double>(f->num_stragglers);
  }
  std::string joined;
  for (const std::string& h : hints) {
    if (!joined.empty()) joined += "; ";
    joined += h;
  }
  auto distinct = [](const std::vector<RankFinding>& findings) {
    std::vector<int> ranks;
    ranks.reserve(findings.size());
    for (const RankFinding& f : findings) ranks.push_back(f.rank);
    std::sort(ranks.begin(), ranks.end());
    return static_cast<double>(std::unique(ranks.begin(), ranks.end()) - ranks.begin());
  };
  out["straggler/likely_bottleneck"] = likely_bottleneck;
  out["straggler/hints"] = std::move(joined);
  out["straggler/whatif_step_saving_ms"] = whatif_step_saving_ms;
  out["straggler/num_stragglers_total"] = distinct(stragglers);
  out["straggler/num_waiting"] = distinct(waiting);
  out["straggler/ranks"] = static_cast<double>(ranks_seen);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Persistence

Detector::Detector(DetectorOptions options) : options_(options) { options_.validate(); }

Report Detector::observe(const Window& window) {
  Report report;
  observe(window, report);
  return report;
}

void Detector::catch_up(const Track& track, History& h) {
  const std::int64_t pending = track.windows - h.synced;
  if (!h.in_set || pending <= 0) return;  // out of the set: no window is pending
  h.bits = pending >= 32 ? 0u : h.bits << pending;
  h.seen += static_cast<int>(pending);
  h.synced = track.windows;
}

void Detector::observe(const Window& window, Report& report) {
  columns_.assign(window);
  observe_columns(columns_, report, true);
}

void Detector::observe(const ColumnarWindow& window, Report& report) {
  observe_columns(window, report, false);
}

void Detector::observe_columns(const ColumnarWindow& window, Report& report, bool take_times) {
  evaluate_columns(window, options_, report, take_times);
  ++windows_;
  if (options_.method == Method::sequential)
    observe_sequential(window, report);
  else
    observe_threshold(window, report);
}

bool Detector::extend_episode(int& index, const std::string& key, const RankFinding& f) {
  if (index < 0) {
    if (free_episodes_.empty()) {
      index = static_cast<int>(episodes_.size());
      episodes_.emplace_back();
    } else {
      index = free_episodes_.back();
      free_episodes_.pop_back();
    }
    Episode& e = episodes_[static_cast<std::size_t>(index)];
    e.slowdowns.clear();
    e.ratios.clear();
    e.costs_ms.clear();
    e.shares.clear();
    e.key = key;
    e.rank = f.rank;
  }
  Episode& e = episodes_[static_cast<std::size_t>(index)];
  e.window = windows_;
  e.slowdowns.push_back(f.slowdown);
  // Against a reference of 0 the ratio says nothing (RankFinding::slowdown is 1 there): any
  // time above it is a slowdown, and the cost decides.
  e.ratios.push_back(f.ref_ms > 0.0   ? f.slowdown
                     : f.ms > 0.0     ? std::numeric_limits<double>::infinity()
                                      : 1.0);
  e.costs_ms.push_back(f.cost_ms);
  e.shares.push_back(f.cost_share);
  const double typical_ratio = detail::typical_of(e.ratios.data(), e.ratios.size(), gate_scratch_);
  const double typical_share = detail::typical_of(e.shares.data(), e.shares.size(), gate_scratch_);
  return typical_ratio > options_.healthy_spread && typical_share >= options_.min_cost_share;
}

void Detector::end_lapsed_episodes() {
  const std::uint32_t mask =
      options_.confirm_n >= 32 ? ~std::uint32_t{0} : (std::uint32_t{1} << options_.confirm_n) - 1u;
  for (std::size_t i = 0; i < episodes_.size(); ++i) {
    Episode& e = episodes_[i];
    if (e.rank < 0 || e.window == windows_) continue;
    int* owner = nullptr;  // the pair's episode index, while it is still confirmed statistically
    bool lapsed = true;
    if (options_.method == Method::sequential) {
      auto it = seq_tracks_.find(e.key);
      const int slot = it == seq_tracks_.end() ? -1 : it->second.slot(e.rank);
      if (slot >= 0) {
        owner = &it->second.cold[static_cast<std::size_t>(slot)].episode;
        lapsed = it->second.named_bit[static_cast<std::size_t>(slot)] == 0;
      }
    } else {
      auto it = tracks_.find(e.key);
      if (it != tracks_.end() && static_cast<std::size_t>(e.rank) < it->second.history.size()) {
        History& h = it->second.history[static_cast<std::size_t>(e.rank)];
        catch_up(it->second, h);
        owner = &h.episode;
        lapsed = popcount(h.bits & mask) < options_.confirm_k;
      }
    }
    if (!lapsed) continue;
    if (owner && *owner == static_cast<int>(i)) *owner = -1;
    e.rank = -1;
    free_episodes_.push_back(static_cast<int>(i));
  }
}

Detector::Confirmed& Detector::publish(const RankFinding& f, int episode, std::int64_t step,
                                       std::int64_t first_flagged_step, const std::string& key) {
  Confirmed c;
  c.finding = f;
  c.first_confirmed_step = step;
  c.first_flagged_step = first_flagged_step;
  if (episode >= 0) {
    const Episode& e = episodes_[static_cast<std::size_t>(episode)];
    c.slowdowns = e.slowdowns;
    c.costs_ms = e.costs_ms;
    c.cost_shares = e.shares;
  } else {
    c.slowdowns.push_back(f.slowdown);
    c.costs_ms.push_back(f.cost_ms);
    c.cost_shares.push_back(f.cost_share);
  }
  confirmed_.push_back(std::move(c));
  confirmed_at_.push_back({key, f.rank});
  return confirmed_.back();
}
}  // namespace laggard
