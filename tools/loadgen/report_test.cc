#include "tools/loadgen/report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace pdserve::loadgen {
namespace {

RequestRecord Completed(int id, double send, std::vector<double> tokens, double done, int prompt) {
  RequestRecord r;
  r.id = id;
  r.sent = true;
  r.send_s = send;
  r.token_s = std::move(tokens);
  r.done_s = done;
  r.prompt_tokens = prompt;
  r.output_tokens = static_cast<int>(r.token_s.size());
  r.requested_tokens = r.output_tokens;
  return r;
}

// Hand-computed:
//   r0: send 0.0, tokens 0.1 0.2 0.4 → TTFT 0.1, e2e 0.4, TPOT (0.4−0.1)/2 = 0.15, gaps .1 .2
//   r1: send 1.0, tokens 1.3 1.4, stream ends 1.5 → TTFT 0.3, e2e 0.4, TPOT 0.1, gap .1
//   r2: sent 0.5, UNAVAILABLE;  r3: warm-up (ignored);  r4: never sent (abandoned)
//   r0 was retried twice after refusals, r2 once; the warm-up's retry is not counted.
std::vector<RequestRecord> Records() {
  std::vector<RequestRecord> records;
  records.push_back(Completed(0, 0.0, {0.1, 0.2, 0.4}, 0.4, 10));
  records.back().retries = 2;
  records.back().queue_s = 0.05;
  records.push_back(Completed(1, 1.0, {1.3, 1.4}, 1.5, 20));
  RequestRecord failed;
  failed.id = 2;
  failed.sent = true;
  failed.send_s = 0.5;
  failed.done_s = 0.6;
  failed.code = "UNAVAILABLE";
  failed.error = "no worker";
  failed.retries = 1;
  records.push_back(failed);
  RequestRecord warm = Completed(3, 0.0, {5.0}, 9.0, 99);
  warm.warmup = true;
  warm.retries = 4;
  records.push_back(warm);
  RequestRecord abandoned;
  abandoned.id = 4;
  records.push_back(abandoned);
  return records;
}

TEST(Percentile, InterpolatesBetweenClosestRanks) {
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 99), 3.97);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({7}, 90), 7);
  EXPECT_TRUE(std::isnan(Percentile({}, 50)));
  const Summary empty = Summarize({});
  EXPECT_EQ(empty.count, 0u);
  EXPECT_TRUE(std::isnan(empty.p99));
}

TEST(Report, MatchesHandComputedStatistics) {
  const Slo slo{0.2, 0.2, 0};
  const Report r = ComputeReport(Records(), slo);
  EXPECT_EQ(r.measured, 4);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.abandoned, 1);
  EXPECT_EQ(r.errors.at("UNAVAILABLE"), 1);
  EXPECT_EQ(r.first_errors.at("UNAVAILABLE"), "no worker");
  EXPECT_EQ(r.retried_requests, 2);
  EXPECT_EQ(r.queue_s.count, 1u);  // r1's protocol reported none
  EXPECT_DOUBLE_EQ(r.queue_s.mean, 0.05);
  EXPECT_EQ(r.retries, 3);

  EXPECT_EQ(r.ttft_s.count, 2u);
  EXPECT_NEAR(r.ttft_s.mean, 0.2, 1e-12);
  EXPECT_NEAR(r.ttft_s.p50, 0.2, 1e-12);
  EXPECT_NEAR(r.ttft_s.p90, 0.28, 1e-12);
  EXPECT_NEAR(r.ttft_s.p99, 0.298, 1e-12);
  EXPECT_NEAR(r.ttft_s.max, 0.3, 1e-12);

  EXPECT_NEAR(r.tpot_s.mean, 0.125, 1e-12);
  EXPECT_NEAR(r.tpot_s.max, 0.15, 1e-12);
  EXPECT_NEAR(r.e2e_s.mean, 0.4, 1e-12);  // send → last token, not → end of stream

  EXPECT_EQ(r.itl_s.count, 3u);  // pooled: .1 .2 (r0) and .1 (r1)
  EXPECT_NEAR(r.itl_s.mean, 0.4 / 3, 1e-12);
  EXPECT_NEAR(r.itl_s.p50, 0.1, 1e-12);
  EXPECT_NEAR(r.itl_s.p90, 0.18, 1e-12);

  // First measured send 0.0 → last completion 1.5.
  EXPECT_NEAR(r.duration_s, 1.5, 1e-12);
  EXPECT_NEAR(r.request_throughput, 2 / 1.5, 1e-12);
  EXPECT_NEAR(r.input_tokens_per_s, 30 / 1.5, 1e-12);
  EXPECT_NEAR(r.output_tokens_per_s, 5 / 1.5, 1e-12);
  // Only r0 meets TTFT ≤ 200 ms (r1: 300 ms); failed and abandoned count as missing.
  EXPECT_EQ(r.slo_met, 1);
  EXPECT_NEAR(r.slo_attainment, 0.25, 1e-12);
  EXPECT_NEAR(r.goodput, 1 / 1.5, 1e-12);
}

TEST(Report, GoodputNeedsEverySloButAttainmentOnlyTtftAndTpot) {
  const Report r = ComputeReport(Records(), Slo{0.2, 0.2, 0.3});  // r0's e2e is 0.4
  EXPECT_EQ(r.goodput, 0);
  EXPECT_NEAR(r.slo_attainment, 0.25, 1e-12);
  const Report none = ComputeReport(Records(), Slo{});
  EXPECT_NEAR(none.goodput, none.request_throughput, 1e-12);
  EXPECT_NEAR(none.slo_attainment, 0.5, 1e-12);  // completed / measured
}

// The cached share counts completed requests whose server reported it, and only those.
TEST(Report, CachedPromptShareOverRequestsThatReportIt) {
  std::vector<RequestRecord> records = Records();
  EXPECT_TRUE(ReportJson(ComputeReport(records, Slo{}), Slo{})["cached_prompt_tokens"].is_null());
  records[0].cached_tokens = 6;  // completed, 10 prompt tokens
  records[2].cached_tokens = 9;  // failed: left out
  const Report r = ComputeReport(records, Slo{});
  EXPECT_EQ(r.cached_prompt_tokens, 6);
  EXPECT_EQ(r.prompt_tokens_reporting_cache, 10);
  const nlohmann::json j = ReportJson(r, Slo{});
  EXPECT_NEAR(j["cached_prompt_tokens"]["share"].get<double>(), 0.6, 1e-12);
  EXPECT_THAT(RequestsCsv(records), ::testing::HasSubstr(",OK,6\n"));
}

TEST(Report, JsonAndCsv) {
  const Slo slo{0.2, 0, 0};
  const nlohmann::json j = ReportJson(ComputeReport(Records(), slo), slo);
  for (const char* key :
       {"requests", "duration_s", "ttft_s", "tpot_s", "itl_s", "e2e_s", "request_throughput",
        "input_tokens_per_s", "output_tokens_per_s", "goodput", "slo", "slo_met", "slo_attainment",
        "queue_s", "retried_requests", "retries", "errors", "first_error_messages"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["requests"]["completed"], 2);
  EXPECT_EQ(j["slo"]["ttft_ms"], 200.0);
  EXPECT_TRUE(j["slo"]["tpot_ms"].is_null());
  EXPECT_EQ(j["ttft_s"]["count"], 2);
  for (const char* key : {"mean", "p50", "p90", "p99", "max"}) {
    EXPECT_TRUE(j["ttft_s"].contains(key)) << key;
  }

  const std::string csv = RequestsCsv(Records());
  EXPECT_THAT(csv, ::testing::StartsWith(
                       "id,warmup,send_s,prompt_tokens,output_tokens,ttft_s,tpot_s,e2e_s,code,"
                       "cached_tokens\n"
                       "0,0,0.000000,10,3,0.100000,0.150000,0.400000,OK,\n"));
  EXPECT_THAT(csv, ::testing::HasSubstr("\n2,0,0.500000,0,0,,,0.100000,UNAVAILABLE,\n"));
  EXPECT_THAT(csv, ::testing::HasSubstr("\n4,0,,0,0,,,,ABANDONED,\n"));
}

}  // namespace
}  // namespace pdserve::loadgen
