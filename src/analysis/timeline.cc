// Timeline bubbles across ranks: the same collective matched on every rank, its kernels'
// durations compared (clocks of different hosts are never compared: a kernel's duration is
// measured on one device), and per-rank bubbles held against the median rank.
#include "laggard/timeline.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <unordered_map>

#include "analysis/median.hpp"

namespace laggard {

const char* to_string(TimelineFinding::Kind kind) noexcept {
  switch (kind) {
    case TimelineFinding::Kind::data_wait:
      return "data_wait";
    case TimelineFinding::Kind::launch_bound:
      return "launch_bound";
    case TimelineFinding::Kind::other_idle:
      return "other_idle";
    case TimelineFinding::Kind::late_arrival:
      return "late_arrival";
    case TimelineFinding::Kind::comm_idle:
      return "comm_idle";
  }
  return "other_idle";
}

namespace {

double median(std::vector<double> v) { return detail::median_inplace(v.data(), v.size()); }

struct Entry {
  std::size_t rank;      // into ranks
  std::size_t timeline;  // into its timeline
  double ms;
  std::uint64_t signature;
};

}  // namespace

TimelineSummary analyze_timeline(std::vector<RankTrace>& ranks, const TimelineOptions& options) {
  TimelineSummary out;
  // Step number → timeline index, per rank.
  std::vector<std::unordered_map<std::int64_t, std::size_t>> step_index(ranks.size());
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    auto& tl = ranks[r].timeline;
    for (std::size_t i = 0; i < tl.size(); ++i) {
      tl[i].comm_wait_ms = 0.0;
      step_index[r].emplace(tl[i].step, i);
    }
  }
  std::vector<std::size_t> matched(ranks.size(), 0), last(ranks.size(), 0);
  std::map<std::tuple<std::int64_t, std::uint64_t, std::uint32_t>, std::vector<Entry>> same;
  for (std::size_t r = 0; r < ranks.size(); ++r)
    for (const CollectiveKernel& c : ranks[r].collectives) {
      const auto it = step_index[r].find(c.step);
      if (it == step_index[r].end()) continue;
      same[{c.step, c.group, c.ordinal}].push_back({r, it->second, c.ms, c.signature});
    }
  for (auto& [key, entries] : same) {
    (void)key;
    if (entries.size() < 2) continue;
    // The signature most ranks agree on; a rank with another one ran another collective.
    std::map<std::uint64_t, std::size_t> votes;
    for (const Entry& e : entries) ++votes[e.signature];
    const auto best = std::max_element(votes.begin(), votes.end(), [](const auto& a, const auto& b) {
                        return a.second < b.second;
                      })->first;
    if (votes.size() > 1) ++out.collectives_mismatched;
    std::vector<const Entry*> agree;
    for (const Entry& e : entries)
      if (e.signature == best) agree.push_back(&e);
    if (agree.size() < 2) continue;
    ++out.collectives_matched;
    const Entry* shortest = *std::min_element(
        agree.begin(), agree.end(), [](const Entry* a, const Entry* b) { return a->ms < b->ms; });
    for (const Entry* e : agree) {
      ranks[e->rank].timeline[e->timeline].comm_wait_ms += e->ms - shortest->ms;
      ++matched[e->rank];
    }
    ++last[shortest->rank];
  }

  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const RankTrace& t = ranks[r];
    if (!t.has_device_activity || t.timeline.empty()) {
      ++out.ranks_without_device;
      continue;
    }
    RankTimelineSummary s;
    s.rank = t.info.rank;
    s.host = t.info.host;
    s.steps = t.timeline.size();
    for (const StepTimeline& x : t.timeline) {
      s.step_ms += x.step_ms;
      s.window_ms += x.window_ms;
      s.busy_ms += x.busy_ms;
      s.copy_ms += x.copy_ms;
      s.data_wait_ms += x.data_wait_ms;
      s.comm_idle_ms += x.comm_idle_ms;
      s.launch_wait_ms += x.launch_wait_ms;
      s.other_idle_ms += x.other_idle_ms;
      s.comm_ms += x.comm_ms;
      s.comm_wait_ms += x.comm_wait_ms;
    }
    const double n = static_cast<double>(s.steps);
    for (double* v : {&s.step_ms, &s.window_ms, &s.busy_ms, &s.copy_ms, &s.data_wait_ms,
                      &s.comm_idle_ms, &s.launch_wait_ms, &s.other_idle_ms, &s.comm_ms,
                      &s.comm_wait_ms})
      *v /= n;
    s.collectives = matched[r];
    s.arrived_last = last[r];
    out.ranks.push_back(s);
  }
  std::sort(out.ranks.begin(), out.ranks.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  if (out.ranks.empty()) return out;

  // Late arrivals: a rank whose kernels were the shortest at most of its collectives.
  for (const RankTimelineSummary& s : out.ranks) {
    if (s.collectives == 0 || out.ranks.size() < 2) continue;
    const double share = static_cast<double>(s.arrived_last) / static_cast<double>(s.collectives);
    if (share < options.min_last_share) continue;
    TimelineFinding f;
    f.kind = TimelineFinding::Kind::late_arrival;
    f.ranks = {s.rank};
    f.last = s.arrived_last;
    f.of = s.collectives;
    f.ms_per_step = s.comm_wait_ms;
    double others = 0.0;
    std::size_t count = 0;
    for (const RankTimelineSummary& o : out.ranks)
      if (o.rank != s.rank) {
        others += o.comm_wait_ms;
        ++count;
      }
    f.others_wait_ms = count ? others / static_cast<double>(count) : 0.0;
    f.share = s.window_ms > 0 ? f.others_wait_ms / s.window_ms : 0.0;
    out.findings.push_back(f);
  }

  // Bubbles: a rank's figure against the median rank's; when most ranks have it, the job's.
  struct Figure {
    TimelineFinding::Kind kind;
    double RankTimelineSummary::*field;
  };
  const Figure figures[] = {{TimelineFinding::Kind::data_wait, &RankTimelineSummary::data_wait_ms},
                            {TimelineFinding::Kind::comm_idle, &RankTimelineSummary::comm_idle_ms},
                            {TimelineFinding::Kind::launch_bound,
                             &RankTimelineSummary::launch_wait_ms},
                            {TimelineFinding::Kind::other_idle,
                             &RankTimelineSummary::other_idle_ms}};
  std::vector<TimelineFinding> bubbles;
  for (const Figure& fig : figures) {
    std::vector<double> values;
    for (const auto& s : out.ranks) values.push_back(s.*fig.field);
    const double med = median(values);
    std::vector<const RankTimelineSummary*> big, above;
    for (const auto& s : out.ranks) {
      const double v = s.*fig.field;
      if (v < options.min_ms || v < options.min_share * s.window_ms) continue;
      big.push_back(&s);
      if (v >= options.over_median * med + options.min_ms) above.push_back(&s);
    }
    const bool job = big.size() * 2 > out.ranks.size() && above.empty();
    const auto& named = job ? big : above;
    if (named.empty()) continue;
    TimelineFinding f;
    f.kind = fig.kind;
    f.every_rank = job;
    f.median_ms = med;
    double window = 0.0;
    for (const auto* s : named) {
      f.ranks.push_back(s->rank);
      f.ms_per_step += s->*fig.field;
      window += s->window_ms;
    }
    f.ms_per_step /= static_cast<double>(named.size());
    f.share = window > 0 ? f.ms_per_step * static_cast<double>(named.size()) / window : 0.0;
    bubbles.push_back(f);
  }
  std::stable_sort(bubbles.begin(), bubbles.end(),
                   [](const auto& a, const auto& b) { return a.ms_per_step > b.ms_per_step; });
  out.findings.insert(out.findings.end(), bubbles.begin(), bubbles.end());
  return out;
}

}  // namespace laggard
