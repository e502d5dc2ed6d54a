// Overload at CI size against a real `pdserve up` (issue 26; the full-size run is
// scripts/overload_run.sh): more clients than the router runs at once, and more than it queues,
// all complete — the excess waits in the router's queue or is refused and retried by loadgen (until
// each request's deadline) — with no worker ever taken for dead and every KV page back. And a
// worker process killed with SIGKILL is found dead within 2 s although no request is sent to it.
#include <httplib.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/pdserve_client.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"
#include "tests/support/scratch_dir.h"

namespace pdserve::integration {
namespace {

// The sum of every series of `name` on a process's /metrics page; -1 when the page is missing.
double SumOfSeries(const std::string& http_address, const std::string& name) {
  httplib::Client client("http://" + http_address);
  httplib::Result page = client.Get("/metrics");
  if (!page || page->status != 200) return -1;
  std::istringstream lines(page->body);
  std::string line;
  double sum = 0;
  while (std::getline(lines, line)) {
    if (line.rfind(name, 0) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != ' ' && next != '{') continue;
    double value = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) sum += value;
  }
  return sum;
}

// Runs `pdserve loadgen --router=<cluster's> <args> --json=F`; its JSON report (discarded when the
// run failed or wrote none).
nlohmann::json RunLoadgen(const Cluster& cluster, const std::string& args) {
  const ScratchDir scratch("overload_test");
  const std::string json = scratch / "report.json";
  const std::string command =
      absl::StrCat(PdserveBinary(), " loadgen --router=", cluster.router_address(), " ", args,
                   " --json=", json, " > /dev/null");
  if (std::system(command.c_str()) != 0) return nlohmann::json::value_t::discarded;
  std::ifstream in(json);
  return nlohmann::json::parse(in, nullptr, false);
}

// Every KV page is back in the store's pool: none allocated, none sealed.
void ExpectEveryPageBack(const Cluster& cluster) {
  absl::StatusOr<v1::PoolUsage> pool = cluster.PoolUsage();
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(pool->allocated_slots(), 0) << pool->DebugString();
  EXPECT_EQ(pool->sealed_slots(), 0) << pool->DebugString();
}

TEST(OverloadTest, EveryRequestCompletesWhenClientsOutnumberTheRoutersQueue) {
  constexpr int kRequests = 800;
  absl::StatusOr<std::unique_ptr<Cluster>> cluster =
      Cluster::Start({"--decode-workers=2", "--swiftkv-layer=4", "--fp8=per-token",
                      "--kcache-topn=32", "--max-inflight=32", "--max-queued=96"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const nlohmann::json report =
      RunLoadgen(**cluster, absl::StrCat("--concurrency=256 --requests=", kRequests,
                                         " --warmup=0 --prompt-tokens=32 --gen-tokens=16 "
                                         "--retries=-1"));
  ASSERT_FALSE(report.is_discarded()) << (*cluster)->LogTail();
  EXPECT_EQ(report["requests"]["completed"], kRequests) << report.dump(2);
  EXPECT_EQ(report["requests"]["failed"], 0) << report["errors"].dump();
  // 256 clients against 32 running + 96 queued: some were refused and retried.
  EXPECT_GT(report["retried_requests"].get<int>(), 0) << report.dump(2);

  const std::string router = (*cluster)->router_http_address();
  EXPECT_EQ(SumOfSeries(router, "pdserve_router_worker_health_changes_total"), 0)
      << (*cluster)->LogTail();
  EXPECT_GT(SumOfSeries(router, "pdserve_router_admission_wait_seconds_count"), 0);
  ExpectEveryPageBack(**cluster);
}

// A KV store pool that holds the pages of only a few requests: prefill waits for pages to come
// back instead of refusing, so that every request completes without a single client retry.
TEST(OverloadTest, AFullKvPoolMakesPrefillWaitInsteadOfRefusing) {
  constexpr int kRequests = 120;
  absl::StatusOr<std::unique_ptr<Cluster>> cluster =
      Cluster::Start({"--pool-mib=1", "--slot-kib=16"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const nlohmann::json report =
      RunLoadgen(**cluster, absl::StrCat("--concurrency=48 --requests=", kRequests,
                                         " --warmup=0 --prompt-tokens=100 --gen-tokens=8 "
                                         "--retries=0"));
  ASSERT_FALSE(report.is_discarded()) << (*cluster)->LogTail();
  EXPECT_EQ(report["requests"]["completed"], kRequests) << report.dump(2);
  ExpectEveryPageBack(**cluster);
  absl::StatusOr<v1::PoolUsage> pool = (*cluster)->PoolUsage();
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_LT(pool->total_slots(), 48 * 7 * 5) << "the pool is meant to hold fewer requests than run";
}

TEST(OverloadTest, AKilledWorkerIsFoundDeadWithinTwoSeconds) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start({"--decode-workers=2"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create((*cluster)->router_address());
  ASSERT_TRUE(client.ok());
  const Cluster::Process* victim = (*cluster)->Find("decode-1");
  ASSERT_NE(victim, nullptr);
  auto healthy = [&](const std::string& address) {
    absl::StatusOr<v1::ListWorkersReply> workers = (*client)->ListWorkers();
    if (!workers.ok()) return false;
    for (const v1::WorkerInfo& w : workers->workers()) {
      if (w.address() == address) return w.healthy();
    }
    return false;
  };
  ASSERT_TRUE(healthy(victim->address));
  ASSERT_EQ(kill(victim->pid, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  while (healthy(victim->address) && absl::Now() - killed < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_LT(absl::Now() - killed, absl::Seconds(2)) << (*cluster)->LogTail();
  EXPECT_TRUE(healthy((*cluster)->Find("decode-0")->address));
  // The change is logged at warn with its reason.
  EXPECT_NE((*cluster)->LogTail().find("healthy -> dead"), std::string::npos)
      << (*cluster)->LogTail();
}

}  // namespace
}  // namespace pdserve::integration
