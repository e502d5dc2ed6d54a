// The contract checker on hand-written pages: it must accept a page that keeps the contract and
// name each way a page can break it.
#include "tests/integration/metrics_contract.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace pdserve::integration {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kContract[] = R"(# a contract
buckets small 0.5 1
pdserve_a_total counter decode labels=code
pdserve_b gauge all
pdserve_c_seconds histogram decode,prefill labels=path buckets=small
pdserve_d gauge router
)";

constexpr char kGoodPage[] = R"(# HELP pdserve_a_total a
# TYPE pdserve_a_total counter
pdserve_a_total{code="OK"} 3
pdserve_a_total{code="a \"quoted\", value"} 1
# TYPE pdserve_b gauge
pdserve_b 1
# TYPE pdserve_c_seconds histogram
pdserve_c_seconds_count{path="/x"} 2
pdserve_c_seconds_sum{path="/x"} 1.25
pdserve_c_seconds_bucket{path="/x",le="0.5"} 1
pdserve_c_seconds_bucket{path="/x",le="1"} 1
pdserve_c_seconds_bucket{path="/x",le="+Inf"} 2
# TYPE other_metric gauge
other_metric{anything="goes"} 1
)";

class MetricsContractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(::testing::TempDir(), "/metrics-contract-", getpid(), ".txt");
    std::ofstream(path_) << kContract;
    std::vector<std::string> errors;
    contract_ = LoadMetricsContract(path_, errors);
    ASSERT_THAT(errors, IsEmpty());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::vector<std::string> Check(std::string page, const std::string& from, const std::string& to) {
    if (!from.empty()) page.replace(page.find(from), from.size(), to);
    return CheckMetricsPage(page, "decode", contract_);
  }

  std::string path_;
  std::map<std::string, ContractMetric> contract_;
};

TEST_F(MetricsContractTest, LoadsTypesRolesLabelsAndBuckets) {
  ASSERT_EQ(contract_.size(), 4u);
  const ContractMetric& c = contract_.at("pdserve_c_seconds");
  EXPECT_EQ(c.type, "histogram");
  EXPECT_THAT(c.roles, ElementsAre("decode", "prefill"));
  EXPECT_THAT(c.labels, ElementsAre("path"));
  EXPECT_THAT(c.buckets, ElementsAre(0.5, 1));
  EXPECT_THAT(contract_.at("pdserve_b").labels, IsEmpty());
}

TEST_F(MetricsContractTest, AcceptsAPageThatKeepsIt) {
  EXPECT_THAT(Check(kGoodPage, "", ""), IsEmpty());
  // A router need not expose decode's metrics, but must expose its own.
  EXPECT_THAT(CheckMetricsPage(kGoodPage, "router", contract_),
              ElementsAre("pdserve_d is not exposed",
                          "pdserve_a_total is exposed by a router, which the contract does not "
                          "list",
                          "pdserve_c_seconds is exposed by a router, which the contract does not "
                          "list"));
}

TEST_F(MetricsContractTest, NamesEveryBreach) {
  EXPECT_THAT(Check(kGoodPage, "pdserve_b 1\n", ""), ElementsAre("pdserve_b is not exposed"));
  EXPECT_THAT(Check(kGoodPage, "pdserve_b gauge", "pdserve_b counter"),
              ElementsAre("pdserve_b is a counter, the contract says gauge"));
  EXPECT_THAT(Check(kGoodPage, "{code=\"OK\"}", "{code=\"OK\",extra=\"1\"}"),
              ElementsAre(HasSubstr("labelled {code,extra}, the contract says {code}")));
  EXPECT_THAT(Check(kGoodPage, "le=\"0.5\"", "le=\"0.25\""),
              ElementsAre(HasSubstr("has buckets 0.25,1,+Inf, the contract says 0.5,1,+Inf")));
  EXPECT_THAT(Check(kGoodPage, "pdserve_c_seconds_bucket{path=\"/x\",le=\"+Inf\"} 2\n", ""),
              ElementsAre(HasSubstr("(no +Inf)")));
  EXPECT_THAT(Check(kGoodPage, "other_metric", "pdserve_other"),
              ElementsAre("pdserve_other is exposed but not in the contract"));
  EXPECT_THAT(Check(kGoodPage, "pdserve_b 1", "pdserve_b{x=\"unterminated} 1"),
              ElementsAre(HasSubstr("cannot parse"), "pdserve_b is not exposed"));
}

TEST_F(MetricsContractTest, AnUndefinedLayoutIsAnError) {
  std::ofstream(path_) << "pdserve_h histogram all buckets=missing\n";
  std::vector<std::string> errors;
  LoadMetricsContract(path_, errors);
  EXPECT_THAT(errors, ElementsAre("pdserve_h: no bucket layout 'missing'"));
}

}  // namespace
}  // namespace pdserve::integration
