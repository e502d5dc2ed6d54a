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

  absl::Time now_ = absl::FromUnixSeconds(1000);
  WorkerRegistry registry_;
  LeastPendingTokensPolicy policy_;
};

TEST_F(WorkerRegistryTest, MissedHeartbeatsMakeUnhealthyAndAHeartbeatRevives) {
  registry_.Register(WorkerRole::kDecode, "d1:1", Load(0, 0), 7, "kv:1");
  EXPECT_TRUE(Healthy("d1:1"));
  now_ += absl::Seconds(3);  // exactly 3 intervals: still healthy
  EXPECT_TRUE(Healthy("d1:1"));
  now_ += absl::Milliseconds(1);
  EXPECT_FALSE(Healthy("d1:1"));
  EXPECT_EQ(registry_.Acquire(WorkerRole::kDecode, policy_, 10).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(registry_.Heartbeat("d1:1", Load(0, 0)));
  EXPECT_TRUE(Healthy("d1:1"));
  auto list = registry_.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].role, WorkerRole::kDecode);
  EXPECT_EQ(list[0].kvstore_grpc_address, "kv:1");
  EXPECT_EQ(list[0].calibration_hash, 7u);
}

TEST_F(WorkerRegistryTest, UnknownHeartbeatIsRejected) {
  EXPECT_FALSE(registry_.Heartbeat("nobody:1", Load(0, 0)));
  EXPECT_TRUE(registry_.List().empty());
}

TEST_F(WorkerRegistryTest, MarkFailedUntilNextHeartbeat) {
  registry_.AddStatic(WorkerRole::kPrefill, "p1:1", "");
  EXPECT_TRUE(Healthy("p1:1"));
  registry_.MarkFailed("p1:1");
  EXPECT_FALSE(Healthy("p1:1"));
  auto none = registry_.Acquire(WorkerRole::kPrefill, policy_, 5);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("no healthy prefill worker"), absl::string_view::npos);
  EXPECT_TRUE(registry_.Heartbeat("p1:1", Load(0, 0)));  // a successful poll
  EXPECT_TRUE(Healthy("p1:1"));
  EXPECT_EQ(registry_.StaticAddresses(WorkerRole::kPrefill), std::vector<std::string>{"p1:1"});
  EXPECT_TRUE(registry_.StaticAddresses(WorkerRole::kDecode).empty());
}

// A poll answered before the worker died but processed after its failure must not revive it.
TEST_F(WorkerRegistryTest, AReportSentBeforeTheFailureLeavesItFailed) {
  registry_.AddStatic(WorkerRole::kDecode, "d1:1", "kv:1");
  const absl::Time poll_sent = now_;
  now_ += absl::Milliseconds(5);
  registry_.MarkFailed("d1:1");
  EXPECT_TRUE(registry_.Heartbeat("d1:1", Load(2, 20), poll_sent));
  EXPECT_FALSE(Healthy("d1:1"));
  EXPECT_EQ(registry_.List()[0].reported.queued_requests, 2);  // the load still counts
  EXPECT_TRUE(registry_.Heartbeat("d1:1", Load(0, 0), now_));  // sent after the failure
  EXPECT_TRUE(Healthy("d1:1"));
}

TEST_F(WorkerRegistryTest, StaticWorkerGoesUnhealthyWithoutPolls) {
  registry_.AddStatic(WorkerRole::kDecode, "d1:1", "kv:1");
  now_ += absl::Seconds(4);
  EXPECT_FALSE(Healthy("d1:1"));
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
