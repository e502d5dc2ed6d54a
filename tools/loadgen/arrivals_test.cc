#include "tools/loadgen/arrivals.h"

#include <gtest/gtest.h>

#include <cmath>

namespace pdserve::loadgen {
namespace {

TEST(Arrivals, PoissonGapsHaveMeanAndSpreadOfTheRate) {
  const int n = 20000;
  const std::vector<double> t = ArrivalOffsets(ArrivalProcess::kPoisson, 10.0, n, 7);
  ASSERT_EQ(t.size(), static_cast<size_t>(n));
  EXPECT_EQ(t[0], 0);
  double sum = 0, sum2 = 0;
  for (int i = 1; i < n; ++i) {
    const double gap = t[i] - t[i - 1];
    ASSERT_GE(gap, 0);
    sum += gap;
    sum2 += gap * gap;
  }
  const double mean = sum / (n - 1);
  const double sd = std::sqrt(sum2 / (n - 1) - mean * mean);
  EXPECT_NEAR(mean, 0.1, 0.003);      // ~4 standard errors
  EXPECT_NEAR(sd / mean, 1.0, 0.04);  // exponential: coefficient of variation 1
  EXPECT_EQ(ArrivalOffsets(ArrivalProcess::kPoisson, 10.0, n, 7), t);
  EXPECT_NE(ArrivalOffsets(ArrivalProcess::kPoisson, 10.0, n, 8), t);
}

TEST(Arrivals, FixedIsEvenlySpaced) {
  const std::vector<double> t = ArrivalOffsets(ArrivalProcess::kFixed, 4.0, 5, 1);
  ASSERT_EQ(t.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_DOUBLE_EQ(t[i], 0.25 * i);
}

TEST(Arrivals, ParsesNames) {
  EXPECT_EQ(*ParseArrivalProcess("poisson"), ArrivalProcess::kPoisson);
  EXPECT_EQ(*ParseArrivalProcess("fixed"), ArrivalProcess::kFixed);
  absl::StatusOr<ArrivalProcess> bad = ParseArrivalProcess("gamma");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("--arrival"), std::string::npos);
}

}  // namespace
}  // namespace pdserve::loadgen
