#include "laggard/compare.hpp"

#include <gtest/gtest.h>

#include "laggard/detail/statistics.hpp"
#include "sanitizers.hpp"
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace laggard {
namespace {

using detail::bootstrap_ratio_of_medians;
using detail::holm_adjust;
using detail::Interval;
using detail::mann_whitney_p;
using detail::median_of;

// ---- the statistics ----------------------------------------------------------------------------

TEST(Statistics, Median) {
  EXPECT_EQ(median_of({}), 0.0);
  EXPECT_EQ(median_of({3.0}), 3.0);
  EXPECT_EQ(median_of({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(median_of({4.0, 1.0, 3.0, 2.0}), 2.5);
}

TEST(Statistics, MannWhitneyExactMatchesTheTable) {
  // Complete separation of 5 and 5: the smallest two-sided p, 2 / C(10,5) = 2/252.
  EXPECT_NEAR(mann_whitney_p({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}), 2.0 / 252.0, 1e-12);
  EXPECT_NEAR(mann_whitney_p({6, 7, 8, 9, 10}, {1, 2, 3, 4, 5}), 2.0 / 252.0, 1e-12);
  // U = 4 for sizes 4 and 4: P(U <= 4) = 12/70, two-sided 24/70 (as scipy's exact method).
  EXPECT_NEAR(mann_whitney_p({1.1, 2.2, 3.3, 4.4}, {5.5, 6.6, 7.7, 0.5}), 24.0 / 70.0, 1e-12);
  EXPECT_EQ(mann_whitney_p({}, {1.0}), 1.0);
}

TEST(Statistics, MannWhitneyNormalApproximationWithTies) {
  EXPECT_EQ(mann_whitney_p({1, 1, 1}, {1, 1, 1}), 1.0);  // all tied
  std::vector<double> a, b;
  for (int i = 0; i < 60; ++i) {
    a.push_back(10.0 + (i % 7));  // ties: the normal approximation
    b.push_back(13.0 + (i % 7));
  }
  const double p = mann_whitney_p(a, b);
  EXPECT_LT(p, 1e-6);
  EXPECT_NEAR(p, mann_whitney_p(b, a), 1e-15);  // two-sided: symmetric
  EXPECT_GT(mann_whitney_p(a, a), 0.9);
}

TEST(Statistics, HolmAdjustsStepDown) {
  const auto adj = holm_adjust({0.01, 0.04, 0.03, 0.005});
  ASSERT_EQ(adj.size(), 4u);
  EXPECT_NEAR(adj[3], 0.02, 1e-12);  // 4 x 0.005
  EXPECT_NEAR(adj[0], 0.03, 1e-12);  // 3 x 0.01
  EXPECT_NEAR(adj[2], 0.06, 1e-12);  // 2 x 0.03
  EXPECT_NEAR(adj[1], 0.06, 1e-12);  // 1 x 0.04, but never below an earlier one
  EXPECT_EQ(holm_adjust({0.9, 0.8})[0], 1.0);
  EXPECT_TRUE(holm_adjust({}).empty());
}

TEST(Statistics, BootstrapIsDeterministicAndCoversTheRatio) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> noise(1.0, 0.03);
  std::vector<double> b, c;
  for (int i = 0; i < 40; ++i) {
    b.push_back(100.0 * noise(rng));
    c.push_back(120.0 * noise(rng));
  }
  const Interval x = bootstrap_ratio_of_medians(b, c, 1000, 0.95, 7);
  const Interval y = bootstrap_ratio_of_medians(b, c, 1000, 0.95, 7);
  EXPECT_EQ(x.low, y.low);
  EXPECT_EQ(x.high, y.high);
  EXPECT_LT(x.low, 1.2);
  EXPECT_GT(x.high, 1.2);
  EXPECT_GT(x.low, 1.15);
  EXPECT_LT(x.high, 1.25);
  const Interval same = bootstrap_ratio_of_medians({2, 2, 2}, {3, 3, 3}, 200, 0.95, 1);
  EXPECT_DOUBLE_EQ(same.low, 1.5);
  EXPECT_DOUBLE_EQ(same.high, 1.5);
  const Interval zero = bootstrap_ratio_of_medians({0, 0, 0}, {1, 1, 1}, 200, 0.95, 1);
  EXPECT_TRUE(std::isinf(zero.low));
}

// ---- runs --------------------------------------------------------------------------------------

struct StageSpec {
  std::string name;
  StageKind kind;
  double ms;
};

const std::vector<StageSpec> kStages = {{"dataloader", StageKind::data, 2.0},
                                        {"forward", StageKind::compute, 60.0},
                                        {"backward", StageKind::compute, 40.0},
                                        {"communication", StageKind::communication, 6.0},
                                        {"optimizer", StageKind::compute, 5.0}};

struct RunSpec {
  int world = 8;
  int steps = 30;
  double noise = 0.03;
  std::uint64_t seed = 1;
  std::map<std::string, double> factor;                // every rank
  std::map<std::pair<int, std::string>, double> rank;  // one rank
  std::vector<StageSpec> stages = kStages;
  std::string cohort = "dp";
  std::function<std::string(int)> cohort_of;  // optional, per rank
};

// A data-parallel run: own work per stage with noise, the all-reduce ends when the slowest arrives.
RunProfile make_run(const RunSpec& spec, RunProfile::Limits limits = {}) {
  RunProfile profile(limits);
  std::mt19937_64 rng(spec.seed);
  std::normal_distribution<double> noise(1.0, spec.noise);
  for (int i = 0; i < spec.steps; ++i) {
    Window w;
    w.step = 10 * i;
    std::vector<std::vector<double>> own(static_cast<std::size_t>(spec.world));
    double latest = 0.0;
    for (int r = 0; r < spec.world; ++r) {
      double finish = 0.0;
      for (const auto& st : spec.stages) {
        double ms = st.ms * noise(rng);
        if (auto f = spec.factor.find(st.name); f != spec.factor.end()) ms *= f->second;
        if (auto f = spec.rank.find({r, st.name}); f != spec.rank.end()) ms *= f->second;
        own[static_cast<std::size_t>(r)].push_back(ms);
        if (st.kind != StageKind::communication) finish += ms;
      }
      latest = std::max(latest, finish);
      own[static_cast<std::size_t>(r)].push_back(finish);
    }
    for (int r = 0; r < spec.world; ++r) {
      StepSample s;
      s.rank = r;
      s.world_size = spec.world;
      s.step = w.step;
      s.cohort = spec.cohort_of ? spec.cohort_of(r) : spec.cohort;
      const auto& v = own[static_cast<std::size_t>(r)];
      const double finish = v.back();
      for (std::size_t k = 0; k < spec.stages.size(); ++k) {
        double ms = v[k];
        if (spec.stages[k].kind == StageKind::communication) ms += latest - finish;
        s.stages.push_back({spec.stages[k].name, spec.stages[k].kind, ms, 1});
        s.step_ms += ms;
      }
      w.samples.push_back(std::move(s));
    }
    profile.add(w);
  }
  return profile;
}

const StageComparison& stage(const Comparison& c, const std::string& name) {
  for (const auto& s : c.stages)
    if (s.stage == name) return s;
  throw std::runtime_error("no stage " + name);
}

TEST(Compare, SameDistributionRegressesNothing) {
  RunSpec b, c;
  c.seed = 2;
  const Comparison cmp = compare_runs(make_run(b), make_run(c));
  EXPECT_EQ(cmp.origin, -1);
  EXPECT_EQ(cmp.stages.size(), 5u);
  EXPECT_EQ(cmp.stages_tested, 5);
  for (const auto& s : cmp.stages) {
    EXPECT_EQ(s.verdict, Verdict::same) << s.stage << ": " << s.reason;
    EXPECT_EQ(s.baseline_steps, 27);  // 30 sampled steps, the first 3 (10%) skipped
    EXPECT_LT(s.ci_low, 1.05);
    EXPECT_GT(s.ci_high, 0.95);
  }
  EXPECT_TRUE(cmp.per_rank);
  EXPECT_EQ(cmp.rank_pairs_tested, 40);
  EXPECT_EQ(cmp.ranks_regressed, 0);
  EXPECT_EQ(cmp.step_time.verdict, Verdict::same);
  EXPECT_TRUE(cmp.hint.empty());
}

TEST(Compare, FirstRegressedStageIsTheOriginLaterOnesVictims) {
  RunSpec b, c;
  c.seed = 2;
  c.factor = {{"backward", 1.15}, {"optimizer", 1.12}};
  const Comparison cmp = compare_runs(make_run(b), make_run(c));
  ASSERT_GE(cmp.origin, 0);
  const auto& o = cmp.stages[static_cast<std::size_t>(cmp.origin)];
  EXPECT_EQ(o.stage, "backward");
  EXPECT_EQ(o.verdict, Verdict::regressed);
  EXPECT_EQ(o.role, StageComparison::Role::origin);
  EXPECT_NEAR(o.ratio, 1.15, 0.03);
  EXPECT_GT(o.ci_low, 1.05);
  EXPECT_LT(o.ci_low, o.ratio);
  EXPECT_GT(o.ci_high, o.ratio);
  EXPECT_NEAR(o.delta_ms, 6.0, 1.5);
  EXPECT_LT(o.p_adjusted, 0.05);
  EXPECT_GT(o.current_max_ms, o.current_ms);
  ASSERT_EQ(cmp.victims.size(), 1u);
  EXPECT_EQ(cmp.stages[static_cast<std::size_t>(cmp.victims[0])].stage, "optimizer");
  EXPECT_EQ(stage(cmp, "optimizer").role, StageComparison::Role::victim);
  EXPECT_EQ(stage(cmp, "forward").verdict, Verdict::same);
  // +6 ms on a ~113 ms step: about +5.5%, close to the threshold.
  EXPECT_GT(cmp.step_time.ratio, 1.04);
  EXPECT_NE(cmp.step_time.verdict, Verdict::same);
  EXPECT_TRUE(cmp.unknown_before_origin.empty());
}

TEST(Compare, OneRankRegressedIsFoundPerRankAndTheWaitIsExplained) {
  RunSpec b, c;
  c.seed = 2;
  c.rank = {{{5, "backward"}, 1.3}};
  const Comparison cmp = compare_runs(make_run(b), make_run(c));
  EXPECT_NE(stage(cmp, "backward").verdict, Verdict::regressed);  // the median rank did not
  bool found = false;
  for (const auto& r : cmp.ranks) {
    if (r.rank == 5 && r.stage == "backward") {
      found = true;
      EXPECT_EQ(r.verdict, Verdict::regressed);
      EXPECT_NEAR(r.ratio, 1.3, 0.05);
      EXPECT_GT(r.ci_low, 1.05);
      EXPECT_NE(r.stage_verdict, Verdict::regressed);
    } else if (r.kind != StageKind::communication) {
      EXPECT_NE(r.verdict, Verdict::regressed) << "rank " << r.rank << " " << r.stage;
    }
  }
  EXPECT_TRUE(found);
  ASSERT_GE(cmp.rank_origin, 0);
  EXPECT_EQ(cmp.ranks[static_cast<std::size_t>(cmp.rank_origin)].rank, 5);
  // The others wait for rank 5: communication regresses for the median rank, and the hint says why.
  EXPECT_EQ(stage(cmp, "communication").verdict, Verdict::regressed);
  EXPECT_NE(cmp.hint.find("rank 5's backward"), std::string::npos) << cmp.hint;
  EXPECT_NE(cmp.hint.find("wait"), std::string::npos) << cmp.hint;
}

TEST(Compare, TooFewStepsIsUnknownWithTheNumberNeeded) {
  RunSpec b, c;
  b.steps = 6;
  c.steps = 30;
  c.factor = {{"backward", 1.5}};
  const Comparison cmp = compare_runs(make_run(b), make_run(c));
  EXPECT_EQ(cmp.baseline.warmup, 2);
  for (const auto& s : cmp.stages) {
    EXPECT_EQ(s.verdict, Verdict::unknown);
    EXPECT_EQ(s.steps_needed, 5);
    EXPECT_EQ(s.baseline_steps, 4);
    EXPECT_NE(s.reason.find("needs 5"), std::string::npos) << s.reason;
    EXPECT_NE(s.reason.find("baseline has 4"), std::string::npos) << s.reason;
  }
  EXPECT_EQ(cmp.origin, -1);
  EXPECT_EQ(cmp.unknown_before_origin.size(), 5u);
  EXPECT_EQ(cmp.stages_tested, 0);
  // With no warm-up skipped, 6 steps are enough.
  CompareOptions o;
  o.warmup = 0;
  const Comparison again = compare_runs(make_run(b), make_run(c), o);
  EXPECT_EQ(stage(again, "backward").verdict, Verdict::regressed);
}

TEST(Compare, UnknownStagesBeforeTheOriginAreListed) {
  // 'prefetch' appears in only 4 steps of the current run: UNKNOWN, and it precedes the origin.
  RunSpec b, c;
  c.seed = 2;
  b.stages.insert(b.stages.begin(), {"prefetch", StageKind::data, 1.0});
  c.stages = b.stages;
  c.factor = {{"backward", 1.2}};
  RunProfile base = make_run(b);
  RunProfile cur;
  // Build the current run window by window: prefetch only in the last 4 windows.
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(1.0, 0.03);
  for (int i = 0; i < 30; ++i) {
    Window w;
    w.step = 10 * i;
    for (int r = 0; r < 8; ++r) {
      StepSample s;
      s.rank = r;
      s.world_size = 8;
      s.step = w.step;
      s.cohort = "dp";
      for (const auto& st : c.stages) {
        if (st.name == "prefetch" && i < 26) continue;
        double ms = st.ms * noise(rng) * (st.name == "backward" ? 1.2 : 1.0);
        s.stages.push_back({st.name, st.kind, ms, 1});
      }
      w.samples.push_back(std::move(s));
    }
    cur.add(w);
  }
  const Comparison cmp = compare_runs(base, cur);
  ASSERT_GE(cmp.origin, 0);
  EXPECT_EQ(cmp.stages[static_cast<std::size_t>(cmp.origin)].stage, "backward");
  ASSERT_EQ(cmp.unknown_before_origin.size(), 1u);
  EXPECT_EQ(cmp.stages[static_cast<std::size_t>(cmp.unknown_before_origin[0])].stage, "prefetch");
  EXPECT_EQ(cmp.stages.front().stage, "prefetch");  // pipeline order kept
}

TEST(Compare, DifferentWorldSizesSkipPerRank) {
  RunSpec b, c;
  c.world = 4;
  c.factor = {{"backward", 1.2}};
  const Comparison cmp = compare_runs(make_run(b), make_run(c));
  EXPECT_FALSE(cmp.per_rank);
  EXPECT_NE(cmp.per_rank_note.find("world sizes differ (8 vs 4)"), std::string::npos);
  EXPECT_TRUE(cmp.ranks.empty());
  EXPECT_EQ(stage(cmp, "backward").verdict, Verdict::regressed);
}

TEST(Compare, DifferentStageSetsCompareTheCommonOnes) {
  RunSpec b, c;
  c.stages = {{"forward", StageKind::compute, 60.0},
              {"attention", StageKind::compute, 10.0},
              {"backward", StageKind::compute, 40.0},
              {"communication", StageKind::communication, 6.0},
              {"optimizer", StageKind::compute, 5.0}};
  const Comparison cmp = compare_runs(make_run(b), make_run(c));
  EXPECT_EQ(cmp.stages.size(), 4u);
  EXPECT_EQ(cmp.only_in_baseline, std::vector<std::string>{"dataloader"});
  EXPECT_EQ(cmp.only_in_current, std::vector<std::string>{"attention"});
  EXPECT_EQ(cmp.stages[0].stage, "forward");
}

TEST(Compare, ChangeStraddlingTheThresholdIsUnknown) {
  // Exactly +5% with tiny noise and many steps: significant, but the interval straddles 1.05.
  RunSpec b, c;
  b.noise = c.noise = 0.002;
  b.steps = c.steps = 200;
  c.seed = 2;
  c.factor = {{"forward", 1.05}};
  const Comparison cmp = compare_runs(make_run(b), make_run(c));
  const auto& f = stage(cmp, "forward");
  EXPECT_EQ(f.verdict, Verdict::unknown) << f.reason;
  EXPECT_LT(f.p_adjusted, 0.05);
  EXPECT_NE(f.reason.find("straddles"), std::string::npos) << f.reason;
  EXPECT_EQ(f.steps_needed, 0);
}

TEST(Compare, FasterStageIsImproved) {
  RunSpec b, c;
  c.seed = 2;
  c.factor = {{"forward", 0.8}};
  const Comparison cmp = compare_runs(make_run(b), make_run(c));
  EXPECT_EQ(stage(cmp, "forward").verdict, Verdict::improved);
  EXPECT_EQ(cmp.origin, -1);
}

TEST(Compare, CohortsAreComparedApartAndNamed) {
  RunSpec b, c;
  const auto pp = [](int r) { return r < 4 ? std::string("pp0") : std::string("pp1"); };
  b.cohort_of = c.cohort_of = pp;
  c.seed = 2;
  c.rank = {
      {{4, "forward"}, 1.2}, {{5, "forward"}, 1.2}, {{6, "forward"}, 1.2}, {{7, "forward"}, 1.2}};
  const Comparison cmp = compare_runs(make_run(b), make_run(c));
  EXPECT_EQ(cmp.stages.size(), 10u);
  ASSERT_GE(cmp.origin, 0);
  const auto& o = cmp.stages[static_cast<std::size_t>(cmp.origin)];
  EXPECT_EQ(o.stage, "forward");
  EXPECT_EQ(o.cohort, "pp1");
  EXPECT_EQ(stage_label(o.stage, o.cohort, true), "forward [pp1]");
  // pp0's forward did not change.
  EXPECT_EQ(cmp.stages[2].cohort, "pp0");
  EXPECT_EQ(cmp.stages[2].stage, "forward");
  EXPECT_EQ(cmp.stages[2].verdict, Verdict::same);
}

TEST(Compare, ExplicitWarmupAndZeroBaseline) {
  RunSpec b, c;
  b.stages.push_back({"idle", StageKind::other, 0.0});
  c.stages = b.stages;
  c.seed = 2;
  CompareOptions o;
  o.warmup = 5;
  const Comparison cmp = compare_runs(make_run(b), make_run(c), o);
  EXPECT_EQ(cmp.baseline.warmup, 5);
  EXPECT_EQ(stage(cmp, "forward").baseline_steps, 25);
  EXPECT_EQ(stage(cmp, "idle").verdict, Verdict::same);
  EXPECT_EQ(stage(cmp, "idle").reason, "0 ms in both runs");
}

TEST(Compare, InvalidOptionsThrow) {
  RunProfile a, b;
  CompareOptions o;
  o.alpha = 0;
  EXPECT_THROW(compare_runs(a, b, o), std::invalid_argument);
  o = {};
  o.min_steps = 1;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = {};
  o.relative_threshold = -0.1;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = {};
  o.resamples = 10;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  EXPECT_THROW(RunProfile(RunProfile::Limits{4, 64}), std::invalid_argument);
}

TEST(RunProfile, KeepsABoundedSystematicSample) {
  RunSpec spec;
  spec.steps = 1000;
  spec.world = 4;
  const RunProfile p = make_run(spec, RunProfile::Limits{64, 16});
  EXPECT_EQ(p.windows(), 1000);
  EXPECT_EQ(p.ranks(), 4);
  EXPECT_EQ(p.world_size(), 4);
  EXPECT_EQ(p.first_step(), 0);
  EXPECT_EQ(p.last_step(), 9990);
  for (const auto& s : p.series()) {
    EXPECT_LE(s.window.size(), 64u);
    EXPECT_GE(s.window.size(), 32u);
    const std::uint32_t stride = s.window[1] - s.window[0];
    for (std::size_t i = 0; i < s.window.size(); ++i) EXPECT_EQ(s.window[i], i * stride);
    EXPECT_EQ(p.step_of(s.window[3]), 10 * static_cast<std::int64_t>(s.window[3]));
  }
  EXPECT_EQ(p.step_of(1), -1);  // not kept
  for (const auto& r : p.rank_series()) {
    EXPECT_LE(r.ms.size(), 16u);
    EXPECT_GE(r.ms.size(), 8u);
  }
  EXPECT_LE(p.step_time().window.size(), 64u);
  // Pipeline order.
  const auto ordered = p.ordered_series();
  ASSERT_EQ(ordered.size(), 5u);
  EXPECT_EQ(ordered[0]->stage, "dataloader");
  EXPECT_EQ(ordered[4]->stage, "optimizer");
}

// The pipeline order of stage names, the reference way (linear searches of a vector): a stage
// met for the first time goes right after the stage it follows in its sample, or first.
std::vector<std::string> reference_order(const std::vector<std::vector<std::string>>& samples) {
  std::vector<std::string> order;
  for (const auto& names : samples) {
    const std::string* previous = nullptr;
    for (const auto& name : names) {
      if (std::find(order.begin(), order.end(), name) == order.end()) {
        auto pos = order.begin();
        if (previous) pos = std::find(order.begin(), order.end(), *previous) + 1;
        order.insert(pos, name);
      }
      previous = &name;
    }
  }
  return order;
}

Window window_of(std::int64_t step, const std::vector<std::string>& names, int rank = 0,
                 const std::string& cohort = "") {
  Window w;
  w.step = step;
  StepSample s;
  s.rank = rank;
  s.world_size = rank + 1;
  s.step = step;
  s.cohort = cohort;
  for (const auto& n : names) s.stages.push_back({n, StageKind::compute, 1.0, 1});
  w.samples.push_back(std::move(s));
  return w;
}

TEST(RunProfile, StagesMetLaterFollowTheStageBeforeThem) {
  // Samples whose stage lists grow, shrink and reorder: new names in the middle, at the front,
  // after a name that is not new; the profile's order is the reference order.
  std::mt19937_64 rng(5);
  std::vector<std::vector<std::string>> samples;
  int next = 0;
  std::vector<std::string> known;
  for (int i = 0; i < 300; ++i) {
    std::vector<std::string> names;
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < n; ++k) {
      if (known.empty() || rng() % 3 == 0) {
        known.push_back("s" + std::to_string(next++));
        names.push_back(known.back());
      } else {
        const std::string& old = known[rng() % known.size()];
        if (std::find(names.begin(), names.end(), old) == names.end()) names.push_back(old);
      }
    }
    samples.push_back(names);
  }
  RunProfile p;
  for (std::size_t i = 0; i < samples.size(); ++i)
    p.add(window_of(static_cast<std::int64_t>(i), samples[i]));
  const std::vector<std::string> want = reference_order(samples);
  std::vector<std::string> got;
  for (const auto* s : p.ordered_series()) got.push_back(s->stage);
  EXPECT_EQ(got, want);

  // Cohorts: within a stage, in order of first appearance.
  RunProfile q;
  q.add(window_of(0, {"a", "b"}, 0, "tp"));
  q.add(window_of(1, {"b", "c"}, 0, "dp"));
  q.add(window_of(2, {"a"}, 0, "dp"));
  std::vector<std::string> labels;
  for (const auto* s : q.ordered_series()) labels.push_back(s->stage + "/" + s->cohort);
  EXPECT_EQ(labels, (std::vector<std::string>{"a/tp", "a/dp", "b/tp", "b/dp", "c/dp"}));
}

#if !defined(LAGGARD_TEST_SANITIZED)
// In a child process limited to 1 GB of address space: exits 0 when the profile was built.
void profile_one_high_rank_with_many_stages() {
  const rlimit limit{1ull << 30, 1ull << 30};
  setrlimit(RLIMIT_AS, &limit);
  std::vector<std::string> names;
  for (int i = 0; i < 2000; ++i) names.push_back("stage" + std::to_string(i));
  RunProfile p;
  p.add(window_of(0, names, (1 << 22) - 1));
  p.add(window_of(1, names, (1 << 22) - 1));
  const bool ok = p.rank_series().size() == 2000 && p.ordered_series().size() == 2000;
  std::exit(ok ? 0 : 3);
}

TEST(RunProfile, AHighRankWithManyStagesNeedsLittleMemory) {
  // One sample of rank 4,194,303 with 2,000 stages: a per-stage table indexed by rank took
  // 16 MB per stage (32 GB). The profile must build within 1 GB of address space.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(profile_one_high_rank_with_many_stages(), ::testing::ExitedWithCode(0), "");
}
#endif

TEST(Compare, TensOfThousandsOfStageNames) {
  // 40,000 stage names per run, 20,000 of them in both: every common one is compared (too few
  // steps here), the others listed, all in pipeline order. Linear searches made this take
  // 30 s; tests/cpp/CMakeLists.txt gives this test a generous time limit as a second guard.
  const int per_window = 400, windows = 100;
  RunProfile b, c;
  for (int w = 0; w < windows; ++w) {
    std::vector<std::string> nb, nc;
    for (int k = 0; k < per_window; ++k) {
      const int id = w * per_window + k;
      nb.push_back("stage" + std::to_string(id));
      nc.push_back("stage" + std::to_string(id + windows * per_window / 2));
    }
    b.add(window_of(10 * w, nb));
    c.add(window_of(10 * w, nc));
  }
  CompareOptions o;
  o.resamples = 100;
  const Comparison cmp = compare_runs(b, c, o);
  EXPECT_EQ(b.ordered_series().size(), 40000u);
  ASSERT_EQ(cmp.stages.size(), 20000u);
  EXPECT_EQ(cmp.only_in_baseline.size(), 20000u);
  EXPECT_EQ(cmp.only_in_current.size(), 20000u);
  // Each window's first stage goes first (it follows nothing), its others after it.
  EXPECT_EQ(cmp.stages.front().stage, "stage39600");
  EXPECT_EQ(cmp.stages[1].stage, "stage39601");
  EXPECT_EQ(cmp.only_in_baseline.front(), "stage19600");
  EXPECT_EQ(cmp.only_in_current.back(), "stage40399");
  for (const auto& s : cmp.stages) EXPECT_EQ(s.verdict, Verdict::unknown) << s.stage;
}

TEST(Verdict, Names) {
  EXPECT_STREQ(to_string(Verdict::regressed), "REGRESSED");
  EXPECT_STREQ(to_string(Verdict::same), "SAME");
  EXPECT_STREQ(to_string(Verdict::unknown), "UNKNOWN");
  EXPECT_STREQ(to_string(Verdict::improved), "IMPROVED");
}

}  // namespace
}  // namespace laggard
