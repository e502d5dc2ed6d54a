// Fail-closed KV handoff on a real cluster: a KV store started with --fault-tamper-sealed-pages
// damages every page once it is sealed (a torn page, another request's page, a page of another
// epoch, V bytes changed under a resealed page checksum). The decode worker must refuse each page
// before use, count it by reason, and fail the request with UNAVAILABLE naming the page — never
// decode from it — and the pages must still return to the store.
#include <httplib.h>

#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/pdserve_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace pdserve::integration {
namespace {

using ::testing::HasSubstr;

// The value of the sample `series` (name with labels, as exposed) on `address`'s /metrics; -1
// when absent.
double Metric(const std::string& address, const std::string& series) {
  httplib::Client http("http://" + address);
  httplib::Result page = http.Get("/metrics");
  if (!page || page->status != 200) return -1;
  const size_t at = page->body.find(series + " ");
  if (at == std::string::npos) return -1;
  const size_t start = at + series.size() + 1;
  double value = -1;
  if (!absl::SimpleAtod(page->body.substr(start, page->body.find('\n', start) - start), &value)) {
    return -1;
  }
  return value;
}

struct Case {
  const char* mode;
  std::vector<std::string> profile;
  const char* reason;       // what the decode worker counts the refusal as
  const char* detail = "";  // and what the error must say beside it
};

// With the default profile, KCache layers read only page heads at import and fetch V heads at each
// step, from full pages only: the prompt is long enough for several.
// Each request starts differently, so that the second does not hit the first one's pages in the
// prefix cache (a damaged cached page is the prefill worker's to refuse, not this test's subject).
constexpr const char* kOpenings[] = {"Once upon a time", "Long ago"};
constexpr char kLongPrompt[] =
    " there was a little girl named Lily. She loved to play outside in the sun with her friends, "
    "and one day she found a big red ball in the park near her house.";
const std::vector<std::string> kDefaultProfile = {"--swiftkv-layer=4", "--fp8=per-token",
                                                  "--kcache-topn=32"};

class FailClosedTest : public ::testing::TestWithParam<Case> {};

TEST_P(FailClosedTest, DecodeRefusesTheDamagedPageAndTheRequestFailsUnavailable) {
  const Case& c = GetParam();
  std::vector<std::string> args = {absl::StrCat("--fault-tamper-sealed-pages=", c.mode),
                                   "--lease-seconds=3"};
  args.insert(args.end(), c.profile.begin(), c.profile.end());
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(args);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create((*cluster)->router_address());
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 2; ++i) {
    CallOptions options;
    options.timeout = absl::Seconds(60);
    absl::StatusOr<GenerateResult> result =
        (*client)->Generate(TextRequest(absl::StrCat(kOpenings[i], kLongPrompt), 8), options);
    ASSERT_FALSE(result.ok()) << "decoded " << result->text << " from damaged pages";
    EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
    EXPECT_THAT(result.status().message(),
                HasSubstr(absl::StrCat("failed verification (", c.reason, ")")))
        << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr(c.detail)) << result.status();
  }
  const Cluster::Process* decode = (*cluster)->Find("decode-0");
  ASSERT_NE(decode, nullptr);
  EXPECT_GE(
      Metric(decode->http_address,
             absl::StrCat("pdserve_decode_kv_pages_refused_total{reason=\"", c.reason, "\"}")),
      2);
  // Nothing leaks: the failed requests' pages return to the store within the lease + 2 s.
  const absl::Time deadline = absl::Now() + absl::Seconds(3 + 2);
  int64_t allocations = -1;
  while (absl::Now() < deadline) {
    absl::StatusOr<v1::PoolUsage> usage = (*cluster)->PoolUsage();
    ASSERT_TRUE(usage.ok()) << usage.status();
    allocations = usage->allocations();
    if (allocations == 0) break;
    absl::SleepFor(absl::Milliseconds(50));  // polling the store, not hiding a race
  }
  EXPECT_EQ(allocations, 0) << (*cluster)->LogTail();
}

INSTANTIATE_TEST_SUITE_P(
    Modes, FailClosedTest,
    ::testing::Values(
        Case{"checksum", {}, "checksum"}, Case{"checksum", kDefaultProfile, "checksum"},
        Case{"foreign", {}, "foreign"}, Case{"stale", {}, "stale"},
        Case{"value", {}, "checksum", "V head checksum mismatch"},
        // V rows are verified where KCache fetches them, at each step (every
        // layer a KCache layer).
        Case{"value",
             {"--swiftkv-layer=4", "--fp8=per-token", "--kcache-topn=32", "--kcache-full-layers=0"},
             "checksum",
             "V rows"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(info.param.mode, info.param.profile.empty() ? "" : "_kcache");
    });

}  // namespace
}  // namespace pdserve::integration
