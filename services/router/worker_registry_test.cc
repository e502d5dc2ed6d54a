#include "services/router/worker_registry.h"

#include "gtest/gtest.h"

namespace pdserve {
namespace {

class WorkerRegistryTest : public ::testing::Test {
 protected:
  WorkerRegistryTest() : registry_(MakeOptions(&now_)) {}
  static WorkerRegistry::Options MakeOptions(absl::Time* now) {
    WorkerRegistry::Options o;
    o.heartbeat_interval = absl::Seconds(1);
    o.missed_heartbeats = 3;
    o.silence_limit = absl::Seconds(30);
    o.now = [now] { return *now; };
    return o;
  }
  static WorkerLoad Load(int requests, int64_t tokens) {
    WorkerLoad l;
    l.queued_requests = requests;
    l.queued_tokens = tokens;
    return l;
  }
  const WorkerSnapshot* Find(const std::vector<WorkerSnapshot>& list, const std::string& a) {
    for (const WorkerSnapshot& s : list) {
      if (s.address == a) return &s;
    }
    return nullptr;
  }
  bool Healthy(const std::string& address) {
    auto list = registry_.List();
    const WorkerSnapshot* s = Find(list, address);
    return s != nullptr && s->healthy;
  }
  WorkerHealth Health(const std::string& address) {
    auto list = registry_.List();
    const WorkerSnapshot* s = Find(list, address);
    EXPECT_NE(s, nullptr) << address;
    return s != nullptr ? s->health : WorkerHealth::kDead;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  WorkerRegistry registry_;
  LeastPendingTokensPolicy policy_;
};

// A busy worker's heartbeats come late: it is late, still routed to, and a heartbeat revives it.
TEST_F(WorkerRegistryTest, MissedHeartbeatsMakeLateNotDead) {
  registry_.Register(WorkerRole::kDecode, "d1:1", Load(0, 0), 7, "kv:1");
  EXPECT_EQ(Health("d1:1"), WorkerHealth::kHealthy);
  now_ += absl::Seconds(3);  // exactly 3 intervals: still healthy
  EXPECT_EQ(Health("d1:1"), WorkerHealth::kHealthy);
  now_ += absl::Milliseconds(1);
  EXPECT_EQ(Health("d1:1"), WorkerHealth::kLate);
  EXPECT_TRUE(Healthy("d1:1"));
  EXPECT_TRUE(registry_.Acquire(WorkerRole::kDecode, policy_, 10).ok());
  EXPECT_TRUE(registry_.Heartbeat("d1:1", Load(0, 0)));
  EXPECT_EQ(Health("d1:1"), WorkerHealth::kHealthy);
  auto list = registry_.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].role, WorkerRole::kDecode);
  EXPECT_EQ(list[0].kvstore_grpc_address, "kv:1");
  EXPECT_EQ(list[0].calibration_hash, 7u);
}

TEST_F(WorkerRegistryTest, TokensStreamingFromAWorkerCountAsLife) {
  registry_.Register(WorkerRole::kDecode, "d1:1", Load(0, 0), 0, "kv:1");
  now_ += absl::Milliseconds(2900);
  registry_.NoteProgress("d1:1");
  now_ += absl::Seconds(2);  // 4.9 s after the last heartbeat, 2 s after the last tokens
  EXPECT_EQ(Health("d1:1"), WorkerHealth::kHealthy);
}

// Silence past the limit takes a worker out only while another worker of its role is live.
TEST_F(WorkerRegistryTest, ALongSilenceKillsAWorkerOnlyWhileAPeerIsLive) {
  registry_.Register(WorkerRole::kPrefill, "quiet:1", Load(0, 0), 0, "");
  registry_.Register(WorkerRole::kPrefill, "live:1", Load(5, 500), 0, "");
  registry_.Register(WorkerRole::kDecode, "d:1", Load(0, 0), 0, "kv:1");
  for (int s = 0; s < 31; ++s) {
    now_ += absl::Seconds(1);
    ASSERT_TRUE(registry_.Heartbeat("live:1", Load(5, 500)));
  }
  EXPECT_EQ(Health("quiet:1"), WorkerHealth::kDead);
  EXPECT_EQ(Health("live:1"), WorkerHealth::kHealthy);
  EXPECT_EQ(Health("d:1"), WorkerHealth::kLate);  // silent as long, but the last decode worker
  auto prefill = registry_.Acquire(WorkerRole::kPrefill, policy_, 1);
  ASSERT_TRUE(prefill.ok());
  EXPECT_EQ(prefill->address, "live:1");  // although it holds more work
  EXPECT_TRUE(registry_.Acquire(WorkerRole::kDecode, policy_, 1).ok());
}

TEST_F(WorkerRegistryTest, WhenEveryWorkerOfARoleIsSilentAllAreKept) {
  registry_.Register(WorkerRole::kDecode, "a:1", Load(0, 0), 0, "kv:a");
  registry_.Register(WorkerRole::kDecode, "b:1", Load(0, 0), 0, "kv:b");
  now_ += absl::Seconds(300);
  EXPECT_EQ(Health("a:1"), WorkerHealth::kLate);
  EXPECT_EQ(Health("b:1"), WorkerHealth::kLate);
  EXPECT_TRUE(registry_.Acquire(WorkerRole::kDecode, policy_, 1).ok());
}

TEST_F(WorkerRegistryTest, SweepReportsEachChangeOnceWithItsReason) {
  registry_.Register(WorkerRole::kDecode, "d:1", Load(0, 0), 0, "kv:1");
  EXPECT_TRUE(registry_.Sweep().empty());
  now_ += absl::Seconds(4);
  std::vector<HealthChange> changes = registry_.Sweep();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].address, "d:1");
  EXPECT_EQ(changes[0].from, WorkerHealth::kHealthy);
  EXPECT_EQ(changes[0].to, WorkerHealth::kLate);
  EXPECT_NE(changes[0].reason.find("still routed to"), std::string::npos) << changes[0].reason;
  EXPECT_TRUE(registry_.Sweep().empty());
  registry_.MarkFailed("d:1", "connection refused");
  changes = registry_.Sweep();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].to, WorkerHealth::kDead);
  EXPECT_NE(changes[0].reason.find("connection refused"), std::string::npos) << changes[0].reason;
  ASSERT_TRUE(registry_.Heartbeat("d:1", Load(0, 0)));
  changes = registry_.Sweep();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].from, WorkerHealth::kDead);
  EXPECT_EQ(changes[0].to, WorkerHealth::kHealthy);
  EXPECT_STREQ(WorkerHealthName(WorkerHealth::kLate), "late");
}

TEST_F(WorkerRegistryTest, UnknownHeartbeatIsRejected) {
  EXPECT_FALSE(registry_.Heartbeat("nobody:1", Load(0, 0)));
  EXPECT_TRUE(registry_.List().empty());
}

TEST_F(WorkerRegistryTest, MarkFailedUntilNextHeartbeat) {
  registry_.AddStatic(WorkerRole::kPrefill, "p1:1", "");
  EXPECT_TRUE(Healthy("p1:1"));
  registry_.MarkFailed("p1:1", "connection refused");
  EXPECT_FALSE(Healthy("p1:1"));
  auto none = registry_.Acquire(WorkerRole::kPrefill, policy_, 5);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("no healthy prefill worker"), absl::string_view::npos);
  EXPECT_TRUE(registry_.Heartbeat("p1:1", Load(0, 0)));  // a successful poll
  EXPECT_TRUE(Healthy("p1:1"));
  EXPECT_TRUE(registry_.List()[0].is_static);
}

// A poll answered before the worker died but processed after its failure must not revive it.
TEST_F(WorkerRegistryTest, AReportSentBeforeTheFailureLeavesItFailed) {
  registry_.AddStatic(WorkerRole::kDecode, "d1:1", "kv:1");
  const absl::Time poll_sent = now_;
  now_ += absl::Milliseconds(5);
  registry_.MarkFailed("d1:1", "connection reset");
  EXPECT_TRUE(registry_.Heartbeat("d1:1", Load(2, 20), poll_sent));
  EXPECT_FALSE(Healthy("d1:1"));
  EXPECT_EQ(registry_.List()[0].reported.queued_requests, 2);  // the load still counts
  EXPECT_TRUE(registry_.Heartbeat("d1:1", Load(0, 0), now_));  // sent after the failure
  EXPECT_TRUE(Healthy("d1:1"));
}

TEST_F(WorkerRegistryTest, AssignedTokensCountUntilReleasedOrReported) {
  registry_.Register(WorkerRole::kDecode, "a:1", Load(0, 100), 0, "kv:a");
  registry_.Register(WorkerRole::kDecode, "b:1", Load(0, 150), 0, "kv:b");
  auto first = registry_.Acquire(WorkerRole::kDecode, policy_, 80);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->address, "a:1");  // 100 < 150
  EXPECT_EQ(first->kvstore_grpc_address, "kv:a");
  auto second = registry_.Acquire(WorkerRole::kDecode, policy_, 80);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->address, "b:1");  // a is now at 180
  auto list = registry_.List();
  EXPECT_EQ(Find(list, "a:1")->pending_tokens, 180);
  EXPECT_EQ(Find(list, "a:1")->inflight_tokens, 80);
  EXPECT_EQ(Find(list, "a:1")->inflight_requests, 1);

  registry_.Release(*first);
  list = registry_.List();
  EXPECT_EQ(Find(list, "a:1")->pending_tokens, 100);
  EXPECT_EQ(Find(list, "a:1")->inflight_tokens, 0);

  // A report replaces the router's estimate; a later release leaves the report alone.
  ASSERT_TRUE(registry_.Heartbeat("b:1", Load(1, 230)));
  registry_.Release(*second);
  list = registry_.List();
  EXPECT_EQ(Find(list, "b:1")->pending_tokens, 230);
  EXPECT_EQ(Find(list, "b:1")->inflight_tokens, 0);
}

// Each candidate sees what its own KV store is expected to hold of the prompt.
TEST_F(WorkerRegistryTest, CandidatesSeeTheirStoresCachedTokens) {
  registry_.Register(WorkerRole::kDecode, "a:1", Load(0, 100), 0, "kv:a");
  registry_.Register(WorkerRole::kDecode, "b:1", Load(0, 400), 0, "kv:b");
  KvAwarePolicy kv_aware;
  const absl::flat_hash_map<std::string, int64_t> cached = {{"kv:b", 512}, {"kv:c", 999}};
  // A 600-token prompt, 32 tokens to generate: 88 + 400 < 600 + 100.
  auto chosen = registry_.Acquire(WorkerRole::kDecode, kv_aware, 32, &cached);
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->address, "b:1");
  // Without the map every store holds nothing: a's queue is shorter.
  auto without = registry_.Acquire(WorkerRole::kDecode, kv_aware, 32);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->address, "a:1");
}

TEST_F(WorkerRegistryTest, RolesAreSeparate) {
  registry_.Register(WorkerRole::kMonolithic, "m:1", Load(0, 0), 0, "");
  EXPECT_EQ(registry_.Count(WorkerRole::kMonolithic), 1);
  EXPECT_EQ(registry_.Count(WorkerRole::kDecode), 0);
  EXPECT_FALSE(registry_.Acquire(WorkerRole::kDecode, policy_, 1).ok());
  auto m = registry_.Acquire(WorkerRole::kMonolithic, policy_, 1);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->address, "m:1");
  EXPECT_STREQ(WorkerRoleName(WorkerRole::kMonolithic), "monolithic");
}

}  // namespace
}  // namespace pdserve
