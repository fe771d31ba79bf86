// bench/detection_absolute — does the default detector find a fault by what it costs the step,
// whatever the size of its stage? A scripted experiment over laggard::Detector (no training, no
// timing assertions) on synthetic data-parallel runs with fixed seeds: the tables reproduce.
//
//   detection_absolute            faulty runs at 8, 64 and 256 ranks, healthy runs of 500 windows
//   detection_absolute --quick    fewer trials (seconds)
//   detection_absolute --big      adds faulty runs at 4,096 ranks (slow)
//   detection_absolute --why      each miss, late find and false verdict on stderr
//
// ── The model ────────────────────────────────────────────────────────────────────────────────
// Two step shapes, stages in pipeline order (own work; communication holds the wait):
//   large:  dataloader 8 ms, forward 300 ms (a quarter of the step), backward 900 ms,
//           communication 60 ms + wait, optimizer 35 ms; untimed ~0.5 ms
//   small:  dataloader 0.2 ms, forward 1.5 ms, backward 3 ms, communication 0.5 ms + wait,
//           optimizer 0.3 ms; untimed ~0.1 ms (a ~5.5 ms step)
// Persistent per-rank speed uniform +-1.5 %, per (rank, stage) +-0.5 %; per-window jitter
// exp(j Z), Z Student-t(4) with unit variance; pauses: in 1 % of rank-windows one own-work stage
// takes uniform(0.5, 3) steps' time more (a GC or a preemption).
// communication = 60 (0.5) ms + the latest own-work finish before it - this rank's finish.
//
// Scenarios (onset at window 5 of 30):
//   1.05x      one rank's forward (quarter of the step), backward or optimizer, large shape,
//              jitter 0.5 % or 1 %
//   small      one rank's forward, backward or optimizer 1.2x or 1.5x, small shape, jitter 2 %
//   host       every own-work stage of the 8 ranks of one host 1.3x, small shape, jitter 2 %
//   drift      one rank's forward (either shape) rising linearly to 1.4x over 20 windows
//   intermit   one rank's forward or backward (small shape) 1.5x in a random 30 % of windows
// Each injected (rank, stage) is scored by what it cost: the median over the windows after the
// onset of its excess over the cohort's median as a share of the cohort's median step (the mean,
// for the intermittent fault), and its typical slowdown (median of t / median; intermittent: the
// mean). A pair that costs >= 1 % and is > 1.03x typical must be found (>= 2 %: within 10
// windows, >= 1 %: within 20); one under 0.5 % or <= 1.03x must never be a verdict.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "laggard/detector.hpp"
#include "laggard/model.hpp"

namespace {

using laggard::StageKind;

std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(mix64(seed + 0x9E3779B97F4A7C15ull)) {}
  std::uint64_t next() { return mix64(state_ += 0x9E3779B97F4A7C15ull); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int below(int n) { return static_cast<int>(uniform() * n); }
  double normal() {
    double u = uniform();
    while (u <= 0.0) u = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * uniform());
  }
  double t4() {  // Student-t(4) scaled to unit variance
    double chi2 = 0.0;
    for (int i = 0; i < 4; ++i) {
      const double z = normal();
      chi2 += z * z;
    }
    return normal() / std::sqrt(chi2 / 4.0) * std::sqrt(0.5);
  }

 private:
  std::uint64_t state_;
};

struct StageDef {
  const char* name;
  StageKind kind;
};
constexpr int kStages = 5;
constexpr int kComm = 3;
const StageDef kDefs[kStages] = {{"dataloader", StageKind::data},
                                 {"forward", StageKind::compute},
                                 {"backward", StageKind::compute},
                                 {"communication", StageKind::communication},
                                 {"optimizer", StageKind::compute}};
struct Shape {
  const char* name;
  double ms[kStages];
  double untimed;
};
const Shape kLarge = {"large", {8.0, 300.0, 900.0, 60.0, 35.0}, 0.5};
const Shape kSmall = {"small", {0.2, 1.5, 3.0, 0.5, 0.3}, 0.1};
constexpr int kRanksPerHost = 8;
constexpr int kOnset = 5;
constexpr int kFaultyWindows = 30;
constexpr int kHealthyWindows = 500;
constexpr double kPauseProb = 0.01;

enum class Kind { persistent, drift, intermittent };
struct Fault {
  std::vector<int> ranks;
  std::vector<int> stages;
  double factor = 1.0;
  Kind kind = Kind::persistent;
  double share = 1.0;  // intermittent: share of windows
};

struct Scenario {
  std::string name;
  const Shape* shape;
  double jitter;
  Fault fault;  // ranks filled per trial
  int host = 0;  // 1: the fault's ranks are one host
};

struct Pair {
  int rank, stage;
  double factor;
  Kind kind;
  std::vector<double> shares, ratios;
  int first = -1;  // window of the first verdict (from the onset, 1 = the onset window)
};

struct Tally {
  long runs = 0, wrong = 0;
  // cost bands: <0.5 % (or <= 1.03x), 0.5-1 %, 1-2 %, >= 2 %
  std::array<long, 4> pairs{}, found10{}, found20{};
  long costless_verdicts = 0;  // pairs of band 0 named at all
  std::vector<int> latency;    // >= 1.2x persistent pairs found
};

int band_of(double share, double ratio) {
  if (share < 0.005 || ratio <= 1.03) return 0;
  if (share < 0.01) return 1;
  if (share < 0.02) return 2;
  return 3;
}

class Run {
 public:
  Run(int ranks, const Shape& shape, double jitter, Rng& rng)
      : ranks_(ranks), shape_(shape), jitter_(jitter), factor_(static_cast<std::size_t>(ranks) * kStages) {
    for (int r = 0; r < ranks; ++r) {
      const double rf = 1.0 + rng.uniform(-0.015, 0.015);
      for (int s = 0; s < kStages; ++s) factor_[idx(r, s)] = rf * (1.0 + rng.uniform(-0.005, 0.005));
    }
    window_.samples.resize(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      laggard::StepSample& s = window_.samples[static_cast<std::size_t>(r)];
      s.rank = r;
      s.world_size = ranks;
      char host[32];
      std::snprintf(host, sizeof host, "node-%04d", r / kRanksPerHost);
      s.host = host;
      s.stages.resize(kStages);
      for (int i = 0; i < kStages; ++i) {
        s.stages[static_cast<std::size_t>(i)].name = kDefs[i].name;
        s.stages[static_cast<std::size_t>(i)].kind = kDefs[i].kind;
        s.stages[static_cast<std::size_t>(i)].calls = 1;
      }
    }
  }
  std::size_t idx(int r, int s) const { return static_cast<std::size_t>(r) * kStages + static_cast<std::size_t>(s); }

  // One window; `scale(r, s)` is the fault's factor of (r, s) in it.
  template <class Scale>
  const laggard::Window& next(std::int64_t step, Rng& rng, Scale scale) {
    ms_.resize(static_cast<std::size_t>(ranks_) * kStages);
    const double step_ms = [&] {
      double t = shape_.untimed;
      for (int s = 0; s < kStages; ++s) t += shape_.ms[s];
      return t;
    }();
    double latest = 0.0;
    for (int r = 0; r < ranks_; ++r) {
      for (int s = 0; s < kStages; ++s)
        ms_[idx(r, s)] = shape_.ms[s] * factor_[idx(r, s)] * std::exp(jitter_ * rng.t4()) * scale(r, s);
      if (rng.uniform() < kPauseProb) {
        const int own[4] = {0, 1, 2, 4};
        ms_[idx(r, own[rng.below(4)])] += rng.uniform(0.5, 3.0) * step_ms;
      }
      double pre = 0.0;
      for (int s = 0; s < kComm; ++s) pre += ms_[idx(r, s)];
      latest = std::max(latest, pre);
    }
    window_.step = step;
    for (int r = 0; r < ranks_; ++r) {
      double pre = 0.0;
      for (int s = 0; s < kComm; ++s) pre += ms_[idx(r, s)];
      ms_[idx(r, kComm)] += latest - pre;
      laggard::StepSample& smp = window_.samples[static_cast<std::size_t>(r)];
      smp.step = step;
      double total = shape_.untimed * std::exp(0.2 * rng.t4());
      for (int s = 0; s < kStages; ++s) {
        smp.stages[static_cast<std::size_t>(s)].ms = ms_[idx(r, s)];
        total += ms_[idx(r, s)];
      }
      smp.step_ms = total;
    }
    return window_;
  }
  double ms(int r, int s) const { return ms_[idx(r, s)]; }

 private:
  int ranks_;
  const Shape& shape_;
  double jitter_;
  std::vector<double> factor_, ms_;
  laggard::Window window_;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

int stage_index(const std::string& name) {
  for (int s = 0; s < kStages; ++s)
    if (name == kDefs[s].name) return s;
  return -1;  // untimed
}

bool g_why = false;

void run_faulty(const Scenario& sc, int ranks, int trial, std::uint64_t seed, Tally& t) {
  Rng rng(seed);
  Fault f = sc.fault;
  if (sc.host) {
    const int host = rng.below(ranks / kRanksPerHost);
    for (int i = 0; i < kRanksPerHost; ++i) f.ranks.push_back(host * kRanksPerHost + i);
  } else {
    f.ranks = {rng.below(ranks)};
    if (f.stages.size() > 1) f.stages = {f.stages[static_cast<std::size_t>(trial) % f.stages.size()]};
  }
  Run run(ranks, *sc.shape, sc.jitter, rng);
  std::vector<Pair> pairs;
  for (int r : f.ranks)
    for (int s : f.stages) pairs.push_back({r, s, f.factor, f.kind, {}, {}, -1});
  laggard::Detector det;
  laggard::Report rep;
  std::vector<char> wrong(static_cast<std::size_t>(ranks) * (kStages + 1), 0);
  for (int w = 0; w < kFaultyWindows; ++w) {
    double factor = 1.0;
    if (w >= kOnset) {
      factor = f.factor;
      if (f.kind == Kind::drift) factor = 1.0 + (f.factor - 1.0) * std::min(1.0, (w - kOnset + 1) / 20.0);
      if (f.kind == Kind::intermittent && rng.uniform() >= f.share) factor = 1.0;
    }
    const laggard::Window& win = run.next(w * 10, rng, [&](int r, int s) {
      if (factor == 1.0) return 1.0;
      if (std::find(f.ranks.begin(), f.ranks.end(), r) == f.ranks.end()) return 1.0;
      return std::find(f.stages.begin(), f.stages.end(), s) == f.stages.end() ? 1.0 : factor;
    });
    det.observe(win, rep);
    if (w >= kOnset)
      for (Pair& p : pairs)
        for (const laggard::StageFigures& sf : rep.stages)
          if (sf.stage == kDefs[p.stage].name) {
            const double m = sf.median_ms;
            p.shares.push_back((run.ms(p.rank, p.stage) - m) / sf.step_ms);
            p.ratios.push_back(run.ms(p.rank, p.stage) / m);
          }
    for (const laggard::RankFinding& fd : rep.stragglers) {
      if (!fd.confirmed) continue;
      const int s = stage_index(fd.stage);
      bool injected = false;
      for (Pair& p : pairs)
        if (p.rank == fd.rank && p.stage == s) {
          injected = true;
          if (p.first < 0 && w >= kOnset) p.first = w - kOnset + 1;
        }
      // A host's rank named in another stage (its untimed part) is not a wrong pair.
      if (!injected && sc.host && std::find(f.ranks.begin(), f.ranks.end(), fd.rank) != f.ranks.end())
        injected = true;
      if (!injected) {
        char& seen = wrong[static_cast<std::size_t>(fd.rank) * (kStages + 1) + static_cast<std::size_t>(s + 1)];
        if (!seen && g_why)
          std::fprintf(stderr, "why: %s R=%d trial %d: wrong pair rank %d %s at window %d (%.3fx, %.2f%%)\n",
                       sc.name.c_str(), ranks, trial, fd.rank, fd.stage.c_str(), w, fd.slowdown,
                       100 * fd.cost_share);
        seen = 1;
      }
    }
  }
  ++t.runs;
  for (char c : wrong) t.wrong += c;
  for (const Pair& p : pairs) {
    const bool inter = p.kind == Kind::intermittent;
    const double share = inter ? mean(p.shares) : median(p.shares);
    const double ratio = inter ? mean(p.ratios) : median(p.ratios);
    const int b = band_of(share, ratio);
    ++t.pairs[static_cast<std::size_t>(b)];
    if (p.first > 0 && p.first <= 10) ++t.found10[static_cast<std::size_t>(b)];
    if (p.first > 0 && p.first <= 20) ++t.found20[static_cast<std::size_t>(b)];
    if (b == 0 && p.first > 0) ++t.costless_verdicts;
    if (p.first > 0 && p.kind == Kind::persistent && p.factor >= 1.2) t.latency.push_back(p.first);
    if (g_why && b >= 2 && (p.first < 0 || p.first > (b == 3 ? 10 : 20)))
      std::fprintf(stderr, "why: %s R=%d trial %d: rank %d %s %.2fx (cost %.2f%%, %.3fx typical) %s\n",
                   sc.name.c_str(), ranks, trial, p.rank, kDefs[p.stage].name, p.factor,
                   100 * share, ratio, p.first < 0 ? "missed" : ("late: " + std::to_string(p.first)).c_str());
    if (g_why && b == 0 && p.first > 0)
      std::fprintf(stderr, "why: %s R=%d trial %d: costless verdict rank %d %s (cost %.2f%%, %.3fx)\n",
                   sc.name.c_str(), ranks, trial, p.rank, kDefs[p.stage].name, 100 * share, ratio);
  }
}

// Healthy: any verdict at all in kHealthyWindows windows.
bool run_healthy(const Shape& shape, double jitter, int ranks, int trial, std::uint64_t seed) {
  Rng rng(seed);
  Run run(ranks, shape, jitter, rng);
  laggard::Detector det;
  laggard::Report rep;
  for (int w = 0; w < kHealthyWindows; ++w) {
    det.observe(run.next(w * 10, rng, [](int, int) { return 1.0; }), rep);
    for (const laggard::RankFinding& fd : rep.stragglers)
      if (fd.confirmed) {
        if (g_why)
          std::fprintf(stderr, "why: healthy %s j=%.3f R=%d trial %d: rank %d %s at window %d (%.3fx, %.2f%%)\n",
                       shape.name, jitter, ranks, trial, fd.rank, fd.stage.c_str(), w, fd.slowdown,
                       100 * fd.cost_share);
        return true;
      }
  }
  return false;
}

std::string pct(long a, long b) {
  if (b == 0) return "   -  ";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%5.1f%%", 100.0 * static_cast<double>(a) / static_cast<double>(b));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, big = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--big")) big = true;
    else if (!std::strcmp(argv[i], "--why")) g_why = true;
    else {
      std::fprintf(stderr, "usage: detection_absolute [--quick] [--big] [--why]\n");
      return 2;
    }
  }
  std::vector<Scenario> scenarios;
  for (double j : {0.005, 0.01}) {
    Scenario s{"1.05x j" + std::to_string(j).substr(0, 5), &kLarge, j, {}, 0};
    s.fault.stages = {1, 2, 4};
    s.fault.factor = 1.05;
    scenarios.push_back(s);
  }
  for (double fct : {1.2, 1.5}) {
    Scenario s{std::string("small ") + (fct == 1.2 ? "1.2x" : "1.5x"), &kSmall, 0.02, {}, 0};
    s.fault.stages = {1, 2, 4};
    s.fault.factor = fct;
    scenarios.push_back(s);
  }
  {
    Scenario s{"host 1.3x small", &kSmall, 0.02, {}, 1};
    s.fault.stages = {0, 1, 2, 4};
    s.fault.factor = 1.3;
    scenarios.push_back(s);
  }
  for (const Shape* sh : {&kSmall, &kLarge}) {
    Scenario s{std::string("drift 1.4x ") + sh->name, sh, sh == &kSmall ? 0.02 : 0.01, {}, 0};
    s.fault.stages = {1};
    s.fault.factor = 1.4;
    s.fault.kind = Kind::drift;
    scenarios.push_back(s);
  }
  {
    Scenario s{"intermit 30% 1.5x", &kSmall, 0.02, {}, 0};
    s.fault.stages = {1, 2};
    s.fault.factor = 1.5;
    s.fault.kind = Kind::intermittent;
    s.fault.share = 0.3;
    scenarios.push_back(s);
  }
  std::vector<int> scales = {8, 64, 256};
  if (big) scales.push_back(4096);
  const int trials = quick ? 12 : 60;
  std::printf("laggard detection by cost — onset at window %d of %d; pauses in %.0f%% of rank-windows; "
              "persistent spread +-1.5%% per rank, +-0.5%% per (rank, stage); jitter t(4)\n\n",
              kOnset, kFaultyWindows, 100 * kPauseProb);
  std::printf("%-20s %5s %6s %9s | %-22s | %-22s | %-22s | %7s %7s\n", "scenario", "ranks", "runs",
              "wrong/run", ">=2% (n, @10, @20)", "1-2% (n, @10, @20)", "0.5-1% (n, @10, @20)",
              "<0.5%:n", "named");
  Tally total;
  std::map<std::string, Tally> by_scenario;
  for (std::size_t k = 0; k < scenarios.size(); ++k) {
    for (int ranks : scales) {
      if (scenarios[k].host && ranks < 16) continue;
      Tally t;
      const int n = ranks >= 4096 ? std::max(3, trials / 10) : trials;
      for (int trial = 0; trial < n; ++trial)
        run_faulty(scenarios[k], ranks, trial, mix64(k * 1000003ull + static_cast<std::uint64_t>(ranks) * 7919ull + static_cast<std::uint64_t>(trial)), t);
      auto cell = [&](int b) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%4ld %s %s", t.pairs[static_cast<std::size_t>(b)],
                      pct(t.found10[static_cast<std::size_t>(b)], t.pairs[static_cast<std::size_t>(b)]).c_str(),
                      pct(t.found20[static_cast<std::size_t>(b)], t.pairs[static_cast<std::size_t>(b)]).c_str());
        return std::string(buf);
      };
      std::printf("%-20s %5d %6ld %9.3f | %-22s | %-22s | %-22s | %7ld %7ld\n", scenarios[k].name.c_str(),
                  ranks, t.runs, static_cast<double>(t.wrong) / static_cast<double>(t.runs),
                  cell(3).c_str(), cell(2).c_str(), cell(1).c_str(), t.pairs[0], t.costless_verdicts);
      std::fflush(stdout);
      for (Tally* a : {&total, &by_scenario[scenarios[k].name]}) {
        a->runs += t.runs;
        a->wrong += t.wrong;
        for (int b = 0; b < 4; ++b) {
          a->pairs[static_cast<std::size_t>(b)] += t.pairs[static_cast<std::size_t>(b)];
          a->found10[static_cast<std::size_t>(b)] += t.found10[static_cast<std::size_t>(b)];
          a->found20[static_cast<std::size_t>(b)] += t.found20[static_cast<std::size_t>(b)];
        }
        a->costless_verdicts += t.costless_verdicts;
        a->latency.insert(a->latency.end(), t.latency.begin(), t.latency.end());
      }
    }
  }
  std::printf("\nby scenario (all scales): recall of pairs costing >= 1%% within 20 windows; median latency (>= 1.2x, persistent)\n");
  for (auto& [name, a] : by_scenario) {
    std::vector<double> lat(a.latency.begin(), a.latency.end());
    std::printf("  %-20s %s of %ld   latency %s\n", name.c_str(),
                pct(a.found20[2] + a.found20[3], a.pairs[2] + a.pairs[3]).c_str(), a.pairs[2] + a.pairs[3],
                lat.empty() ? "-" : std::to_string(median(lat)).substr(0, 4).c_str());
  }
  std::vector<double> lat(total.latency.begin(), total.latency.end());
  std::printf("\ntotal: runs %ld, wrong pairs/run %.4f; >=2%%: %s within 10 (%ld); 1-2%%: %s within 20 (%ld); "
              "0.5-1%%: %s within 20 (%ld); costless pairs named %ld of %ld; median latency (>=1.2x) %.1f\n",
              total.runs, static_cast<double>(total.wrong) / static_cast<double>(total.runs),
              pct(total.found10[3], total.pairs[3]).c_str(), total.pairs[3],
              pct(total.found20[2], total.pairs[2]).c_str(), total.pairs[2],
              pct(total.found20[1], total.pairs[1]).c_str(), total.pairs[1], total.costless_verdicts,
              total.pairs[0], lat.empty() ? 0.0 : median(lat));

  std::printf("\nhealthy runs of %d windows: runs with any verdict\n", kHealthyWindows);
  const int healthy_trials = quick ? 10 : 100;
  for (const Shape* sh : {&kSmall, &kLarge})
    for (double j : {0.005, 0.02})
      for (int ranks : {8, 64}) {
        int alarmed = 0;
        for (int trial = 0; trial < healthy_trials; ++trial)
          alarmed += run_healthy(*sh, j, ranks, trial,
                                 mix64(0xABCDEFull + static_cast<std::uint64_t>(ranks) * 131ull +
                                       static_cast<std::uint64_t>(j * 1000) * 17ull +
                                       (sh == &kSmall ? 5ull : 0ull) + static_cast<std::uint64_t>(trial) * 1000003ull));
        std::printf("  %-6s jitter %.1f%% R=%-3d  %d of %d\n", sh->name, 100 * j, ranks, alarmed, healthy_trials);
        std::fflush(stdout);
      }
  return 0;
}
