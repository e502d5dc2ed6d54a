// Acceptance of the metrics: a real cluster (`pdserve up`, default profile) scraped by Debian's
// real Prometheus server. After known traffic, Prometheus' HTTP API must hold every series of the
// contract (deploy/metrics.txt) with values that follow from the traffic: request and token
// counts exact, transfers and compression plausible, the KV pool back to empty. Every /metrics
// page must also pass `promtool check metrics`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/pdserve_client.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"
#include "tests/integration/metrics_contract.h"
#include "tests/integration/prometheus_server.h"

namespace pdserve::integration {
namespace {

#define EXPECT_OK(expression)                  \
  do {                                         \
    const absl::Status status_ = (expression); \
    EXPECT_TRUE(status_.ok()) << status_;      \
  } while (false)

constexpr int kGrpcRequests = 11;
constexpr int kRequests = kGrpcRequests + 1;  // and one through the OpenAI API
constexpr int kMaxTokens = 8;

std::string Fetch(const std::string& address, const std::string& path) {
  httplib::Client client("http://" + address);
  httplib::Result result = client.Get(path);
  return result && result->status == 200 ? result->body : "";
}

std::map<std::string, ContractMetric> Contract() {
  std::vector<std::string> errors;
  std::map<std::string, ContractMetric> contract =
      LoadMetricsContract(std::string(PDSERVE_SOURCE_DIR) + "/deploy/metrics.txt", errors);
  EXPECT_THAT(errors, ::testing::IsEmpty());
  return contract;
}

// Rule groups evaluated every second ("interval: 30s" → "interval: 1s").
std::string EverySecond(std::string rules) {
  const std::string key = "interval: ";
  for (size_t at = rules.find(key); at != std::string::npos; at = rules.find(key, at + 1)) {
    const size_t value = at + key.size();
    rules.replace(value, rules.find('\n', value) - value, "1s");
  }
  return rules;
}

class MetricsTest : public ::testing::Test {
 protected:
  // A failed set-up fails every test (in SetUp): an assertion failing in SetUpTestSuite makes
  // gtest skip the tests, and ctest then counts them as skipped, not failed.
  static void SetUpTestSuite() { set_up_ = new absl::Status(StartClusterAndPrometheus()); }
  static absl::Status StartClusterAndPrometheus() {
    PDSERVE_ASSIGN_OR_RETURN(
        std::unique_ptr<Cluster> cluster,
        Cluster::Start({"--swiftkv-layer=4", "--fp8=per-token", "--kcache-topn=32"}));
    cluster_ = cluster.release();
    std::vector<PrometheusServer::Target> targets;
    for (const Cluster::Process& process : cluster_->processes()) {
      const std::string job = process.name.substr(0, process.name.find('-'));
      targets.push_back({job, process.http_address});
    }
    // The shipped recording and alert rules run on the cluster's real series, evaluated every
    // second instead of every 30 s.
    for (const char* name : {"pdserve-recording.rules.yml", "pdserve-alerts.rules.yml"}) {
      std::ifstream in(std::string(PDSERVE_SOURCE_DIR) + "/deploy/prometheus/" + name);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (text.empty()) return absl::NotFoundError(absl::StrCat("no rules in ", name));
      rules_.push_back(absl::StrCat("/tmp/pdserve-metrics-test-", getpid(), "-", name));
      std::ofstream(rules_.back()) << EverySecond(text);
    }
    PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<PrometheusServer> prometheus,
                             PrometheusServer::Start(targets, rules_));
    prometheus_ = prometheus.release();
    return absl::OkStatus();
  }
  static void TearDownTestSuite() {
    delete prometheus_;
    delete cluster_;
    delete set_up_;
    for (const std::string& file : rules_) std::remove(file.c_str());
  }
  void SetUp() override {
    ASSERT_TRUE(set_up_->ok()) << *set_up_;
    ASSERT_NE(cluster_, nullptr);
    ASSERT_NE(prometheus_, nullptr);
  }

  static absl::Status* set_up_;
  static Cluster* cluster_;
  static PrometheusServer* prometheus_;
  static std::vector<std::string> rules_;
};
std::vector<std::string> MetricsTest::rules_;

absl::Status* MetricsTest::set_up_ = nullptr;
Cluster* MetricsTest::cluster_ = nullptr;
PrometheusServer* MetricsTest::prometheus_ = nullptr;

TEST_F(MetricsTest, PrometheusSeesTheTrafficOnEveryService) {
  // Every process scraped once before the traffic, so that rates see the counters rise.
  const int processes = static_cast<int>(cluster_->processes().size());
  EXPECT_OK(prometheus_->WaitForValue("count(up == 1)", processes));
  auto client = Client::Create(cluster_->router_address());
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < kGrpcRequests; ++i) {
    // Long enough for whole KV pages, whose V KCache then reads remotely.
    GenerateRequest request = TextRequest(
        absl::StrCat("Once upon a time, there was a little girl named Lily number ", i,
                     ". She loved to play outside in the park with her friends. One day, she "
                     "saw a big red ball under a tree and ran to get it. Her mom smiled and "
                     "said that they could all play together until the sun went down."),
        kMaxTokens);
    request.mutable_stop()->set_ignore_eos(true);
    absl::StatusOr<GenerateResult> result = (*client)->Generate(request);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->token_ids.size(), static_cast<size_t>(kMaxTokens));
  }
  const std::string& http = cluster_->router_http_address();
  httplib::Client openai("http://" + http);
  const nlohmann::json body = {
      {"prompt", "Once upon a time"}, {"max_tokens", kMaxTokens}, {"ignore_eos", true}};
  httplib::Result completion = openai.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(completion);
  ASSERT_EQ(completion->status, 200) << completion->body;
  GenerateRequest bad = TextRequest("x", 0);  // max_tokens 0: INVALID_ARGUMENT
  EXPECT_EQ((*client)->Generate(bad).status().code(), absl::StatusCode::kInvalidArgument);

  const PrometheusServer& p = *prometheus_;
  // Every process is scraped and reports itself.
  EXPECT_OK(p.WaitForValue("count(pdserve_build_info)", processes));
  EXPECT_OK(p.WaitForValue("sum(pdserve_serving)", processes));

  // The router: exact counts.
  absl::Status ttft =
      p.WaitForValue("sum(pdserve_router_time_to_first_token_seconds_count)", kRequests);
  EXPECT_TRUE(ttft.ok()) << ttft;
  EXPECT_OK(
      p.WaitForValue(R"(pdserve_router_requests_total{outcome="completed",code="OK"})", kRequests));
  EXPECT_OK(p.WaitForValue(
      R"(pdserve_router_requests_total{outcome="rejected",code="INVALID_ARGUMENT"})", 1));
  EXPECT_OK(p.WaitForValue("pdserve_router_generation_tokens_total", kRequests * kMaxTokens));
  EXPECT_OK(p.WaitForValue("sum(pdserve_router_time_per_output_token_seconds_count)", kRequests));
  EXPECT_OK(p.WaitForValue("sum(pdserve_router_e2e_request_latency_seconds_count)", kRequests));
  EXPECT_OK(p.WaitForValue("pdserve_router_requests_inflight", 0));
  EXPECT_OK(p.WaitForValue(R"(sum(pdserve_router_workers{state="healthy"}))", processes - 2));
  // Latencies are positive and TTFT is below e2e.
  absl::StatusOr<std::vector<PrometheusServer::Sample>> ratio = p.Query(
      "sum(pdserve_router_time_to_first_token_seconds_sum) / "
      "sum(pdserve_router_e2e_request_latency_seconds_sum)");
  ASSERT_TRUE(ratio.ok() && ratio->size() == 1) << ratio.status();
  EXPECT_GT((*ratio)[0].value, 0);
  EXPECT_LT((*ratio)[0].value, 1);

  // Prefill and decode: the same requests, the tokens all generated by decode.
  EXPECT_OK(p.WaitForValue(R"(pdserve_prefill_requests_total{code="OK"})", kRequests));
  EXPECT_OK(p.WaitForValue(R"(pdserve_decode_requests_total{code="OK"})", kRequests));
  EXPECT_OK(p.WaitForValue("pdserve_decode_generated_tokens_total", kRequests * kMaxTokens));
  // Every page decode read was either put by prefill or read by prefill from the prefix cache
  // (the prompts share their first page): pages exactly, bytes at most (decode reads K-only parts
  // of KCache pages).
  absl::StatusOr<std::vector<PrometheusServer::Sample>> put =
      p.Query(R"(pdserve_kv_transfer_pages_total{direction="put"})");
  ASSERT_TRUE(put.ok() && put->size() == 1);
  EXPECT_GT((*put)[0].value, 0);
  EXPECT_OK(p.WaitForValue(R"(sum(pdserve_kv_transfer_pages_total{direction="get",job="decode"}) )"
                           R"(- sum(pdserve_kv_transfer_pages_total{job="prefill"}))",
                           0));
  EXPECT_OK(p.WaitForValue(R"(sum(pdserve_kv_transfer_bytes_total{job="prefill"}) >= bool )"
                           R"(sum(pdserve_kv_transfer_bytes_total{direction="get",job="decode"}))",
                           1));
  EXPECT_OK(p.WaitForValue("pdserve_prefill_prefix_cached_tokens_total > bool 0", 1));
  EXPECT_OK(
      p.WaitForValue(R"(pdserve_kvstore_prefix_lookups_pages_total{result="hit"} > bool 0)", 1));
  // SwiftKV + FP8 store less than the plain fp32 KV; the stored bytes are what was put.
  EXPECT_OK(
      p.WaitForValue("pdserve_prefill_kv_uncompressed_bytes_total > bool "
                     "2 * pdserve_prefill_kv_stored_bytes_total",
                     1));
  EXPECT_OK(p.WaitForValue(R"(pdserve_prefill_kv_stored_bytes_total - ignoring(direction) )"
                           R"(pdserve_kv_transfer_bytes_total{direction="put"})",
                           0));
  EXPECT_OK(p.WaitForValue("pdserve_decode_kcache_value_fetched_bytes_total > bool 0", 1));
  absl::StatusOr<std::vector<PrometheusServer::Sample>> transports =
      p.Query("pdserve_ucx_transport_info == 1");
  ASSERT_TRUE(transports.ok());
  EXPECT_FALSE(transports->empty()) << "no worker reports the UCX transports it uses";
  // The KV store: every page back (free, or an idle prefix-cache page), nothing expired, every
  // allocation counted.
  EXPECT_OK(p.WaitForValue(R"(sum without(state) (pdserve_kvstore_slots{state=~"free|cached"}) )"
                           R"(- sum without(state) (pdserve_kvstore_slots))",
                           0));
  EXPECT_OK(p.WaitForValue("pdserve_kvstore_leases_active", 0));
  EXPECT_OK(p.WaitForValue("pdserve_kvstore_lease_expiries_total", 0));
  EXPECT_OK(p.WaitForValue(R"(pdserve_kvstore_allocations_total{code="OK"})", kRequests));
  EXPECT_OK(p.WaitForValue(R"(pdserve_kvstore_frees_total{reason="released"})", kRequests));

  EXPECT_OK(p.WaitForValue(R"(pdserve_http_requests_total{path="/v1/completions",code="200"})", 1));
  // The shipped recording rules compute from the real series.
  EXPECT_OK(p.WaitForValue("pdserve:prefill_kv_compression_ratio:rate5m > bool 2", 1));
  EXPECT_OK(p.WaitForValue("pdserve:decode_kcache_value_bytes_per_token:rate5m > bool 0", 1));
  EXPECT_OK(p.WaitForValue("pdserve:router_time_to_first_token_seconds:p50_5m > bool 0", 1));
  // Every metric of the contract exists.
  absl::StatusOr<std::string> names_json = p.Get("/api/v1/label/__name__/values");
  ASSERT_TRUE(names_json.ok());
  const nlohmann::json names = nlohmann::json::parse(*names_json)["data"];
  std::set<std::string> present(names.begin(), names.end());
  const std::map<std::string, ContractMetric> contract = Contract();
  EXPECT_GE(contract.size(), 30u) << "deploy/metrics.txt is missing or short";
  for (const auto& [name, metric] : contract) {
    EXPECT_TRUE(present.count(name) || present.count(name + "_count"))
        << name << " (deploy/metrics.txt) is not exported by any service";
  }
  // Each process's page has exactly the contract's metrics for its role, with the contract's
  // types, label names and bucket bounds.
  for (const Cluster::Process& process : cluster_->processes()) {
    const std::string role = process.name.substr(0, process.name.find('-'));
    EXPECT_THAT(CheckMetricsPage(Fetch(process.http_address, "/metrics"), role, contract),
                ::testing::IsEmpty())
        << process.name;
  }
}

// The value of one series (e.g. "pdserve_decode_active_sequences") on a /metrics page; -1 when
// absent.
double SeriesValue(const std::string& page, const std::string& series) {
  std::istringstream lines(page);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::strtod(line.c_str() + series.size(), nullptr);
  }
  return -1;
}

// The gauges move with the load (the test above only sees them at rest): while streams run, the
// router counts them in flight, decode has them in its batch and the KV store holds their leases.
TEST_F(MetricsTest, GaugesFollowTheLoad) {
  const Cluster::Process* decode = cluster_->Find("decode-0");
  const Cluster::Process* kvstore = cluster_->Find("kvstore");
  ASSERT_NE(decode, nullptr);
  ASSERT_NE(kvstore, nullptr);
  auto client = Client::Create(cluster_->router_address());
  ASSERT_TRUE(client.ok());
  constexpr int kStreams = 6;
  std::atomic<int> running{kStreams};
  std::vector<std::thread> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.emplace_back([&, i] {
      GenerateRequest request = TextRequest(absl::StrCat("Once upon a time ", i), 450);
      request.mutable_stop()->set_ignore_eos(true);
      EXPECT_TRUE((*client)->Generate(request).ok());
      running.fetch_sub(1);
    });
  }
  double inflight = 0, active = 0, leases = 0;
  while (running.load() > 0 && (inflight < 1 || active < 1 || leases < 1)) {
    inflight = std::max(inflight, SeriesValue(Fetch(cluster_->router_http_address(), "/metrics"),
                                              "pdserve_router_requests_inflight"));
    active = std::max(active, SeriesValue(Fetch(decode->http_address, "/metrics"),
                                          "pdserve_decode_active_sequences"));
    leases = std::max(leases, SeriesValue(Fetch(kvstore->http_address, "/metrics"),
                                          "pdserve_kvstore_leases_active"));
  }
  for (std::thread& stream : streams) stream.join();
  EXPECT_GE(inflight, 1);
  EXPECT_GE(active, 1);
  EXPECT_GE(leases, 1);
  // The router leaves a call just after the client has its final message: wait for it.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (SeriesValue(Fetch(cluster_->router_http_address(), "/metrics"),
                     "pdserve_router_requests_inflight") != 0 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(SeriesValue(Fetch(cluster_->router_http_address(), "/metrics"),
                        "pdserve_router_requests_inflight"),
            0);
}

TEST_F(MetricsTest, EveryMetricsPagePassesPromtool) {
  for (const Cluster::Process& process : cluster_->processes()) {
    const std::string page = Fetch(process.http_address, "/metrics");
    ASSERT_FALSE(page.empty()) << process.name << " served no /metrics";
    const std::string out = absl::StrCat("/tmp/pdserve-promtool-", getpid(), ".out");
    FILE* promtool = popen(("/usr/bin/promtool check metrics > " + out + " 2>&1").c_str(), "w");
    ASSERT_NE(promtool, nullptr);
    fwrite(page.data(), 1, page.size(), promtool);
    const int status = pclose(promtool);
    std::ifstream in(out);
    std::string lint((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(status, 0) << process.name << ": " << lint;
    std::remove(out.c_str());
  }
}

}  // namespace
}  // namespace pdserve::integration
