// Tests for first_regression, the lesson's first-regressed-stage rule.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "laggard/detector.hpp"

namespace laggard {
namespace {

TEST(FirstRegression, LessonExampleFindsTheFirstStage) {
  const auto r = first_regression({1, 2, 3}, {1, 2.5, 3.8});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->index, 1u);  // stage 2 is later, a likely victim
  EXPECT_DOUBLE_EQ(r->delta, 0.5);
}

TEST(FirstRegression, LessonExampleWithinThreshold) {
  EXPECT_FALSE(first_regression({1, 2}, {1.01, 2.01}).has_value());
}

TEST(FirstRegression, ExactlyAtTheLimitIsNotARegression) {
  const double before = 2.0;
  const double limit = before * (1.0 + 0.05);
  EXPECT_FALSE(first_regression({before}, {limit}).has_value());
  const auto r = first_regression({before}, {std::nextafter(limit, 10.0)});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->index, 0u);
}

TEST(FirstRegression, ZeroBaselineUsesTheThresholdAsAbsolute) {
  EXPECT_FALSE(first_regression({0.0}, {0.05}).has_value());
  const auto r = first_regression({0.0}, {0.0501});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->index, 0u);
  EXPECT_DOUBLE_EQ(r->delta, 0.0501);
}

TEST(FirstRegression, CustomThreshold) {
  EXPECT_FALSE(first_regression({10, 10}, {10, 12}, 0.2).has_value());
  const auto r = first_regression({10, 10}, {10, 12.5}, 0.2);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->index, 1u);
  EXPECT_DOUBLE_EQ(r->delta, 2.5);
  EXPECT_FALSE(first_regression({1, 2}, {1, 2}, 0.0).has_value());  // equal is never after > limit
}

TEST(FirstRegression, FasterIsNotARegression) {
  EXPECT_FALSE(first_regression({5, 5, 5}, {1, 2, 3}).has_value());
}

TEST(FirstRegression, UnequalLengthsNameBothLengths) {
  try {
    first_regression({1, 2, 3}, {1, 2});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find('3'), std::string::npos) << what;
    EXPECT_NE(what.find('2'), std::string::npos) << what;
  }
  EXPECT_THROW(first_regression({}, {1.0}), std::invalid_argument);
}

TEST(FirstRegression, NegativeThresholdIsRejected) {
  EXPECT_THROW(first_regression({1}, {1}, -0.1), std::invalid_argument);
  EXPECT_THROW(first_regression({1}, {1}, std::nan("")), std::invalid_argument);
}

TEST(FirstRegression, EmptyVectorsHaveNoRegression) {
  EXPECT_FALSE(first_regression({}, {}).has_value());
}

}  // namespace
}  // namespace laggard
