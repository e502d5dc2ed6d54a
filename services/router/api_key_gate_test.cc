#include "services/router/api_key_gate.h"

#include <utility>

#include "gtest/gtest.h"
#include "proto/retry_hint.h"

namespace pdserve {
namespace {

constexpr char kKeyA[] = "Bearer sk-key-aaaa";
constexpr char kKeyB[] = "Bearer sk-key-bbbb";

ApiKeyGate MakeGate(ApiKeyLimits limits) {
  return ApiKeyGate(*BearerKeys::Create({"sk-key-aaaa", "sk-key-bbbb"}), limits);
}

TEST(ApiKeyGateTest, OpenGateAdmitsAnyoneWithoutCounting) {
  ApiKeyGate gate(BearerKeys(), ApiKeyLimits{1, 1});
  const absl::Time now = absl::Now();
  absl::StatusOr<ApiKeyGate::Ticket> a = gate.Admit("", now);
  absl::StatusOr<ApiKeyGate::Ticket> b = gate.Admit("Bearer whatever", now);
  EXPECT_TRUE(a.ok());
  EXPECT_TRUE(b.ok());
  EXPECT_TRUE(gate.Authenticate("").ok());
}

TEST(ApiKeyGateTest, RefusesMissingAndWrongKeysAsUnauthenticated) {
  ApiKeyGate gate = MakeGate({});
  EXPECT_EQ(gate.Admit("", absl::Now()).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(gate.Admit("Bearer sk-key-cccc", absl::Now()).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(gate.Authenticate("Bearer sk-key-cccc").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(gate.Authenticate(kKeyB).ok());
  EXPECT_TRUE(gate.Admit(kKeyA, absl::Now()).ok());
}

TEST(ApiKeyGateTest, StreamsAreLimitedPerKeyAndReturnedByTheTicket) {
  ApiKeyGate gate = MakeGate({.max_streams = 2});
  const absl::Time now = absl::Now();
  absl::StatusOr<ApiKeyGate::Ticket> first = gate.Admit(kKeyA, now);
  absl::StatusOr<ApiKeyGate::Ticket> second = gate.Admit(kKeyA, now);
  ASSERT_TRUE(first.ok() && second.ok());
  absl::StatusOr<ApiKeyGate::Ticket> third = gate.Admit(kKeyA, now);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RetryHint(third.status()), absl::Seconds(1));
  EXPECT_TRUE(gate.Admit(kKeyB, now).ok());  // the other key has its own streams

  ApiKeyGate::Ticket moved = *std::move(first);  // moving does not release
  EXPECT_FALSE(gate.Admit(kKeyA, now).ok());
  { ApiKeyGate::Ticket released = std::move(moved); }
  EXPECT_TRUE(gate.Admit(kKeyA, now).ok());
}

TEST(ApiKeyGateTest, TokensPerMinuteRefuseWhileInDebtAndSayWhenItIsRepaid) {
  ApiKeyGate gate = MakeGate({.tokens_per_minute = 600});  // 10 tokens a second
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  {
    absl::StatusOr<ApiKeyGate::Ticket> ticket = gate.Admit(kKeyA, t0);
    ASSERT_TRUE(ticket.ok());
    ticket->Charge(900, t0);  // one request may overdraw: 300 tokens in debt
  }
  absl::StatusOr<ApiKeyGate::Ticket> refused = gate.Admit(kKeyA, t0 + absl::Seconds(10));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RetryHint(refused.status()),
            absl::Seconds(20));             // 200 tokens of debt left at 10 a second
  EXPECT_TRUE(gate.Admit(kKeyB, t0).ok());  // key B's bucket is its own
  EXPECT_TRUE(gate.Admit(kKeyA, t0 + absl::Seconds(30)).ok());
}

TEST(ApiKeyGateTest, TheBucketHoldsAtMostAMinutesTokens) {
  ApiKeyGate gate = MakeGate({.tokens_per_minute = 60});
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  absl::StatusOr<ApiKeyGate::Ticket> ticket = gate.Admit(kKeyA, t0);
  ASSERT_TRUE(ticket.ok());
  // An hour idle refills one minute's worth, not sixty.
  ticket->Charge(61, t0 + absl::Hours(1));
  const absl::Status refused = gate.Admit(kKeyA, t0 + absl::Hours(1)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RetryHint(refused), absl::Seconds(1));
}

// The router rereads its key file on SIGHUP: kept keys keep their requests in flight and buckets,
// dropped keys are refused at once (their requests in flight run to their end), new keys start
// fresh; no keys at all, or a gate started open, refuse the reload and keep what they had.
TEST(ApiKeyGateTest, ReloadKeepsTheStateOfKeptKeysAndDropsTheRest) {
  ApiKeyGate gate = MakeGate({.max_streams = 1});
  const absl::Time now = absl::Now();
  absl::StatusOr<ApiKeyGate::Ticket> a = gate.Admit(kKeyA, now);
  absl::StatusOr<ApiKeyGate::Ticket> b = gate.Admit(kKeyB, now);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(gate.Reload(*BearerKeys::Create({"sk-key-cccc", "sk-key-aaaa"})).ok());
  EXPECT_EQ(gate.Admit(kKeyA, now).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(gate.Admit(kKeyB, now).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(gate.Authenticate(kKeyB).code(), absl::StatusCode::kUnauthenticated);
  absl::StatusOr<ApiKeyGate::Ticket> c = gate.Admit("Bearer sk-key-cccc", now);
  EXPECT_TRUE(c.ok()) << c.status();
  *b = ApiKeyGate::Ticket();  // a dropped key's request ends
  *a = ApiKeyGate::Ticket();
  EXPECT_TRUE(gate.Admit(kKeyA, now).ok());

  const absl::Status empty = gate.Reload(BearerKeys());
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument) << empty;
  EXPECT_TRUE(gate.Authenticate(kKeyA).ok());  // the keys it had stay
  EXPECT_EQ(gate.Authenticate("").code(), absl::StatusCode::kUnauthenticated);

  ApiKeyGate open(BearerKeys(), {});
  EXPECT_EQ(open.Reload(*BearerKeys::Create({"sk-key-aaaa"})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(open.Admit("", now).ok());
}

TEST(ApiKeyGateTest, LimitsMustNotBeNegative) {
  EXPECT_FALSE((ApiKeyLimits{-1, 0}).Validate().ok());
  EXPECT_FALSE((ApiKeyLimits{0, -5}).Validate().ok());
  EXPECT_FALSE((ApiKeyLimits{0, int64_t{2'000'000'000'000}}).Validate().ok());
  EXPECT_TRUE((ApiKeyLimits{0, 0}).Validate().ok());
}

}  // namespace
}  // namespace pdserve
