#include "laggard/onset.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include "laggard/detail/onset_columns.hpp"
#include "laggard/summary.hpp"

namespace laggard {
namespace {

// Feeds values[i] as step 10*i (log taken here) and returns the detector.
OnsetDetector feed(const std::vector<double>& values, double cap = OnsetDetector::kNoCap,
                   OnsetOptions options = {}) {
  OnsetDetector d(options, cap);
  for (std::size_t i = 0; i < values.size(); ++i)
    d.add(10 * static_cast<std::int64_t>(i), std::log(values[i]));
  return d;
}

std::vector<double> noisy(int n, double level, double sd, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(1.0, sd);
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(level * noise(rng));
  return v;
}

TEST(Onset, StepChangeIsFoundWhereItBegan) {
  auto v = noisy(40, 100.0, 0.02, 1);
  for (std::size_t i = 20; i < v.size(); ++i) v[i] *= 1.3;
  const OnsetDetector d = feed(v);
  ASSERT_TRUE(d.onset().has_value());
  EXPECT_EQ(*d.onset(), 200);
  EXPECT_NEAR(d.baseline(), 100.0, 3.0);
  EXPECT_NEAR(d.since(), 130.0, 4.0);
}

TEST(Onset, FoundOnlineWithinAFewValues) {
  // The running median of 5 dates a value 2 steps back, and 3 high medians confirm: the 5th slow
  // value confirms the shift, dated at its first step.
  auto v = noisy(25, 100.0, 0.02, 2);
  for (std::size_t i = 20; i < v.size(); ++i) v[i] *= 1.3;
  const auto d = feed(v);
  ASSERT_TRUE(d.onset().has_value());
  EXPECT_EQ(*d.onset(), 200);
  v.pop_back();  // four slow values are not yet a persistent shift
  EXPECT_FALSE(feed(v).onset().has_value());
}

TEST(Onset, SpikesThatRevertAreNotChanges) {
  auto v = noisy(60, 100.0, 0.02, 3);
  v[15] *= 3.0;  // a single spike
  v[30] *= 2.0;  // two in a row
  v[31] *= 2.0;
  v[45] *= 1.5;  // and one more later, after recovery
  EXPECT_FALSE(feed(v).onset().has_value());
}

TEST(Onset, NoiseAloneGivesNoOnset) {
  // 3% noise: a 10% shift is > 3 sigma. (At 5% noise a baseline of 8 values sometimes sits 2 sigma
  // low and a later level looks like a shift: bench/compare_quality.cc measures that rate.)
  for (std::uint64_t seed = 10; seed < 40; ++seed)
    EXPECT_FALSE(feed(noisy(300, 100.0, 0.03, seed)).onset().has_value()) << "seed " << seed;
}

TEST(Onset, SmallShiftBelowMinShiftIsIgnored) {
  auto v = noisy(80, 100.0, 0.005, 4);
  for (std::size_t i = 40; i < v.size(); ++i) v[i] *= 1.03;  // 3% < min_shift / 2
  EXPECT_FALSE(feed(v).onset().has_value());
}

TEST(Onset, WarmupAtTheStartIsNoOnsetWithoutACap) {
  auto v = noisy(40, 100.0, 0.02, 5);
  for (int i = 0; i < 3; ++i) v[static_cast<std::size_t>(i)] *= 2.0;  // slow first steps
  EXPECT_FALSE(feed(v).onset().has_value());
  for (std::size_t i = 25; i < v.size(); ++i) v[i] *= 1.4;  // a real slowdown later
  const auto d = feed(v);
  ASSERT_TRUE(d.onset().has_value());
  EXPECT_EQ(*d.onset(), 250);
}

TEST(Onset, RelativeSeriesSlowFromTheStartHasItsOnsetThere) {
  // log(t / ref) of a rank that was 1.5x its cohort's reference from the first step: the cohort
  // is the healthy level (cap 0), so the onset is the first step.
  std::vector<double> v(20, 1.5);
  const auto d = feed(v, 0.0);
  ASSERT_TRUE(d.onset().has_value());
  EXPECT_EQ(*d.onset(), 0);
  // Without the cap it is the series' own level: nothing changed.
  EXPECT_FALSE(feed(v).onset().has_value());
}

TEST(Onset, ShiftInsideTheBaselineWindowsIsStillFoundWithACap) {
  std::vector<double> v = {1.0, 1.01, 0.99, 1.5, 1.5, 1.52, 1.49, 1.5, 1.5, 1.51};
  const auto d = feed(v, 0.0);
  ASSERT_TRUE(d.onset().has_value());
  EXPECT_EQ(*d.onset(), 30);
}

TEST(Onset, FewValuesUseTheBaselineTheyGive) {
  OnsetDetector d(OnsetOptions{}, 0.0);
  d.add(0, std::log(1.0));
  d.add(1, std::log(1.0));
  EXPECT_FALSE(d.onset().has_value());
  EXPECT_TRUE(std::isnan(d.baseline()));
  for (int i = 2; i < 7; ++i) d.add(i, std::log(2.0));
  // 7 values: medians dated 0..4 (1, 1, 2, 2, 2): a baseline from 5 values, capped at 0.
  EXPECT_EQ(d.values(), 5);
  ASSERT_TRUE(d.onset().has_value());
  EXPECT_EQ(*d.onset(), 2);
  d.add(7, std::nan(""));  // ignored
  EXPECT_EQ(d.values(), 5);
}

TEST(Onset, InvalidOptionsThrow) {
  OnsetOptions o;
  o.baseline_windows = 2;
  EXPECT_THROW(OnsetDetector(o, 0.0), std::invalid_argument);
  o = {};
  o.baseline_windows = OnsetDetector::kMaxBaseline + 1;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = {};
  o.persist_windows = 0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = {};
  o.min_shift = 0.0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = {};
  o.threshold = -1.0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
}

TEST(Onset, DetectorIsSmall) {
  // One per rank and stage in RunAnalysis: keep it a fixed, small object.
  EXPECT_LE(sizeof(OnsetDetector), 320u);
}

// OnsetColumns steps many series together: every series must end where its own OnsetDetector
// does, bit for bit, whatever its values (noise from 1e-5 to 0.5, shifts, spikes, quantized
// values, gaps, non-finite values, two values in one window) and options.
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(OnsetColumns, EverySeriesEndsAsItsOwnDetectorDoes) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> z(0.0, 1.0);
  int checked = 0, found = 0;
  for (int config = 0; config < 24; ++config) {
    OnsetOptions o;
    o.baseline_windows = 3 + config % 6;
    o.persist_windows = 1 + config % 4;
    o.threshold = config % 3 == 0 ? 2.0 : 5.0;
    const double shifts[] = {1e-6, 0.01, 0.1, 1.0};
    o.min_shift = shifts[config % 4];
    const double cap = config % 5 == 0 ? OnsetDetector::kNoCap : 0.0;
    const int series = 1 + config * 3;  // not all multiples of 4
    detail::OnsetColumns columns(o, cap);
    std::vector<OnsetDetector> own;
    std::vector<double> sd, rise;
    std::vector<int> onset_at;
    std::vector<bool> quantized;
    for (int i = 0; i < series; ++i) {
      EXPECT_EQ(columns.add_series(), i);
      own.emplace_back(o, cap);
      sd.push_back(std::pow(10.0, -5.0 + 4.7 * u(rng)));
      rise.push_back(u(rng) < 0.5 ? 0.0 : std::log(1.0 + 2.0 * u(rng) * o.min_shift + 0.05));
      onset_at.push_back(static_cast<int>(400 * u(rng)));
      quantized.push_back(u(rng) < 0.2);
    }
    for (int w = 0; w < 400; ++w) {
      const std::int64_t step = 10 * w + (config % 2 ? 1000000000LL : 0);
      for (int i = 0; i < series; ++i) {
        if (u(rng) < 0.08) continue;  // a gap
        const int copies = u(rng) < 0.03 ? 2 : 1;
        for (int c = 0; c < copies; ++c) {
          double v = sd[i] * z(rng) + (w >= onset_at[i] ? rise[i] : 0.0);
          if (u(rng) < 0.02) v += 1.0;  // a spike
          if (quantized[i]) v = std::round(v * 100.0) / 100.0;  // ties, zeros
          if (u(rng) < 0.01) v = u(rng) < 0.5 ? std::nan("") : HUGE_VAL;
          columns.stage(i, step, v);
          own[i].add(step, v);
        }
      }
      if (w % 3 == 0 && u(rng) < 0.5) {
        // A series staged at the next step: the window before is added first.
        columns.stage(0, step + 5, 0.25);
        own[0].add(step + 5, 0.25);
      }
      columns.add_window();
      if (w % 37 != 36 && w != 399) continue;
      for (int i = 0; i < series; ++i) {
        const OnsetDetector d = columns.detector(i);
        ASSERT_EQ(d.values(), own[i].values()) << config << " " << i << " " << w;
        ASSERT_EQ(d.onset(), own[i].onset()) << config << " " << i << " " << w;
        ASSERT_TRUE(same_bits(d.baseline(), own[i].baseline())) << config << " " << i << " " << w;
        ASSERT_TRUE(same_bits(d.since(), own[i].since())) << config << " " << i << " " << w;
        ++checked;
        found += d.onset().has_value();
      }
    }
  }
  EXPECT_GT(checked, 5000);
  EXPECT_GT(found, 500);  // both kinds of series were exercised
  EXPECT_LT(found, checked - 500);
}

// RunAnalysis: a straggler's onset and the job's step-time onset.
Window window(std::int64_t step, const std::vector<double>& forward) {
  Window w;
  w.step = step;
  double slowest = 0.0;
  for (double f : forward) slowest = std::max(slowest, f);
  for (std::size_t r = 0; r < forward.size(); ++r) {
    StepSample s;
    s.rank = static_cast<int>(r);
    s.world_size = static_cast<int>(forward.size());
    s.step = step;
    s.cohort = "dp";
    const double comm = 5.0 + slowest - forward[r];
    s.stages = {{"forward", StageKind::compute, forward[r], 1},
                {"communication", StageKind::communication, comm, 1}};
    s.step_ms = forward[r] + comm;
    w.samples.push_back(s);
  }
  return w;
}

TEST(RunAnalysisOnset, StragglerAndStepTimeOnsets) {
  RunAnalysis analysis;
  std::mt19937_64 rng(9);
  std::normal_distribution<double> noise(1.0, 0.01);
  for (int i = 0; i < 30; ++i) {
    std::vector<double> f;
    for (int r = 0; r < 4; ++r) f.push_back(60.0 * noise(rng) * (r == 2 && i >= 12 ? 1.5 : 1.0));
    analysis.add(window(10 * i, f));
  }
  const RunSummary s = analysis.summary();
  ASSERT_EQ(s.stragglers.size(), 1u);
  EXPECT_EQ(s.stragglers[0].rank, 2);
  ASSERT_TRUE(s.stragglers[0].onset_step.has_value());
  EXPECT_EQ(*s.stragglers[0].onset_step, 120);
  ASSERT_TRUE(s.step_time_onset.has_value());
  EXPECT_EQ(*s.step_time_onset, 120);
  EXPECT_NEAR(s.step_time_before_ms, 66.0, 2.0);
  EXPECT_NEAR(s.step_time_since_ms, 95.0, 3.0);
  EXPECT_EQ(analysis.onset("dp", "forward", 2), s.stragglers[0].onset_step);
  EXPECT_FALSE(analysis.onset("dp", "forward", 0).has_value());
  EXPECT_FALSE(analysis.onset("dp", "communication", 0).has_value());  // waiting: not tracked
  EXPECT_FALSE(analysis.onset("nope", "forward", 2).has_value());
}

// A copy, a moved-to and a reused moved-from analysis each go on with onsets of their own (the
// stages' onsets are found by position from the window before, which must not lead one object
// into another's).
TEST(RunAnalysisOnset, CopiesAndMovesKeepTheirOwnOnsets) {
  std::mt19937_64 rng(12);
  std::normal_distribution<double> noise(1.0, 0.01);
  auto forward = [&](int i, int slow_rank) {
    std::vector<double> f;
    for (int r = 0; r < 4; ++r)
      f.push_back(60.0 * noise(rng) * (r == slow_rank && i >= 20 ? 1.5 : 1.0));
    return f;
  };
  RunAnalysis first;
  for (int i = 0; i < 12; ++i) first.add(window(10 * i, forward(i, -1)));
  RunAnalysis copy = first;
  RunAnalysis moved = std::move(first);
  first = RunAnalysis();  // reused after the move
  for (int i = 12; i < 40; ++i) {
    copy.add(window(10 * i, forward(i, 1)));
    moved.add(window(10 * i, forward(i, 3)));
    first.add(window(10 * i, forward(i, 2)));
  }
  EXPECT_EQ(copy.onset("dp", "forward", 1), std::optional<std::int64_t>(200));
  EXPECT_FALSE(copy.onset("dp", "forward", 3).has_value());
  EXPECT_EQ(moved.onset("dp", "forward", 3), std::optional<std::int64_t>(200));
  EXPECT_FALSE(moved.onset("dp", "forward", 1).has_value());
  EXPECT_EQ(first.onset("dp", "forward", 2), std::optional<std::int64_t>(200));
  EXPECT_FALSE(first.onset("dp", "forward", 1).has_value());
}

TEST(RunAnalysisOnset, HealthyRunHasNoOnsets) {
  RunAnalysis analysis;
  std::mt19937_64 rng(10);
  std::normal_distribution<double> noise(1.0, 0.02);
  for (int i = 0; i < 50; ++i) {
    std::vector<double> f;
    for (int r = 0; r < 4; ++r) f.push_back(60.0 * noise(rng));
    analysis.add(window(i, f));
  }
  const RunSummary s = analysis.summary();
  EXPECT_TRUE(s.stragglers.empty());
  EXPECT_FALSE(s.step_time_onset.has_value());
  EXPECT_NEAR(s.step_time_before_ms, 67.0, 3.0);
  EXPECT_TRUE(std::isnan(s.step_time_since_ms));
}

}  // namespace
}  // namespace laggard
