#include "client/retry_policy.h"

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(RetryPolicyTest, BacksOffExponentiallyUpToTheCap) {
  RetryPolicy p;
  p.jitter = 0;
  EXPECT_EQ(RetryDelay(p, 0, std::nullopt, 0.5), absl::Milliseconds(500));
  EXPECT_EQ(RetryDelay(p, 1, std::nullopt, 0.5), absl::Seconds(1));
  EXPECT_EQ(RetryDelay(p, 3, std::nullopt, 0.5), absl::Seconds(4));
  EXPECT_EQ(RetryDelay(p, 4, std::nullopt, 0.5), absl::Seconds(8));
  EXPECT_EQ(RetryDelay(p, 60, std::nullopt, 0.5), absl::Seconds(8));
}

TEST(RetryPolicyTest, HonoursTheServersHintWithinItsCap) {
  RetryPolicy p;
  p.jitter = 0;
  EXPECT_EQ(RetryDelay(p, 5, absl::Milliseconds(1200), 0.9), absl::Milliseconds(1200));
  EXPECT_EQ(RetryDelay(p, 0, absl::ZeroDuration(), 0.9), absl::ZeroDuration());
  // A hint beyond max_hint (60 s) is not waited for: the backoff applies.
  EXPECT_EQ(RetryDelay(p, 0, absl::Seconds(600), 0.9), absl::Milliseconds(500));
}

TEST(RetryPolicyTest, JitterOnlyLengthensTheWait) {
  RetryPolicy p;  // jitter 0.25
  EXPECT_EQ(RetryDelay(p, 0, absl::Seconds(1), 0.0), absl::Seconds(1));
  EXPECT_EQ(RetryDelay(p, 0, absl::Seconds(1), 1.0), absl::Milliseconds(1250));
  for (int i = 0; i < 100; ++i) {
    const double u = RetryJitter();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(RetryPolicyTest, CountsRetriesUnlessUnbounded) {
  RetryPolicy p;
  p.max_retries = 2;
  EXPECT_TRUE(p.MayRetry(1));
  EXPECT_FALSE(p.MayRetry(2));
  p.max_retries = 0;
  EXPECT_FALSE(p.MayRetry(0));
  p.max_retries = -1;
  EXPECT_TRUE(p.MayRetry(100000));
}

TEST(RetryPolicyTest, NextRetryWaitStopsAtTheCountAndTheDeadline) {
  RetryPolicy p;
  p.max_retries = 1;
  const absl::Time far = absl::Now() + absl::Hours(1);
  std::optional<absl::Duration> wait = NextRetryWait(p, 0, absl::Seconds(2), far);
  ASSERT_TRUE(wait.has_value());
  EXPECT_GE(*wait, absl::Seconds(2));
  EXPECT_LE(*wait, absl::Milliseconds(2500));
  EXPECT_EQ(NextRetryWait(p, 1, absl::Seconds(2), far), std::nullopt);  // no retries left
  EXPECT_EQ(NextRetryWait(p, 0, absl::Seconds(2), absl::Now() + absl::Seconds(1)), std::nullopt);
}

TEST(RetryPolicyTest, ValidateNamesTheBadField) {
  EXPECT_TRUE(RetryPolicy().Validate().ok());
  RetryPolicy p;
  p.max_retries = -2;
  EXPECT_NE(p.Validate().message().find("max_retries"), std::string::npos);
  p = RetryPolicy();
  p.max_backoff = absl::Milliseconds(1);
  EXPECT_NE(p.Validate().message().find("max_backoff"), std::string::npos);
  p = RetryPolicy();
  p.jitter = 2;
  EXPECT_NE(p.Validate().message().find("jitter"), std::string::npos);
}

}  // namespace
}  // namespace pdserve
