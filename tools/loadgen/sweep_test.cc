#include "tools/loadgen/sweep.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tools/loadgen/plot.h"

namespace pdserve::loadgen {
namespace {

using ::testing::HasSubstr;

TEST(SweepRates, ParsesListsAndGeometricForm) {
  EXPECT_EQ(*ParseSweepRates("1,2,4.5"), (std::vector<double>{1, 2, 4.5}));
  EXPECT_EQ(*ParseSweepRates("0.5:2:4"), (std::vector<double>{0.5, 1, 2, 4}));
  for (const char* bad : {"", "1,,2", "1,x", "0,1", "-1", "1:2", "1:1:3", "1:2:0"}) {
    absl::StatusOr<std::vector<double>> rates = ParseSweepRates(bad);
    ASSERT_FALSE(rates.ok()) << bad;
    EXPECT_THAT(std::string(rates.status().message()), HasSubstr("--sweep-rates")) << bad;
  }
}

Report WithAttainment(double attainment, double goodput) {
  Report r;
  r.slo_attainment = attainment;
  r.goodput = goodput;
  r.request_throughput = goodput * 1.1;
  r.ttft_s = Summarize({0.01, 0.02});
  r.tpot_s = Summarize({0.003});
  return r;
}

SweepResult Sample() {
  const std::map<double, double> attainment = {{1, 1.0}, {2, 0.95}, {4, 0.9}, {8, 0.4}};
  absl::StatusOr<SweepResult> sweep = RunSweep({1, 2, 4, 8}, 0.9, [&](double rate) {
    return absl::StatusOr<Report>(WithAttainment(attainment.at(rate), rate * attainment.at(rate)));
  });
  return *sweep;
}

TEST(Sweep, FindsTheHighestRateMeetingTheTarget) {
  const SweepResult sweep = Sample();
  ASSERT_EQ(sweep.points.size(), 4u);
  ASSERT_TRUE(sweep.max_rate_meeting_slo.has_value());
  EXPECT_EQ(*sweep.max_rate_meeting_slo, 4);  // ≥ 0.9 inclusive
  EXPECT_FALSE(MaxRateMeetingSlo(sweep.points, 1.01).has_value());
  // A non-monotone sweep still reports the highest passing rate.
  std::vector<SweepPoint> points = {{1, WithAttainment(0.5, 0)}, {2, WithAttainment(0.95, 0)}};
  EXPECT_EQ(*MaxRateMeetingSlo(points, 0.9), 2);

  absl::StatusOr<SweepResult> failed = RunSweep(
      {1, 2}, 0.9, [](double) -> absl::StatusOr<Report> { return absl::UnavailableError("down"); });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
}

TEST(Sweep, JsonAndCsv) {
  const SweepResult sweep = Sample();
  const nlohmann::json j = SweepJson(sweep, Slo{0.1, 0.01, 0});
  EXPECT_EQ(j["max_rate_meeting_slo"], 4.0);
  EXPECT_EQ(j["attainment_target"], 0.9);
  ASSERT_EQ(j["points"].size(), 4u);
  EXPECT_EQ(j["points"][3]["rate"], 8.0);
  EXPECT_EQ(j["slo"]["ttft_ms"], 100.0);
  const std::string csv = SweepCsv(sweep);
  EXPECT_THAT(csv, ::testing::StartsWith("rate,completed,failed,abandoned,request_throughput,"
                                         "goodput,slo_attainment,ttft_p50_ms,ttft_p99_ms,"
                                         "tpot_p50_ms,tpot_p99_ms,output_tokens_per_s\n"));
  EXPECT_THAT(csv, HasSubstr("\n8,0,0,0,3.5200,3.2000,0.4000,15.000,19.900,3.000,3.000,0.00\n"));
}

TEST(Plot, ScriptsCarryTheDataAndLimits) {
  const SweepResult sweep = Sample();
  const std::string latency = LatencyPlotScript(sweep, Slo{0.1, 0.01, 0}, "/tmp/x.png");
  EXPECT_THAT(latency, HasSubstr("set output '/tmp/x.png'"));
  EXPECT_THAT(latency, HasSubstr("\n8 15 19.9 3 3\n"));
  EXPECT_THAT(latency, HasSubstr("100 with lines dt 2"));
  EXPECT_THAT(latency, HasSubstr("10 axes x1y2 with lines dt 2"));
  EXPECT_THAT(latency, HasSubstr("set logscale x 2"));
  const std::string goodput = GoodputPlotScript(sweep, "/tmp/it's.png");
  EXPECT_THAT(goodput, HasSubstr("set output '/tmp/it''s.png'"));
  EXPECT_THAT(goodput, HasSubstr("max rate meeting SLO: 4 req/s"));
  EXPECT_THAT(goodput, HasSubstr("\n2 1.9 2.09 0.95\n"));
}

TEST(Plot, GnuplotDrawsNonEmptyPngs) {
  if (!GnuplotAvailable()) GTEST_SKIP() << "gnuplot is not installed";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "pdserve_loadgen_plot_test";
  std::filesystem::create_directories(dir);
  const SweepResult sweep = Sample();
  const std::string latency_png = (dir / "latency.png").string();
  const std::string goodput_png = (dir / "goodput.png").string();
  std::filesystem::remove(latency_png);
  std::filesystem::remove(goodput_png);
  ASSERT_TRUE(RunGnuplot(LatencyPlotScript(sweep, Slo{0.1, 0.01, 0}, latency_png),
                         (dir / "latency.gp").string())
                  .ok());
  ASSERT_TRUE(
      RunGnuplot(GoodputPlotScript(sweep, goodput_png), (dir / "goodput.gp").string()).ok());
  EXPECT_GT(std::filesystem::file_size(latency_png), 1000u);
  EXPECT_GT(std::filesystem::file_size(goodput_png), 1000u);

  const absl::Status bad = RunGnuplot("this is not gnuplot\n", (dir / "bad.gp").string());
  EXPECT_EQ(bad.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(bad.message()), HasSubstr("gnuplot failed"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pdserve::loadgen
