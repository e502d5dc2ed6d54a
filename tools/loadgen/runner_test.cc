#include "tools/loadgen/runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace pdserve::loadgen {
namespace {

// Streams max_tokens tokens 2 ms apart (or `short_by` fewer); with `hang`, waits for
// cancellation instead.
class FakeBackend : public Backend {
 public:
  int short_by = 0;
  bool hang = false;
  std::atomic<int> in_flight{0}, max_in_flight{0};

  std::string Describe() const override { return "fake"; }
  absl::Status Probe() override { return absl::OkStatus(); }
  BackendResult Send(const BackendRequest& request, Cancellation& cancellation,
                     const std::function<void()>& on_token) override {
    const int now = ++in_flight;
    int seen = max_in_flight.load();
    while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
    }
    BackendResult result;
    if (hang) {
      while (!cancellation.cancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      result.code = "CANCELLED";
      result.cancelled = true;
    } else {
      for (int i = 0; i < request.max_tokens - short_by; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        on_token();
        ++result.output_tokens;
      }
    }
    --in_flight;
    return result;
  }
};

std::vector<RequestSpec> Specs(int n, double gap_s) {
  std::vector<RequestSpec> specs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    specs[i].index = i;
    specs[i].arrival_s = i * gap_s;
    specs[i].prompt = {5, 6, 7};
    specs[i].output_tokens = 4;
    specs[i].warmup = i == 0;
  }
  return specs;
}

TEST(Runner, OpenLoopSendsOnScheduleAndRecordsTokens) {
  FakeBackend backend;
  const std::vector<RequestRecord> records = RunWorkload(backend, Specs(6, 0.02), {});
  ASSERT_EQ(records.size(), 6u);
  for (const RequestRecord& r : records) {
    EXPECT_TRUE(r.ok()) << r.code;
    EXPECT_GE(r.send_s, r.scheduled_s);
    EXPECT_LT(r.send_s, r.scheduled_s + 0.05);
    ASSERT_EQ(r.token_s.size(), 4u);
    EXPECT_GE(r.ttft(), 0.001);
    EXPECT_EQ(r.prompt_tokens, 3);
  }
  EXPECT_TRUE(records[0].warmup);
}

TEST(Runner, ClosedLoopKeepsConcurrencyClients) {
  FakeBackend backend;
  RunOptions options;
  options.concurrency = 2;
  const std::vector<RequestRecord> records = RunWorkload(backend, Specs(8, 100), options);
  for (const RequestRecord& r : records) EXPECT_TRUE(r.ok());
  EXPECT_EQ(backend.max_in_flight.load(), 2);
}

// A conversation's turns go one after another, each think_time_s after the previous one ended;
// conversations run side by side (open loop) or one per client (closed loop).
TEST(Runner, ChatTurnsWaitForThePreviousAnswerAndTheThinkTime) {
  for (int concurrency : {0, 2}) {
    FakeBackend backend;
    std::vector<RequestSpec> specs = Specs(6, 0);
    for (size_t i = 0; i < specs.size(); ++i) {
      specs[i].conversation = static_cast<int>(i) / 3;
      specs[i].turn = static_cast<int>(i) % 3;
      specs[i].warmup = false;
    }
    RunOptions options;
    options.concurrency = concurrency;
    options.think_time_s = 0.03;
    const std::vector<RequestRecord> records = RunWorkload(backend, specs, options);
    for (size_t i = 0; i < records.size(); ++i) {
      EXPECT_TRUE(records[i].ok()) << records[i].code;
      if (i % 3 == 0) continue;
      EXPECT_GE(records[i].send_s, records[i - 1].done_s + 0.03) << "turn " << i % 3;
      EXPECT_GE(records[i].scheduled_s, records[i - 1].done_s + 0.03);
    }
    EXPECT_LE(backend.max_in_flight.load(), 2) << "one turn at a time per conversation";
  }
}

TEST(Runner, ShortOutputIsAnError) {
  FakeBackend backend;
  backend.short_by = 1;
  const std::vector<RequestRecord> records = RunWorkload(backend, Specs(2, 0), {});
  EXPECT_EQ(records[1].code, kCodeShortOutput);
  EXPECT_EQ(records[1].error, "3 of 4 tokens");
}

TEST(Runner, DurationLimitAbandonsRunningAndUnsentRequests) {
  FakeBackend backend;
  backend.hang = true;
  RunOptions options;
  options.duration_s = 0.15;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<RequestRecord> records = RunWorkload(backend, Specs(4, 0.1), options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_TRUE(records[0].sent && records[0].abandoned);
  EXPECT_TRUE(records[1].sent && records[1].abandoned);
  EXPECT_FALSE(records[2].sent);
  EXPECT_FALSE(records[3].sent);
}

}  // namespace
}  // namespace pdserve::loadgen
