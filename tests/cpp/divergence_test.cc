// The first divergent step of two runs: bit-exact and tolerant comparison, the step and rank
// found, the context around it, and the errors when there is nothing to compare.
#include "laggard/divergence.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "laggard/jsonl.hpp"

namespace laggard {
namespace {

// A run held in memory, window by window.
class VectorRun : public RunSource {
 public:
  explicit VectorRun(std::vector<Window> windows) : windows_(std::move(windows)) {}
  bool next(Window& out) override {
    if (at_ >= windows_.size()) return false;
    out = windows_[at_++];
    return true;
  }
  const RunStats& stats() const noexcept override { return stats_; }
  std::uint64_t bytes_read() const noexcept override { return 0; }
  std::uint64_t bytes_total() const noexcept override { return 0; }
  const std::vector<std::string>& files() const noexcept override { return files_; }
  RunFormat format() const noexcept override { return RunFormat::sample_logs; }

 private:
  std::vector<Window> windows_;
  std::size_t at_ = 0;
  RunStats stats_;
  std::vector<std::string> files_;
};

// `steps` windows of `ranks` ranks; value(step, rank) is the loss, grad_norm is step + rank.
template <typename F>
std::vector<Window> run(int steps, int ranks, F loss) {
  std::vector<Window> out;
  for (int step = 0; step < steps; ++step) {
    Window w;
    w.step = step;
    for (int r = 0; r < ranks; ++r) {
      StepSample s;
      s.rank = r;
      s.world_size = ranks;
      s.step = step;
      s.step_ms = 10.0 + step;
      s.stages.push_back({"forward", StageKind::compute, 5.0 + r, 1});
      s.values.push_back({"loss", loss(step, r)});
      s.values.push_back({"grad_norm", static_cast<double>(step + r)});
      w.samples.push_back(s);
    }
    out.push_back(w);
  }
  return out;
}

double base(int step, int rank) { return 1.0 / (1.0 + step) + 0.1 * rank; }

TEST(SameValue, BitForBitByDefault) {
  EXPECT_TRUE(same_value(0.1, 0.1, 0.0));
  EXPECT_FALSE(same_value(0.1, std::nextafter(0.1, 1.0), 0.0));
  EXPECT_FALSE(same_value(0.0, -0.0, 0.0));  // equal as numbers, not as bits
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(same_value(nan, -nan, 0.0));   // the log keeps no NaN payload or sign
  EXPECT_FALSE(same_value(nan, 1.0, 0.0));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(same_value(inf, inf, 0.0));
  EXPECT_FALSE(same_value(inf, -inf, 0.0));
}

TEST(SameValue, RelativeTolerance) {
  EXPECT_TRUE(same_value(1.0, 1.0 + 1e-10, 1e-9));
  EXPECT_FALSE(same_value(1.0, 1.0 + 1e-8, 1e-9));
  EXPECT_TRUE(same_value(0.0, -0.0, 1e-9));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(same_value(nan, nan, 1e-3));
  EXPECT_FALSE(same_value(nan, 1.0, 1e-3));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(same_value(inf, inf, 1e-3));
  EXPECT_FALSE(same_value(inf, 1e308, 1e-3));
}

TEST(Divergence, IdenticalRunsDoNotDiverge) {
  VectorRun a(run(20, 3, base)), b(run(20, 3, base));
  const DivergenceResult r = find_divergence(a, b);
  EXPECT_FALSE(r.diverged);
  EXPECT_EQ(r.steps_compared, 20u);
  EXPECT_EQ(r.values_compared, 20u * 3u * 2u);
}

TEST(Divergence, TheFirstStepAndTheLowestRankAreNamed) {
  // Rank 2 differs by one ulp from step 7, rank 1 from step 9: step 7, rank 2.
  auto changed = [](int step, int rank) {
    const double v = base(step, rank);
    if ((rank == 2 && step >= 7) || (rank == 1 && step >= 9)) return std::nextafter(v, 2.0);
    return v;
  };
  VectorRun a(run(20, 3, base)), b(run(20, 3, changed));
  const DivergenceResult r = find_divergence(a, b);
  ASSERT_TRUE(r.diverged);
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.value, "loss");
  EXPECT_EQ(r.a, base(7, 2));
  EXPECT_EQ(r.b, std::nextafter(base(7, 2), 2.0));
  EXPECT_EQ(r.steps_compared, 8u);  // steps 0..7
  // The context: steps 5..9 of rank 2, both sides.
  ASSERT_EQ(r.around.size(), 5u);
  EXPECT_EQ(r.around.front().step, 5);
  EXPECT_EQ(r.around.back().step, 9);
  for (const auto& c : r.around) {
    EXPECT_TRUE(c.in_a && c.in_b);
    EXPECT_EQ(c.a.rank, 2);
    EXPECT_EQ(c.b.find("forward")->ms, 7.0);
  }
}

TEST(Divergence, ToleranceSkipsRoundingAndFindsTheDrift) {
  auto drifting = [](int step, int rank) {
    const double v = base(step, rank);
    if (step < 4) return v;
    if (step < 12) return std::nextafter(v, 2.0);  // rounding only
    return v * (1.0 + 1e-6 * (step - 11));          // a drift
  };
  {
    VectorRun a(run(20, 2, base)), b(run(20, 2, drifting));
    EXPECT_EQ(find_divergence(a, b).step, 4);
  }
  {
    VectorRun a(run(20, 2, base)), b(run(20, 2, drifting));
    DivergenceOptions o;
    o.rtol = 1e-9;
    const DivergenceResult r = find_divergence(a, b, o);
    ASSERT_TRUE(r.diverged);
    EXPECT_EQ(r.step, 12);
    EXPECT_EQ(r.rank, 0);
    EXPECT_EQ(r.at_step.size(), 2u);  // both ranks drift
  }
}

TEST(Divergence, OneValueOnly) {
  // grad_norm differs at step 3 in run B, loss never: --value loss finds nothing.
  std::vector<Window> wb = run(10, 2, base);
  wb[3].samples[1].values[1].value += 1.0;
  {
    VectorRun a(run(10, 2, base)), b(wb);
    const DivergenceResult r = find_divergence(a, b);
    ASSERT_TRUE(r.diverged);
    EXPECT_EQ(r.value, "grad_norm");
    EXPECT_EQ(r.rank, 1);
  }
  VectorRun a(run(10, 2, base)), b(wb);
  DivergenceOptions o;
  o.value = "loss";
  EXPECT_FALSE(find_divergence(a, b, o).diverged);
}

TEST(Divergence, StepsAndRanksInOneRunOnlyAreCountedNotCompared) {
  std::vector<Window> wb = run(12, 2, base);
  wb.erase(wb.begin() + 5);               // step 5 missing in B
  wb[2].samples.pop_back();               // rank 1 missing at step 2 in B
  VectorRun a(run(10, 2, base)), b(wb);   // A ends at step 9, B at 11
  const DivergenceResult r = find_divergence(a, b);
  EXPECT_FALSE(r.diverged);
  EXPECT_EQ(r.steps_only_a, 1u);
  EXPECT_EQ(r.steps_only_b, 2u);
  EXPECT_EQ(r.ranks_only, 1u);
  EXPECT_EQ(r.steps_compared, 9u);
}

TEST(Divergence, NothingToCompareIsAnError) {
  auto no_values = run(5, 2, base);
  for (auto& w : no_values)
    for (auto& s : w.samples) s.values.clear();
  {
    VectorRun a(run(5, 2, base)), b(no_values);
    EXPECT_THROW(find_divergence(a, b), InputError);
  }
  {
    VectorRun a(run(5, 2, base)), b(run(5, 2, base));
    DivergenceOptions o;
    o.value = "tokens";
    try {
      find_divergence(a, b, o);
      FAIL() << "no error";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("recorded: grad_norm, loss"), std::string::npos)
          << e.what();
    }
  }
  {
    auto later = run(5, 2, base);
    for (auto& w : later) w.step += 100;
    VectorRun a(run(5, 2, base)), b(later);
    EXPECT_THROW(find_divergence(a, b), InputError);
  }
  {
    VectorRun a(run(5, 2, base)), b(run(5, 2, base));
    DivergenceOptions o;
    o.rtol = -1.0;
    EXPECT_THROW(find_divergence(a, b, o), InputError);
  }
}

}  // namespace
}  // namespace laggard
