// Run comparison: per-stage per-step summaries of two runs, compared with a bootstrap interval of
// the ratio of medians and a Mann-Whitney U test, Holm-corrected across stages (and, apart,
// across rank-stage pairs). docs/howto/compare.md explains the choices.
#include "laggard/compare.hpp"

#include "analysis/median.hpp"
#include "laggard/detail/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <list>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace laggard {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a);
  return buf;
}

std::string ratio_text(double r) {
  return std::isfinite(r) ? format("%.3f", r) : std::string("n/a");  // never "nan" or "inf"
}

std::string p_text(double p) {
  if (!(p >= 0.0)) return "n/a";
  if (p < 1e-4) return "< 0.0001";
  return format("%.4f", p);
}

std::string percent_text(double fraction) { return format("%.1f%%", 100.0 * fraction); }

std::uint64_t fnv1a(const std::string& text, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// splitmix64: small, fast, and the same on every platform (std::uniform_int_distribution is not).
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) for n < 2^32 (multiply-shift; the bias is below 2^-32 · n).
  std::size_t below(std::size_t n) {
    return static_cast<std::size_t>(((next() >> 32) * static_cast<std::uint64_t>(n)) >> 32);
  }
};

using detail::bootstrap_ratio_of_medians;
using detail::holm_adjust;
using detail::Interval;
using detail::mann_whitney_p;
using detail::median_inplace;
using detail::median_of;

// Null distribution of U for samples of sizes m, n without ties: P(U = u), u in [0, m·n], built
// by the recursion p(i,j,u) = i/(i+j) p(i-1,j,u-j) + j/(i+j) p(i,j-1,u) (only additions of
// probabilities: no cancellation). O(m·n·m·n), so it is cached per (m, n): in a comparison every
// rank-stage pair has the same sizes.
const std::vector<double>& u_distribution(int m, int n) {
  thread_local std::map<std::pair<int, int>, std::vector<double>> cache;
  const auto key = std::make_pair(m, n);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= 64) cache.clear();  // bounded: a handful of sizes per comparison
  // prev[j] / cur[j]: distribution of U for sizes (i-1, j) / (i, j), U counting pairs in which the
  // first sample's value is the larger.
  std::vector<std::vector<double>> prev(static_cast<std::size_t>(n) + 1), cur(prev.size());
  for (auto& d : prev) d.assign(1, 1.0);  // i = 0: U = 0 surely
  for (int i = 1; i <= m; ++i) {
    cur[0].assign(1, 1.0);  // j = 0: U = 0 surely
    for (int j = 1; j <= n; ++j) {
      std::vector<double>& d = cur[static_cast<std::size_t>(j)];
      d.assign(static_cast<std::size_t>(i) * static_cast<std::size_t>(j) + 1, 0.0);
      const double wi = static_cast<double>(i) / (i + j), wj = static_cast<double>(j) / (i + j);
      // The largest value belongs to the first sample (probability i/(i+j)): it beats all j.
      const std::vector<double>& a = prev[static_cast<std::size_t>(j)];
      for (std::size_t k = 0; k < a.size(); ++k) d[k + static_cast<std::size_t>(j)] += wi * a[k];
      const std::vector<double>& b = cur[static_cast<std::size_t>(j) - 1];
      for (std::size_t k = 0; k < b.size(); ++k) d[k] += wj * b[k];
    }
    std::swap(prev, cur);
  }
  return cache.emplace(key, std::move(prev[static_cast<std::size_t>(n)])).first->second;
}

// Exact two-sided p of U = u for sizes m, n without ties.
double exact_u_p(int m, int n, double u) {
  const std::vector<double>& dist = u_distribution(m, n);
  const auto k = static_cast<std::size_t>(std::llround(u));
  double lower = 0.0, upper = 0.0;
  for (std::size_t x = 0; x < dist.size(); ++x) {
    if (x <= k) lower += dist[x];
    if (x >= k) upper += dist[x];
  }
  return std::min(1.0, 2.0 * std::min(lower, upper));
}

}  // namespace

const char* to_string(Verdict verdict) noexcept {
  switch (verdict) {
    case Verdict::same:
      return "SAME";
    case Verdict::regressed:
      return "REGRESSED";
    case Verdict::improved:
      return "IMPROVED";
    case Verdict::unknown:
      return "UNKNOWN";
  }
  return "UNKNOWN";
}

void CompareOptions::validate() const {
  if (!(relative_threshold >= 0.0) || !std::isfinite(relative_threshold))
    throw std::invalid_argument("relative_threshold must be a finite number >= 0, got " +
                                std::to_string(relative_threshold));
  if (!(alpha > 0.0 && alpha < 1.0))
    throw std::invalid_argument("alpha must be in (0, 1), got " + std::to_string(alpha));
  if (warmup < -1)
    throw std::invalid_argument("warmup must be >= 0 (or -1 for auto), got " +
                                std::to_string(warmup));
  if (min_steps < 2)
    throw std::invalid_argument("min_steps must be >= 2, got " + std::to_string(min_steps));
  if (resamples < 100)
    throw std::invalid_argument("resamples must be >= 100, got " + std::to_string(resamples));
}

int CompareOptions::warmup_for(std::int64_t windows) const noexcept {
  if (warmup >= 0) return warmup;
  // Warm-up (compilation, allocator and cache warm-up, the first all-reduces) is over within a
  // few steps; 10% also covers runs sampled so often that a few steps are a short time.
  return static_cast<int>(std::max<std::int64_t>(2, windows / 10));
}

// ---------------------------------------------------------------------------------------------
// The statistics

double detail::median_of(std::vector<double> values) {
  return median_inplace(values.data(), values.size());
}

double detail::mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b) {
  const std::size_t m = a.size(), n = b.size();
  if (m == 0 || n == 0) return 1.0;
  // Pool, sort, and give tied values their mid-rank.
  std::vector<std::pair<double, int>> pooled;
  pooled.reserve(m + n);
  for (double v : a) pooled.emplace_back(v, 0);
  for (double v : b) pooled.emplace_back(v, 1);
  std::sort(pooled.begin(), pooled.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  const std::size_t total = m + n;
  double rank_sum_a = 0.0, tie_term = 0.0;
  bool ties = false;
  for (std::size_t i = 0; i < total;) {
    std::size_t j = i + 1;
    while (j < total && pooled[j].first == pooled[i].first) ++j;
    const double mid_rank = 0.5 * static_cast<double>(i + 1 + j);  // ranks i+1 .. j
    const double t = static_cast<double>(j - i);
    if (j - i > 1) {
      ties = true;
      tie_term += t * t * t - t;
    }
    for (std::size_t k = i; k < j; ++k)
      if (pooled[k].second == 0) rank_sum_a += mid_rank;
    i = j;
  }
  const double md = static_cast<double>(m), nd = static_cast<double>(n);
  const double u = rank_sum_a - md * (md + 1.0) / 2.0;  // pairs where a's value is larger
  if (!ties && m * n <= 2500) return exact_u_p(static_cast<int>(m), static_cast<int>(n), u);
  const double nn = md + nd;
  const double var = md * nd / 12.0 * ((nn + 1.0) - tie_term / (nn * (nn - 1.0)));
  if (!(var > 0.0)) return 1.0;                                          // every value tied
  const double dev = std::max(0.0, std::fabs(u - md * nd / 2.0) - 0.5);  // continuity
  return std::min(1.0, std::erfc(dev / std::sqrt(var) / std::sqrt(2.0)));
}

namespace {

// A sample prepared for resampling: its values sorted, and for each original index the position
// of its value in that order. A resample drawn by original index is then a count per sorted
// position, and its median a walk over the counts: no copy and no selection per resample (which
// was most of a comparison's time with tens of thousands of stages). The same draws give the
// same multiset of values, so the same median as selecting from the copied values.
struct Resampler {
  std::vector<double> sorted;
  std::vector<std::uint32_t> position;  // original index -> sorted position
  std::vector<std::uint32_t> counts;

  explicit Resampler(const std::vector<double>& values)
      : sorted(values.size()), position(values.size()), counts(values.size()) {
    std::vector<std::uint32_t> order(values.size());
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return values[a] < values[b]; });
    for (std::size_t i = 0; i < order.size(); ++i) {
      sorted[i] = values[order[i]];
      position[order[i]] = static_cast<std::uint32_t>(i);
    }
  }

  // The median of one resample of the same size (as median_inplace computes it: the mean of the
  // two middle values for an even size).
  double resample_median(SplitMix64& rng) {
    const std::size_t n = sorted.size();
    std::fill(counts.begin(), counts.end(), 0u);
    for (std::size_t i = 0; i < n; ++i) ++counts[position[rng.below(n)]];
    const std::size_t k = n / 2;  // the order statistic at k (and, for even n, at k - 1)
    const bool even = n % 2 == 0;
    std::size_t seen = 0;
    double lower = 0.0;
    bool have_lower = !even;
    for (std::size_t j = 0;; ++j) {
      seen += counts[j];
      if (!have_lower && seen > k - 1) {
        lower = sorted[j];
        have_lower = true;
      }
      if (seen > k) return even ? 0.5 * (lower + sorted[j]) : sorted[j];
    }
  }
};

// Percentile q of v with linear interpolation between order statistics, by selection (v is
// reordered).
double percentile_select(std::vector<double>& v, double q) {
  if (v.empty()) return kNaN;
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  const auto at_lo = v.begin() + static_cast<std::ptrdiff_t>(lo);
  std::nth_element(v.begin(), at_lo, v.end());
  const double a = *at_lo;
  const double b = hi == lo ? a : *std::min_element(at_lo + 1, v.end());
  const double frac = pos - static_cast<double>(lo);
  if (frac == 0.0 || a == b) return a;
  return a + frac * (b - a);
}

}  // namespace

detail::Interval detail::bootstrap_ratio_of_medians(const std::vector<double>& baseline,
                                    const std::vector<double>& current, int resamples, double level,
                                    std::uint64_t seed) {
  if (baseline.empty() || current.empty() || resamples <= 0) return {kNaN, kNaN};
  SplitMix64 rng{seed};
  Resampler b(baseline), c(current);
  std::vector<double> ratios;
  ratios.reserve(static_cast<std::size_t>(resamples));
  for (int r = 0; r < resamples; ++r) {
    const double mb = b.resample_median(rng);  // the baseline's draws first, as ever
    const double mc = c.resample_median(rng);
    double ratio;
    if (mb > 0.0)
      ratio = mc / mb;
    else
      ratio = mc > 0.0 ? std::numeric_limits<double>::infinity() : 1.0;
    ratios.push_back(ratio);
  }
  const double tail = (1.0 - level) / 2.0;
  const double low = percentile_select(ratios, tail);
  return {low, percentile_select(ratios, 1.0 - tail)};
}

std::vector<double> detail::holm_adjust(const std::vector<double>& p) {
  const std::size_t m = p.size();
  std::vector<std::size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return p[x] < p[y]; });
  std::vector<double> out(m);
  double running = 0.0;
  for (std::size_t i = 0; i < m; ++i) {
    const double adj = std::min(1.0, static_cast<double>(m - i) * p[order[i]]);
    running = std::max(running, adj);  // step-down: never smaller than an earlier one
    out[order[i]] = running;
  }
  return out;
}

std::string stage_label(const std::string& stage, const std::string& cohort, bool name_cohort) {
  if (!name_cohort) return stage;
  return stage + " [" + (cohort.empty() ? std::string("default") : cohort) + "]";
}

// ---------------------------------------------------------------------------------------------
// RunProfile

struct RunProfile::Impl {
  Limits limits;
  std::int64_t windows = 0;
  std::int64_t samples = 0;
  std::int64_t first_step = 0;
  std::int64_t last_step = 0;
  int world_size = 0;
  std::vector<bool> ranks_seen;

  // Pipeline order of stage names: a list, so that a stage met later is put after the stage it
  // follows in O(1), and an index of its nodes (keys view the nodes' strings, which never move).
  // Linear searches of a vector here made a run with 40,000 stage names take 30 s to compare.
  std::list<std::string> stage_order;
  std::unordered_map<std::string_view, std::list<std::string>::iterator> stage_node;
  std::vector<std::string> cohort_order;
  std::unordered_map<std::string, std::size_t> cohort_index;  // into cohort_order
  std::vector<Series> series;
  std::unordered_map<std::string, std::size_t> series_index;  // cohort \x1f stage
  // (series, rank) → rank_series index. A map, not a vector per series indexed by rank: one
  // sample of rank 4,000,000 with 1,000 stages would have made that 16 GB.
  std::unordered_map<std::uint64_t, std::int32_t> rank_index;
  std::vector<RankSeries> rank_series;
  Series step_time;

  // Systematic sampling of steps: a sampled step (window index w) is kept while w % stride == 0.
  std::uint32_t stride = 1;
  std::uint32_t rank_stride = 1;
  std::vector<std::pair<std::uint32_t, std::int64_t>> kept_steps;  // (window, step)
  std::size_t rank_kept = 0;  // windows kept for rank series under rank_stride

  // Per window: the values of each series, and which series were touched.
  std::vector<std::vector<double>> scratch;
  std::vector<std::size_t> touched;
  std::vector<double> step_ms;
  std::string key;

  std::size_t find_series(const std::string& cohort, const std::string& stage, StageKind kind,
                          const std::string* previous_stage) {
    key.assign(cohort).push_back('\x1f');
    key.append(stage);
    const auto it = series_index.find(key);
    if (it != series_index.end()) return it->second;
    // New (cohort, stage): place the stage in pipeline order after the stage it follows.
    if (stage_node.find(stage) == stage_node.end()) {
      auto pos = stage_order.begin();
      if (previous_stage) {
        const auto p = stage_node.find(*previous_stage);
        if (p != stage_node.end()) pos = std::next(p->second);
      }
      const auto node = stage_order.insert(pos, stage);
      stage_node.emplace(std::string_view(*node), node);
    }
    if (cohort_index.emplace(cohort, cohort_order.size()).second) cohort_order.push_back(cohort);
    const std::size_t index = series.size();
    Series s;
    s.cohort = cohort;
    s.stage = stage;
    s.kind = kind;
    series.push_back(std::move(s));
    scratch.emplace_back();
    series_index.emplace(key, index);
    return index;
  }

  void add_rank_value(std::size_t s, int rank, std::uint32_t w, double ms) {
    if (rank < 0 || rank >= (1 << 22)) return;
    const std::uint64_t pair =
        (static_cast<std::uint64_t>(s) << 22) | static_cast<std::uint64_t>(rank);
    const auto [it, added] =
        rank_index.emplace(pair, static_cast<std::int32_t>(rank_series.size()));
    if (added) {
      RankSeries r;
      r.rank = rank;
      r.series = s;
      rank_series.push_back(std::move(r));
    }
    RankSeries& r = rank_series[static_cast<std::size_t>(it->second)];
    r.window.push_back(w);
    r.ms.push_back(static_cast<float>(ms));
  }

  static void append(Series& s, std::uint32_t w, std::vector<double>& values) {
    double mx = values[0];
    for (double v : values) mx = std::max(mx, v);
    s.window.push_back(w);
    s.max.push_back(mx);
    s.median.push_back(median_inplace(values.data(), values.size()));
  }

  static void thin(Series& s, std::uint32_t stride) {
    std::size_t out = 0;
    for (std::size_t i = 0; i < s.window.size(); ++i) {
      if (s.window[i] % stride != 0) continue;
      s.window[out] = s.window[i];
      s.median[out] = s.median[i];
      s.max[out] = s.max[i];
      ++out;
    }
    s.window.resize(out);
    s.median.resize(out);
    s.max.resize(out);
  }

  void add(const Window& w) {
    const auto index = static_cast<std::uint32_t>(windows);
    if (windows == 0) first_step = w.step;
    last_step = w.step;
    ++windows;
    const bool keep = index % stride == 0;
    const bool keep_rank = index % rank_stride == 0;
    touched.clear();
    step_ms.clear();
    for (const StepSample& sample : w.samples) {
      ++samples;
      world_size = std::max(world_size, sample.world_size);
      if (sample.rank >= 0 && sample.rank < (1 << 22)) {
        if (static_cast<std::size_t>(sample.rank) >= ranks_seen.size())
          ranks_seen.resize(static_cast<std::size_t>(sample.rank) + 1);
        ranks_seen[static_cast<std::size_t>(sample.rank)] = true;
      }
      step_ms.push_back(sample.step_ms);
      const std::string* previous = nullptr;
      for (const StageTime& st : sample.stages) {
        const std::size_t s = find_series(sample.cohort, st.name, st.kind, previous);
        previous = &st.name;
        auto& values = scratch[s];
        if (values.empty()) touched.push_back(s);
        values.push_back(st.ms);
        if (keep_rank) add_rank_value(s, sample.rank, index, st.ms);
      }
    }
    if (keep) {
      for (std::size_t s : touched) append(series[s], index, scratch[s]);
      if (!step_ms.empty()) append(step_time, index, step_ms);
      kept_steps.emplace_back(index, w.step);
    }
    for (std::size_t s : touched) scratch[s].clear();

    if (keep && kept_steps.size() > limits.steps) {
      stride *= 2;
      for (Series& s : series) thin(s, stride);
      thin(step_time, stride);
      std::size_t out = 0;
      for (const auto& k : kept_steps)
        if (k.first % stride == 0) kept_steps[out++] = k;
      kept_steps.resize(out);
    }
    if (keep_rank && ++rank_kept > limits.rank_steps) {
      rank_stride *= 2;
      rank_kept = index / rank_stride + 1;  // windows 0, stride, 2*stride, ... up to index
      for (RankSeries& r : rank_series) {
        std::size_t out = 0;
        for (std::size_t i = 0; i < r.window.size(); ++i) {
          if (r.window[i] % rank_stride != 0) continue;
          r.window[out] = r.window[i];
          r.ms[out] = r.ms[i];
          ++out;
        }
        r.window.resize(out);
        r.ms.resize(out);
      }
    }
  }
};

RunProfile::RunProfile() : RunProfile(Limits{}) {}
RunProfile::RunProfile(Limits limits) : impl_(std::make_unique<Impl>()) {
  if (limits.steps < 16 || limits.rank_steps < 16)
    throw std::invalid_argument("RunProfile limits must keep at least 16 steps");
  impl_->limits = limits;
  impl_->step_time.stage = "step time";
}
RunProfile::~RunProfile() = default;
RunProfile::RunProfile(RunProfile&&) noexcept = default;
RunProfile& RunProfile::operator=(RunProfile&&) noexcept = default;

void RunProfile::add(const Window& window) { impl_->add(window); }
std::int64_t RunProfile::windows() const noexcept { return impl_->windows; }
std::int64_t RunProfile::samples() const noexcept { return impl_->samples; }
int RunProfile::ranks() const noexcept {
  return static_cast<int>(std::count(impl_->ranks_seen.begin(), impl_->ranks_seen.end(), true));
}
int RunProfile::world_size() const noexcept { return impl_->world_size; }
std::int64_t RunProfile::first_step() const noexcept { return impl_->first_step; }
std::int64_t RunProfile::last_step() const noexcept { return impl_->last_step; }
const std::vector<RunProfile::Series>& RunProfile::series() const noexcept { return impl_->series; }
const std::vector<RunProfile::RankSeries>& RunProfile::rank_series() const noexcept {
  return impl_->rank_series;
}
const RunProfile::Series& RunProfile::step_time() const noexcept { return impl_->step_time; }

std::int64_t RunProfile::step_of(std::uint32_t window) const noexcept {
  const auto& k = impl_->kept_steps;
  const auto it = std::lower_bound(k.begin(), k.end(), std::make_pair(window, std::int64_t{0}),
                                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return it != k.end() && it->first == window ? it->second : -1;
}

std::vector<const RunProfile::Series*> RunProfile::ordered_series() const {
  const Impl& s = *impl_;
  // Each series' (stage position, cohort position), computed once: O(n log n) in all.
  std::unordered_map<std::string_view, std::size_t> stage_pos;
  stage_pos.reserve(s.stage_order.size());
  std::size_t i = 0;
  for (const std::string& name : s.stage_order) stage_pos.emplace(name, i++);
  std::vector<std::pair<std::pair<std::size_t, std::size_t>, const Series*>> keyed;
  keyed.reserve(s.series.size());
  for (const Series& x : s.series)
    keyed.push_back({{stage_pos.at(x.stage), s.cohort_index.at(x.cohort)}, &x});
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<const Series*> out;
  out.reserve(keyed.size());
  for (const auto& k : keyed) out.push_back(k.second);
  return out;
}

// ---------------------------------------------------------------------------------------------
// compare_runs

namespace {

template <typename T>
std::vector<double> after_warmup(const std::vector<std::uint32_t>& window, const std::vector<T>& v,
                                 int warmup) {
  std::vector<double> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    if (window[i] >= static_cast<std::uint32_t>(warmup)) out.push_back(static_cast<double>(v[i]));
  return out;
}

RunOverview overview(const RunProfile& p, const CompareOptions& o) {
  RunOverview r;
  r.windows = p.windows();
  r.warmup = static_cast<int>(std::min<std::int64_t>(o.warmup_for(p.windows()), p.windows()));
  r.samples = p.samples();
  r.ranks = p.ranks();
  r.world_size = p.world_size();
  r.first_step = p.first_step();
  r.last_step = p.last_step();
  return r;
}

std::string interval_text(double level, double lo, double hi) {
  return format("%.0f%% interval ", 100.0 * level) + ratio_text(lo) + "-" + ratio_text(hi);
}

// The verdict of one tested series, from its ratio interval and adjusted p.
void decide(StageComparison& c, const CompareOptions& o, double level) {
  const double up = 1.0 + o.relative_threshold, down = 1.0 - o.relative_threshold;
  const bool significant = c.p_adjusted < o.alpha;
  const std::string ci = interval_text(level, c.ci_low, c.ci_high);
  const std::string p = "p " + p_text(c.p_adjusted) + " (Holm)";
  if (significant && c.ci_low > up) {
    c.verdict = Verdict::regressed;
    c.reason = ratio_text(c.ratio) + "x, " + ci + " above " + ratio_text(up) + ", " + p;
  } else if (significant && c.ci_high < down) {
    c.verdict = Verdict::improved;
    c.reason = ratio_text(c.ratio) + "x, " + ci + " below " + ratio_text(down) + ", " + p;
  } else if (c.ci_low >= down && c.ci_high <= up) {
    c.verdict = Verdict::same;
    c.reason = "within " + percent_text(o.relative_threshold) + ": " + ci;
  } else if (!significant) {
    c.verdict = Verdict::same;
    c.reason = "no significant change: " + p + ", " + ci;
  } else {
    c.verdict = Verdict::unknown;
    c.reason = "changed (" + p + ") but the " + ci + " straddles the " +
               percent_text(o.relative_threshold) + " threshold: more steps would settle it";
  }
}

struct Sides {
  std::vector<double> b_med, c_med, b_max, c_max;
};

StageComparison summarize(const std::string& cohort, const std::string& stage, StageKind kind,
                          const Sides& v, const CompareOptions& o) {
  StageComparison c;
  c.cohort = cohort;
  c.stage = stage;
  c.kind = kind;
  c.baseline_steps = static_cast<int>(v.b_med.size());
  c.current_steps = static_cast<int>(v.c_med.size());
  c.baseline_ms = median_of(v.b_med);
  c.current_ms = median_of(v.c_med);
  c.delta_ms = c.current_ms - c.baseline_ms;
  c.baseline_max_ms = median_of(v.b_max);
  c.current_max_ms = median_of(v.c_max);
  c.ratio = c.baseline_ms > 0.0 ? c.current_ms / c.baseline_ms : (c.current_ms > 0.0 ? kNaN : 1.0);
  c.ci_low = c.ci_high = kNaN;
  c.p_value = c.p_adjusted = kNaN;
  if (c.baseline_steps < o.min_steps || c.current_steps < o.min_steps) {
    c.verdict = Verdict::unknown;
    c.steps_needed = o.min_steps;
    c.reason = "too few steps: needs " + std::to_string(o.min_steps) +
               " per run after the warm-up; baseline has " + std::to_string(c.baseline_steps) +
               ", current has " + std::to_string(c.current_steps);
  } else {
    c.p_value = mann_whitney_p(v.b_med, v.c_med);
  }
  return c;
}

// Finishes a tested series (p_adjusted set): the interval and the verdict.
void finish(StageComparison& c, const Sides& v, const CompareOptions& o, std::uint64_t seed) {
  const double level = 1.0 - o.alpha;
  if (!std::isfinite(c.baseline_ms) || !std::isfinite(c.current_ms)) {
    // Times near the largest double (1e308): a median of two overflows, and there is no ratio.
    c.verdict = Verdict::unknown;
    c.ratio = kNaN;
    c.reason = "a median is beyond the range of a double (times near 1.8e308 ms): no ratio";
    return;
  }
  if (!(c.baseline_ms > 0.0)) {
    if (c.current_ms > 0.0) {
      c.verdict = Verdict::unknown;
      c.reason = "baseline median is 0 ms: no scale for a ratio";
    } else {
      c.verdict = Verdict::same;
      c.ratio = c.ci_low = c.ci_high = 1.0;
      c.reason = "0 ms in both runs";
    }
    return;
  }
  const Interval ci = bootstrap_ratio_of_medians(v.b_med, v.c_med, o.resamples, level, seed);
  c.ci_low = ci.low;
  c.ci_high = ci.high;
  decide(c, o, level);
}

}  // namespace

Comparison compare_runs(const RunProfile& baseline, const RunProfile& current,
                        const CompareOptions& options) {
  options.validate();
  Comparison out;
  out.options = options;
  out.baseline = overview(baseline, options);
  out.current = overview(current, options);
  const int wb = out.baseline.warmup, wc = out.current.warmup;

  const auto b_series = baseline.ordered_series();
  const auto c_series = current.ordered_series();
  std::unordered_set<std::string_view> cohorts;
  for (const auto* list : {&b_series, &c_series})
    for (const auto* s : *list) cohorts.insert(s->cohort);
  const bool name_cohort = cohorts.size() > 1;

  std::unordered_map<std::string, const RunProfile::Series*> c_by_key;
  for (const auto* s : c_series) c_by_key[s->cohort + '\x1f' + s->stage] = s;
  std::unordered_map<std::string, bool> b_keys;

  struct Pair {
    const RunProfile::Series* b;
    const RunProfile::Series* c;
    Sides values;
  };
  std::vector<Pair> pairs;
  for (const auto* s : b_series) {
    const std::string key = s->cohort + '\x1f' + s->stage;
    b_keys[key] = true;
    const auto it = c_by_key.find(key);
    if (it == c_by_key.end()) {
      out.only_in_baseline.push_back(stage_label(s->stage, s->cohort, name_cohort));
      continue;
    }
    Pair p{s, it->second, {}};
    p.values.b_med = after_warmup(s->window, s->median, wb);
    p.values.b_max = after_warmup(s->window, s->max, wb);
    p.values.c_med = after_warmup(it->second->window, it->second->median, wc);
    p.values.c_max = after_warmup(it->second->window, it->second->max, wc);
    pairs.push_back(std::move(p));
  }
  for (const auto* s : c_series)
    if (!b_keys.count(s->cohort + '\x1f' + s->stage))
      out.only_in_current.push_back(stage_label(s->stage, s->cohort, name_cohort));

  // Per stage: the test, Holm over the stages with enough steps, then intervals and verdicts.
  std::vector<double> p_tested;
  std::vector<std::size_t> tested;
  for (const Pair& p : pairs) {
    out.stages.push_back(summarize(p.b->cohort, p.b->stage, p.b->kind, p.values, options));
    if (out.stages.back().steps_needed == 0) {
      tested.push_back(out.stages.size() - 1);
      p_tested.push_back(out.stages.back().p_value);
    }
  }
  out.stages_tested = static_cast<int>(tested.size());
  const std::vector<double> adjusted = holm_adjust(p_tested);
  for (std::size_t i = 0; i < tested.size(); ++i) {
    StageComparison& c = out.stages[tested[i]];
    c.p_adjusted = adjusted[i];
    finish(c, pairs[tested[i]].values, options, options.seed ^ fnv1a(c.cohort + '\x1f' + c.stage));
  }

  // The origin is the first regressed stage in pipeline order; later ones are possible victims.
  for (std::size_t i = 0; i < out.stages.size(); ++i) {
    StageComparison& c = out.stages[i];
    if (c.verdict == Verdict::regressed) {
      if (out.origin < 0) {
        out.origin = static_cast<int>(i);
        c.role = StageComparison::Role::origin;
      } else {
        out.victims.push_back(static_cast<int>(i));
        c.role = StageComparison::Role::victim;
      }
    } else if (c.verdict == Verdict::unknown && out.origin < 0) {
      out.unknown_before_origin.push_back(static_cast<int>(i));
      c.role = StageComparison::Role::unknown_before_origin;
    }
  }

  // The job's step time, tested on its own (it is not a stage, so never the origin).
  {
    const auto& bs = baseline.step_time();
    const auto& cs = current.step_time();
    Sides v;
    v.b_med = after_warmup(bs.window, bs.max, wb);
    v.c_med = after_warmup(cs.window, cs.max, wc);
    v.b_max = v.b_med;
    v.c_max = v.c_med;
    out.step_time = summarize("", "step time", StageKind::other, v, options);
    if (out.step_time.steps_needed == 0) {
      out.step_time.p_adjusted = out.step_time.p_value;
      finish(out.step_time, v, options, options.seed ^ fnv1a("step time"));
      // The family is this one test: say so instead of "(Holm)".
      const auto pos = out.step_time.reason.find(" (Holm)");
      if (pos != std::string::npos) out.step_time.reason.erase(pos, 7);
    }
  }

  // Per rank: the same test on each rank's own times, when the ranks are the same ones.
  if (!options.per_rank) {
    out.per_rank_note = "per-rank comparison disabled";
  } else if (out.baseline.world_size != out.current.world_size) {
    out.per_rank_note = "world sizes differ (" + std::to_string(out.baseline.world_size) + " vs " +
                        std::to_string(out.current.world_size) +
                        "): per-rank comparison skipped, per-stage summaries compared";
  } else {
    struct RankPair {
      std::size_t stage;  // into out.stages
      const RunProfile::RankSeries* b;
      const RunProfile::RankSeries* c;
      std::vector<double> bv, cv;
      double p;
    };
    // rank series of each run by (series pointer, rank)
    const auto index_ranks = [](const RunProfile& prof) {
      std::unordered_map<const RunProfile::Series*, std::vector<const RunProfile::RankSeries*>> m;
      for (const auto& r : prof.rank_series()) m[&prof.series()[r.series]].push_back(&r);
      for (auto& [k, v] : m)
        std::sort(v.begin(), v.end(),
                  [](const auto* x, const auto* y) { return x->rank < y->rank; });
      return m;
    };
    const auto b_ranks = index_ranks(baseline);
    const auto c_ranks = index_ranks(current);
    std::vector<RankPair> rp;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const auto bi = b_ranks.find(pairs[i].b);
      const auto ci = c_ranks.find(pairs[i].c);
      if (bi == b_ranks.end() || ci == c_ranks.end()) continue;
      std::unordered_map<int, const RunProfile::RankSeries*> c_of;
      for (const auto* r : ci->second) c_of[r->rank] = r;
      for (const auto* br : bi->second) {
        const auto found = c_of.find(br->rank);
        if (found == c_of.end()) continue;
        RankPair x{i,
                   br,
                   found->second,
                   after_warmup(br->window, br->ms, wb),
                   after_warmup(found->second->window, found->second->ms, wc),
                   1.0};
        if (static_cast<int>(x.bv.size()) < options.min_steps ||
            static_cast<int>(x.cv.size()) < options.min_steps)
          continue;
        x.p = mann_whitney_p(x.bv, x.cv);
        rp.push_back(std::move(x));
      }
    }
    std::vector<double> ps;
    for (const auto& x : rp) ps.push_back(x.p);
    const auto adj = holm_adjust(ps);
    out.per_rank = !rp.empty();
    out.rank_pairs_tested = static_cast<int>(rp.size());
    if (rp.empty())
      out.per_rank_note = "no rank-stage pair has enough steps (needs " +
                          std::to_string(options.min_steps) + " per run after the warm-up)";
    else
      out.per_rank_note = std::to_string(rp.size()) + " rank-stage pairs tested (world size " +
                          std::to_string(out.baseline.world_size) + "), Holm-corrected over all";
    const double level = 1.0 - options.alpha;
    for (std::size_t k = 0; k < rp.size(); ++k) {
      const RankPair& x = rp[k];
      const StageComparison& st = out.stages[x.stage];
      StageComparison c;
      c.p_adjusted = adj[k];
      c.baseline_ms = median_of(x.bv);
      c.current_ms = median_of(x.cv);
      c.ratio = c.baseline_ms > 0.0 ? c.current_ms / c.baseline_ms : kNaN;
      c.ci_low = c.ci_high = kNaN;
      c.verdict = Verdict::same;
      // The interval costs a bootstrap: computed only where the test says something changed.
      if (c.p_adjusted < options.alpha && c.baseline_ms > 0.0) {
        const Interval ci = bootstrap_ratio_of_medians(
            x.bv, x.cv, options.resamples, level,
            options.seed ^ fnv1a(st.cohort + '\x1f' + st.stage,
                                 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(x.b->rank)));
        c.ci_low = ci.low;
        c.ci_high = ci.high;
        decide(c, options, level);
      } else if (!(c.baseline_ms > 0.0) && c.p_adjusted < options.alpha) {
        c.verdict = Verdict::unknown;
      }
      RankComparison r;
      r.rank = x.b->rank;
      r.cohort = st.cohort;
      r.stage = st.stage;
      r.kind = st.kind;
      r.verdict = c.verdict;
      r.baseline_steps = static_cast<int>(x.bv.size());
      r.current_steps = static_cast<int>(x.cv.size());
      r.baseline_ms = c.baseline_ms;
      r.current_ms = c.current_ms;
      r.delta_ms = c.current_ms - c.baseline_ms;
      r.ratio = c.ratio;
      r.ci_low = c.ci_low;
      r.ci_high = c.ci_high;
      r.p_adjusted = c.p_adjusted;
      r.stage_verdict = st.verdict;
      if (r.verdict == Verdict::regressed) ++out.ranks_regressed;
      if (r.verdict == Verdict::improved) ++out.ranks_improved;
      out.ranks.push_back(std::move(r));
    }
  }

  // A synchronizing collective makes every fast rank wait for the slow one: when only rank 3's
  // forward slowed down, the median rank's *communication* regresses. Name the rank's own work.
  for (std::size_t i = 0; i < out.ranks.size(); ++i) {
    const RankComparison& r = out.ranks[i];
    if (r.verdict != Verdict::regressed || r.kind == StageKind::communication) continue;
    out.rank_origin = static_cast<int>(i);  // ranks are in pipeline order, then rank
    break;
  }
  if (out.rank_origin >= 0) {
    const RankComparison& r = out.ranks[static_cast<std::size_t>(out.rank_origin)];
    std::string own = "rank " + std::to_string(r.rank) + "'s " +
                      stage_label(r.stage, r.cohort, name_cohort) + " regressed " +
                      ratio_text(r.ratio) + "x";
    int others = 0;
    for (const RankComparison& x : out.ranks)
      if (&x != &r && x.verdict == Verdict::regressed && x.kind != StageKind::communication)
        ++others;
    if (others > 0)
      own += " (and " + std::to_string(others) + " more rank-stage pair(s) of own work)";
    if (out.origin >= 0 &&
        out.stages[static_cast<std::size_t>(out.origin)].kind == StageKind::communication) {
      const StageComparison& o = out.stages[static_cast<std::size_t>(out.origin)];
      out.hint = stage_label(o.stage, o.cohort, name_cohort) +
                 " is where ranks wait for each other, so its regression is evidence about "
                 "someone else; " +
                 own + ": the other ranks likely wait for it";
    } else if (out.origin < 0) {
      out.hint = "no stage regressed for the median rank, but " + own;
    }
  }
  return out;
}

}  // namespace laggard
