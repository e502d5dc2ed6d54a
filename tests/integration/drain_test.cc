// Graceful drain: SIGTERM to a router, decode worker or KV store while streams are running. The
// process must stop taking new work, let every stream in flight finish (all tokens, status OK)
// and exit with code 0 — which `pdserve up` logs when it reaps the child.
#include <signal.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/pdserve_client.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace pdserve::integration {
namespace {

constexpr int kStreams = 6;
constexpr int kMaxTokens = 300;

struct StreamOutcome {
  absl::Status status;
  int tokens = 0;
  int tokens_after_sigterm = 0;
};

// Runs kStreams streams; once every stream has its first token, sends SIGTERM to `process`.
std::vector<StreamOutcome> StreamThroughSigterm(const Cluster& cluster,
                                                const std::string& process) {
  const Cluster::Process* target = cluster.Find(process);
  EXPECT_NE(target, nullptr) << process;
  if (target == nullptr) return {};
  auto client = Client::Create(cluster.router_address());
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return {};
  std::vector<StreamOutcome> outcomes(kStreams);
  std::atomic<int> started{0};
  std::atomic<bool> signalled{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      GenerateRequest request = TextRequest(absl::StrCat("Once upon a time ", i), kMaxTokens);
      request.mutable_stop()->set_ignore_eos(true);
      StreamOutcome& outcome = outcomes[i];
      absl::StatusOr<GenerateResponse::Final> final =
          (*client)->GenerateStream(request, {}, [&](const GenerateResponse::Token& token) {
            if (token.id() < 0) return;
            if (outcome.tokens++ == 0) started.fetch_add(1);
            if (signalled.load()) ++outcome.tokens_after_sigterm;
          });
      outcome.status = final.status();
    });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (started.load() < kStreams && absl::Now() < deadline) {
    absl::SleepFor(absl::Microseconds(100));  // waiting for the streams' first tokens
  }
  signalled.store(true);
  kill(target->pid, SIGTERM);
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

// Waits for `up`'s log line about `process` exiting; its text ("exit code 0", ...).
std::string WaitForExit(const Cluster& cluster, const std::string& process) {
  const std::string prefix = absl::StrCat(process, " (pid ", cluster.Find(process)->pid, ")");
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    const std::string log = cluster.LogTail(100000);
    const size_t at = log.find(prefix + " exited with ");
    if (at != std::string::npos) return log.substr(at, log.find('\n', at) - at);
    absl::SleepFor(absl::Milliseconds(100));  // polling the log for a line, not hiding a race
  }
  return "no exit line for " + prefix;
}

void ExpectAllFinished(const std::vector<StreamOutcome>& outcomes, const Cluster& cluster) {
  int after = 0;
  for (const StreamOutcome& outcome : outcomes) {
    EXPECT_TRUE(outcome.status.ok()) << outcome.status << "\n" << cluster.LogTail();
    EXPECT_EQ(outcome.tokens, kMaxTokens);
    after += outcome.tokens_after_sigterm;
  }
  // The signal really came mid-stream (otherwise this test proves nothing).
  EXPECT_GT(after, 0);
}

class DrainTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DrainTest, SigtermFinishesInFlightStreamsAndExitsZero) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(
      {"--swiftkv-layer=4", "--fp8=per-token", "--kcache-topn=32", "--drain-seconds=30"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<StreamOutcome> outcomes = StreamThroughSigterm(**cluster, GetParam());
  ExpectAllFinished(outcomes, **cluster);
  EXPECT_TRUE(absl::StrContains(WaitForExit(**cluster, GetParam()), "exit code 0"))
      << WaitForExit(**cluster, GetParam()) << "\n"
      << (*cluster)->LogTail();
}

INSTANTIATE_TEST_SUITE_P(EveryRole, DrainTest, ::testing::Values("decode-0", "kvstore", "router"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "decode-0" ? std::string("decode") : info.param;
                         });

}  // namespace
}  // namespace pdserve::integration
