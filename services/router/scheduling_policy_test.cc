#include "services/router/scheduling_policy.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

WorkerCandidate C(const char* address, int requests, int64_t tokens, bool healthy = true) {
  WorkerCandidate c;
  c.address = address;
  c.queued_requests = requests;
  c.queued_tokens = tokens;
  c.healthy = healthy;
  return c;
}

TEST(LeastPendingTokensPolicyTest, PicksFewestTokens) {
  LeastPendingTokensPolicy policy;
  std::vector<WorkerCandidate> c = {C("a", 1, 500), C("b", 5, 100), C("c", 0, 300)};
  EXPECT_EQ(policy.Choose(c, 10), 1);
}

TEST(LeastPendingTokensPolicyTest, TiesGoToFewestRequests) {
  LeastPendingTokensPolicy policy;
  std::vector<WorkerCandidate> c = {C("a", 3, 100), C("b", 1, 100), C("c", 2, 100)};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(policy.Choose(c, 10), 1);
}

TEST(LeastPendingTokensPolicyTest, FullTiesRotate) {
  LeastPendingTokensPolicy policy;
  std::vector<WorkerCandidate> c = {C("a", 1, 100), C("b", 1, 100), C("c", 1, 900)};
  std::set<int> chosen;
  for (int i = 0; i < 4; ++i) chosen.insert(policy.Choose(c, 10));
  EXPECT_EQ(chosen, (std::set<int>{0, 1}));
}

TEST(LeastPendingTokensPolicyTest, SkipsUnhealthy) {
  LeastPendingTokensPolicy policy;
  std::vector<WorkerCandidate> c = {C("a", 0, 0, false), C("b", 9, 900)};
  EXPECT_EQ(policy.Choose(c, 10), 1);
  c[1].healthy = false;
  EXPECT_EQ(policy.Choose(c, 10), -1);
  EXPECT_EQ(policy.Choose({}, 10), -1);
}

WorkerCandidate Cached(const char* address, int requests, int64_t tokens, int64_t cached) {
  WorkerCandidate c = C(address, requests, tokens);
  c.cached_tokens = cached;
  return c;
}

TEST(KvAwarePolicyTest, GoesWhereThePromptIsCachedUnlessTheQueueOutweighsIt) {
  KvAwarePolicy policy;
  EXPECT_TRUE(policy.prefix_aware());
  // A 1000-token prompt: b's store holds 800 of it, so b's expected work is 200 + 300 against a's
  // 1000 + 100 (Choose's request_tokens are the decode worker's: the tokens to generate).
  std::vector<WorkerCandidate> c = {Cached("a", 1, 100, 0), Cached("b", 3, 300, 800)};
  EXPECT_EQ(policy.Choose(c, 64), 1);
  c[1].queued_tokens = 950;  // 200 + 950 > 1100: the saving no longer pays for b's queue
  EXPECT_EQ(policy.Choose(c, 64), 0);
  c[1].healthy = false;
  c[0].healthy = false;
  EXPECT_EQ(policy.Choose(c, 64), -1);
}

TEST(KvAwarePolicyTest, WithoutCachedTokensChoosesAsLeastTokens) {
  KvAwarePolicy kv_aware;
  LeastPendingTokensPolicy least;
  EXPECT_FALSE(least.prefix_aware());
  const std::vector<WorkerCandidate> c = {C("a", 1, 500), C("b", 5, 100), C("c", 0, 300),
                                          C("d", 4, 100)};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(kv_aware.Choose(c, 64), least.Choose(c, 64));
}

TEST(RoundRobinPolicyTest, CyclesThroughHealthyIgnoringLoad) {
  RoundRobinPolicy policy;
  std::vector<WorkerCandidate> c = {C("a", 0, 0), C("b", 0, 0, false), C("c", 99, 9999)};
  std::vector<int> order;
  for (int i = 0; i < 4; ++i) order.push_back(policy.Choose(c, 10));
  EXPECT_EQ(order, (std::vector<int>{0, 2, 0, 2}));
}

TEST(MakeSchedulingPolicyTest, ByName) {
  auto least = MakeSchedulingPolicy("least-tokens");
  ASSERT_TRUE(least.ok());
  EXPECT_STREQ((*least)->name(), "least-tokens");
  auto rr = MakeSchedulingPolicy("round-robin");
  ASSERT_TRUE(rr.ok());
  EXPECT_STREQ((*rr)->name(), "round-robin");
  auto kv_aware = MakeSchedulingPolicy("kv-aware");
  ASSERT_TRUE(kv_aware.ok());
  EXPECT_STREQ((*kv_aware)->name(), "kv-aware");
  auto bad = MakeSchedulingPolicy("random");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("least-tokens"), absl::string_view::npos);
}

}  // namespace
}  // namespace pdserve
