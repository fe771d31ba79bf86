// The detector's per-column kernels (src/analysis/median.cc, column_kernels.cc) against plain
// reference computations, over sizes on both sides of the sampling threshold and inputs that
// defeat sampling or partitioning (sorted, all equal, two values, heavy tails).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "analysis/column_kernels.hpp"
#include "analysis/median.hpp"

namespace {

double reference_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Input {
  std::string name;
  std::function<double(std::size_t i, std::mt19937_64& rng)> make;
};

std::vector<Input> inputs() {
  return {
      {"uniform", [](std::size_t, std::mt19937_64& g) {
         return std::uniform_real_distribution<double>(10.0, 11.0)(g);
       }},
      {"ascending", [](std::size_t i, std::mt19937_64&) { return 5.0 + 0.001 * i; }},
      {"descending", [](std::size_t i, std::mt19937_64&) { return 100.0 - 0.001 * i; }},
      {"all_equal", [](std::size_t, std::mt19937_64&) { return 7.25; }},
      {"two_values", [](std::size_t i, std::mt19937_64&) { return i % 2 ? 3.0 : 4.0; }},
      {"few_distinct", [](std::size_t, std::mt19937_64& g) {
         return static_cast<double>(std::uniform_int_distribution<int>(0, 4)(g));
       }},
      {"heavy_tail", [](std::size_t, std::mt19937_64& g) {
         std::lognormal_distribution<double> d(0.0, 2.0);
         return d(g);
       }},
      {"slow_half", [](std::size_t i, std::mt19937_64& g) {
         return (i % 2 ? 30.0 : 10.0) + std::uniform_real_distribution<double>(0, 0.1)(g);
       }},
  };
}

const std::vector<std::size_t> kSizes = {1,    2,    3,    4,    5,     17,    24,    25,
                                          100,  2047, 2048, 2049, 4096, 16383, 16384, 16385};

TEST(Median, SampledEqualsSortedReference) {
  std::vector<double> scratch;
  for (const Input& in : inputs()) {
    for (std::size_t n : kSizes) {
      std::mt19937_64 rng(n * 7919 + in.name.size());
      std::vector<double> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = in.make(i, rng);
      const std::vector<double> before = v;
      const double expected = reference_median(v);
      EXPECT_EQ(laggard::detail::median_of(v.data(), n, scratch), expected)
          << in.name << " n=" << n;
      EXPECT_EQ(v, before) << "median_of must not reorder its input: " << in.name;
      std::vector<double> copy = v;
      EXPECT_EQ(laggard::detail::median_inplace(copy.data(), n), expected) << in.name;

      std::vector<double> dev(n);
      for (std::size_t i = 0; i < n; ++i) dev[i] = std::fabs(v[i] - expected);
      EXPECT_EQ(laggard::detail::median_abs_deviation(v.data(), n, expected, scratch),
                reference_median(dev))
          << in.name << " n=" << n;
    }
  }
}

TEST(Median, EmptyIsZero) {
  std::vector<double> scratch;
  EXPECT_EQ(laggard::detail::median_of(nullptr, 0, scratch), 0.0);
  EXPECT_EQ(laggard::detail::median_abs_deviation(nullptr, 0, 1.0, scratch), 0.0);
  EXPECT_EQ(laggard::detail::median_inplace(nullptr, 0), 0.0);
}

TEST(Median, TypicalIsTheMeanWithoutTheOuterFifths) {
  std::vector<double> scratch;
  EXPECT_EQ(laggard::detail::typical_of(nullptr, 0, scratch), 0.0);
  const double one[] = {2.5};
  EXPECT_DOUBLE_EQ(laggard::detail::typical_of(one, 1, scratch), 2.5);
  // Ten windows, three slow (1.5) and one pause (9.0): the highest two and the lowest two are
  // left out; the median (1.0) would not see the slowdown, the mean would count the pause.
  const double w[] = {1.0, 1.5, 1.0, 9.0, 1.0, 1.5, 1.0, 1.0, 1.5, 1.0};
  EXPECT_DOUBLE_EQ(laggard::detail::typical_of(w, 10, scratch), (4 * 1.0 + 2 * 1.5) / 6.0);
  EXPECT_EQ(w[3], 9.0);  // the data is left as it is
}

TEST(Median, OfFiveIsTheMiddleOfTheSortedFive) {
  // Every arrangement of five values from {0..4}, ties included (3125 of them), and random floats.
  std::array<float, 5> v{};
  for (int code = 0; code < 3125; ++code) {
    for (int i = 0, c = code; i < 5; ++i, c /= 5) v[i] = static_cast<float>(c % 5);
    std::array<float, 5> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(laggard::detail::median_of_5(v[0], v[1], v[2], v[3], v[4]), sorted[2]) << code;
  }
  std::mt19937_64 rng(5);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (int k = 0; k < 10000; ++k) {
    for (float& x : v) x = noise(rng);
    std::array<float, 5> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_EQ(laggard::detail::median_of_5(v[0], v[1], v[2], v[3], v[4]), sorted[2]);
  }
}

TEST(Median, ManyRandomLargeColumnsAgree) {
  // Enough draws that a sample missing the median (about 1 in 10^4) takes the fallback path.
  std::mt19937_64 rng(42);
  std::vector<double> scratch;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = 2048 + static_cast<std::size_t>(rng() % 6000);
    std::vector<double> v(n);
    std::normal_distribution<double> d(20.0, 1.0 + trial % 5);
    for (double& x : v) x = d(rng);
    if (trial % 3 == 0) std::sort(v.begin(), v.end());
    ASSERT_EQ(laggard::detail::median_of(v.data(), n, scratch), reference_median(v))
        << "trial " << trial;
  }
}

// The band pass and the selection have an SSE2/scalar, an AVX2 and an AVX-512 form (as far as
// the processor has them): each gives the sorted reference's values, ties, signed zeros, NaN
// and infinities included.
TEST(Median, EveryVectorWidthGivesTheSameValues) {
  std::vector<double> scratch;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<Input> all = inputs();
  all.push_back({"signed_zeros", [](std::size_t i, std::mt19937_64& g) {
                   return i % 3 == 0 ? -0.0 : i % 3 == 1 ? 0.0 : static_cast<double>(g() % 3);
                 }});
  all.push_back({"infinities", [inf](std::size_t, std::mt19937_64& g) {
                   const auto r = g() % 10;
                   return r == 0 ? inf : r == 1 ? -inf : 1.0 + 0.01 * static_cast<double>(r);
                 }});
  for (int width = 0; width <= 2; ++width) {
    const int before = laggard::detail::set_median_width(width);
    for (const Input& in : all) {
      for (std::size_t n : {65u, 100u, 999u, 2047u, 2048u, 5000u, 16384u}) {
        std::mt19937_64 rng(n * 31 + in.name.size() + static_cast<std::size_t>(width));
        std::vector<double> v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = in.make(i, rng);
        const std::vector<double> kept = v;
        const double expected = reference_median(v);
        const double got = laggard::detail::median_of(v.data(), n, scratch);
        if (std::isnan(expected))
          EXPECT_TRUE(std::isnan(got)) << in.name << " n=" << n << " width " << width;
        else
          EXPECT_EQ(got, expected) << in.name << " n=" << n << " width " << width;
        EXPECT_EQ(std::memcmp(v.data(), kept.data(), n * sizeof(double)), 0) << in.name;
        if (std::isfinite(expected)) {
          std::vector<double> dev(n);
          for (std::size_t i = 0; i < n; ++i) dev[i] = std::fabs(v[i] - expected);
          const double mad = laggard::detail::median_abs_deviation(v.data(), n, expected, scratch);
          const double want = reference_median(dev);
          if (std::isnan(want))
            EXPECT_TRUE(std::isnan(mad)) << in.name << " n=" << n << " width " << width;
          else
            EXPECT_EQ(mad, want) << in.name << " n=" << n << " width " << width;
        }
        std::vector<double> sorted = v;
        std::sort(sorted.begin(), sorted.end());
        for (std::size_t k : {std::size_t{0}, n / 4, n / 2, n - 1}) {
          double below = -1.0;
          EXPECT_EQ(laggard::detail::kth_of(v.data(), n, k, scratch), sorted[k])
              << in.name << " n=" << n << " k=" << k << " width " << width;
          if (k == 0) continue;
          EXPECT_EQ(laggard::detail::kth_of(v.data(), n, k, scratch, &below), sorted[k]);
          EXPECT_EQ(below, sorted[k - 1]) << in.name << " n=" << n << " k=" << k;
        }
        EXPECT_EQ(std::memcmp(v.data(), kept.data(), n * sizeof(double)), 0) << in.name;
      }
    }
    laggard::detail::set_median_width(before);
  }
}

// Up to 64 values, the selection sorts them with a network in AVX registers (median.cc); the
// 0-1 principle: a network that sorts every sequence of zeros and ones sorts everything, so
// random 0-1 inputs of every size find a wrong compare-exchange fast.
TEST(Kth, EverySizeAndRankPlacesTheOrderStatistic) {
  std::mt19937_64 rng(11);
  const double inf = std::numeric_limits<double>::infinity();
  for (int trial = 0; trial < 400; ++trial) {
    for (std::size_t n = 1; n <= 80; ++n) {
      std::vector<double> v(n);
      for (double& x : v) {
        switch (trial % 4) {
          case 0: x = static_cast<double>(rng() & 1); break;  // zeros and ones
          case 1: x = std::lognormal_distribution<double>(0.0, 2.0)(rng); break;
          case 2: x = static_cast<double>(rng() % 5) - 2.0; break;  // ties, +0 only
          default:
            x = rng() % 9 == 0 ? inf
                : rng() % 9 == 1 ? -inf
                                 : 0.25 * static_cast<double>(rng() % 7);
            break;
        }
      }
      std::vector<double> sorted = v;
      std::sort(sorted.begin(), sorted.end());
      const std::size_t k = rng() % n;
      std::vector<double> a = v;
      const double x = laggard::detail::kth_inplace(a.data(), n, k);
      ASSERT_EQ(x, sorted[k]) << "n=" << n << " k=" << k << " trial " << trial;
      ASSERT_EQ(a[k], x);
      for (std::size_t i = 0; i < k; ++i) ASSERT_LE(a[i], x) << "n=" << n << " i=" << i;
      for (std::size_t i = k; i < n; ++i) ASSERT_GE(a[i], x) << "n=" << n << " i=" << i;
      std::sort(a.begin(), a.end());
      ASSERT_EQ(a, sorted) << "the values are kept: n=" << n;
      std::vector<double> m = v;
      const double median = laggard::detail::median_inplace(m.data(), n);
      if (std::isnan(reference_median(v)))  // -inf and +inf in the middle
        ASSERT_TRUE(std::isnan(median)) << n;
      else
        ASSERT_EQ(median, reference_median(v)) << n;
    }
  }
}

TEST(Kth, NegativeZeroAndNaNKeepTheQuickselect) {
  // A negative zero (== +0, other bits) and a NaN (no order) are left to the quickselect: the
  // order statistics among signed zeros are still found, and a NaN loses no value.
  std::vector<double> v;
  for (int i = 0; i < 40; ++i) v.push_back(i % 3 == 0 ? -0.0 : (i % 3 == 1 ? 0.0 : 1.0 + i));
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t k : {5u, 26u, 27u, 30u}) {
    std::vector<double> a = v;
    EXPECT_EQ(laggard::detail::kth_inplace(a.data(), a.size(), k), sorted[k]) << k;
  }
  v[7] = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> c = v;
  laggard::detail::kth_inplace(c.data(), c.size(), 20);
  const auto nan_last = [](double x, double y) { return !std::isnan(x) && (std::isnan(y) || x < y); };
  std::sort(c.begin(), c.end(), nan_last);
  std::vector<double> d = v;
  std::sort(d.begin(), d.end(), nan_last);
  EXPECT_TRUE(std::isnan(c.back()));
  EXPECT_TRUE(std::equal(c.begin(), c.end() - 1, d.begin()));
}

TEST(ColumnExtent, MinMaxExactSumClose) {
  std::mt19937_64 rng(3);
  for (std::size_t n : kSizes) {
    std::vector<double> v(n);
    for (double& x : v) x = std::uniform_real_distribution<double>(1.0, 50.0)(rng);
    const laggard::detail::ColumnExtent e = laggard::detail::column_extent(v.data(), n);
    EXPECT_EQ(e.min, *std::min_element(v.begin(), v.end())) << n;
    EXPECT_EQ(e.max, *std::max_element(v.begin(), v.end())) << n;
    double sum = 0.0;
    for (double x : v) sum += x;
    EXPECT_NEAR(e.sum, sum, 1e-12 * sum) << n;
  }
  const double exact[] = {1.0, 2.0, 3.0, 4.0, 5.0};  // small integers sum exactly either way
  EXPECT_EQ(laggard::detail::column_extent(exact, 5).sum, 15.0);
}

TEST(FirstEqual, FindsTheFirstPositionOfAValueOrN) {
  for (const Input& in : inputs()) {
    std::mt19937_64 rng(11);
    for (std::size_t n : kSizes) {
      std::vector<double> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = in.make(i, rng);
      // The maximum (ties included: the first of them), and each of a few positions' values.
      const double hi = *std::max_element(v.begin(), v.end());
      EXPECT_EQ(laggard::detail::first_equal(v.data(), n, hi),
                static_cast<std::size_t>(std::find(v.begin(), v.end(), hi) - v.begin()))
          << in.name << " n " << n;
      for (std::size_t at : {std::size_t{0}, n / 3, n - 1}) {
        const auto expected = static_cast<std::size_t>(std::find(v.begin(), v.end(), v[at]) -
                                                       v.begin());
        EXPECT_EQ(laggard::detail::first_equal(v.data(), n, v[at]), expected)
            << in.name << " n " << n << " at " << at;
      }
      EXPECT_EQ(laggard::detail::first_equal(v.data(), n, -1.0), n) << in.name << " n " << n;
    }
  }
}

TEST(FlagSlow, SameAsTheScalarRule) {
  const double inf = std::numeric_limits<double>::infinity();
  std::mt19937_64 rng(9);
  struct Case {
    double ref, rel, abs, margin;
  };
  const Case cases[] = {
      {10.0, 12.0, 5.0, -inf},  // RFC: relative or absolute
      {10.0, 11.0, inf, 0.8},   // recommended: relative and the MAD margin
      {0.0, inf, 5.0, -inf},    // zero reference: only the absolute rule
      {10.0, 10.0, 0.0, -inf},  // any time above the reference
  };
  for (const Case& c : cases) {
    const laggard::detail::SlowRule rule{c.ref, c.rel, c.abs, c.margin};
    for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{1001}}) {
      std::vector<double> v(n);
      for (double& x : v) x = std::uniform_real_distribution<double>(0.0, 20.0)(rng);
      if (n > 2) v[1] = 12.0;  // exactly at the relative limit of the first case
      std::vector<int> expected, got;
      for (std::size_t i = 0; i < n; ++i)
        if (rule.slow(v[i])) expected.push_back(static_cast<int>(i));
      laggard::detail::flag_slow(v.data(), n, rule, got);
      EXPECT_EQ(got, expected) << "ref " << c.ref << " n " << n;
    }
  }
  // The boundary itself: t == ref * threshold is slow (>=), t == ref is not (>).
  const laggard::detail::SlowRule rule{10.0, 12.0, inf, -inf};
  const double at[] = {10.0, 12.0, 11.999999, 12.000001};
  std::vector<int> got;
  laggard::detail::flag_slow(at, 4, rule, got);
  EXPECT_EQ(got, (std::vector<int>{1, 3}));
}

// The MAD read off a sorted column (a merge of the deviations either side of the center) is
// the value the selection gives, bit for bit: every size 1-80, ties, heavy tails, huge values
// whose deviations overflow, centers inside and outside the values.
TEST(Mad, FromTheSortedValuesIsTheSelectedOne) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> scratch, copy;
  int sorted_cases = 0;
  for (int round = 0; round < 3000; ++round) {
    const std::size_t n = 1 + round % 80;
    std::vector<double> v(n);
    for (double& x : v) {
      const double r = u(rng);
      x = round % 4 == 0 ? std::floor(r * 5.0)                   // ties
          : round % 4 == 1 ? std::exp(8.0 * u(rng)) * (r - 0.3)  // heavy tails
          : round % 4 == 2 ? (r < 0.5 ? -1.7e308 : 1.6e308) * u(rng)
                           : r;
    }
    bool sorted = false;
    const double median = laggard::detail::median_of(v.data(), n, scratch, sorted);
    copy = v;
    EXPECT_EQ(median, laggard::detail::median_inplace(copy.data(), n));
    if (!sorted) continue;
    ASSERT_TRUE(std::is_sorted(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(n)));
    ++sorted_cases;
    for (double center : {median, 0.0, scratch[0] - 1.0, scratch[n - 1] + 1.0, scratch[n / 3]}) {
      std::vector<double> work;
      const double want = laggard::detail::median_abs_deviation(v.data(), n, center, work);
      const double got = laggard::detail::median_abs_deviation_sorted(scratch.data(), n, center);
      ASSERT_EQ(std::memcmp(&want, &got, sizeof want), 0) << n << " " << center;
    }
  }
  EXPECT_GT(sorted_cases, 2000);
}

}  // namespace
