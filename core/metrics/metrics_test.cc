#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "core/metrics/build_info.h"
#include "core/metrics/exposition.h"
#include "core/metrics/metrics_registry.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

TEST(ExpositionTest, NamesFollowPrometheusRules) {
  EXPECT_TRUE(IsValidMetricName("pdserve_router_requests_total"));
  EXPECT_TRUE(IsValidMetricName("job:rate5m"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("9lives"));
  EXPECT_FALSE(IsValidMetricName("has-dash"));
  EXPECT_TRUE(IsValidLabelName("code"));
  EXPECT_FALSE(IsValidLabelName("__reserved"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
}

TEST(ExpositionTest, EscapesLabelValuesAndFormatsNumbers) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(FormatSampleValue(0.25), "0.25");
  EXPECT_EQ(FormatSampleValue(3), "3");
  EXPECT_EQ(FormatSampleValue(1e-9), "1e-09");
  EXPECT_EQ(FormatSampleValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatSampleValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatSampleValue(std::nan("")), "NaN");
}

TEST(MetricsRegistryTest, RendersTheTextFormat) {
  MetricsRegistry registry;
  MetricFamily<Counter>& requests =
      registry.AddCounter("x_requests_total", "Requests\nby code", {"code"});
  requests.WithLabels({"OK"}).Increment(3);
  requests.WithLabels({"NOT_FOUND"}).Increment();
  registry.AddGauge("x_queue", "Queued \\ requests").Get().Set(-2.5);
  Histogram& latency = registry.AddHistogram("x_latency_seconds", "Latency", {0.1, 1}).Get();
  latency.Observe(0.1);  // on the bound: counted in le="0.1"
  latency.Observe(0.5);
  latency.Observe(7);
  registry.AddGaugeCallback("x_pool", "Pool", {"state"}, [] {
    return std::vector<CallbackSample>{{{"free"}, 10}, {{"used\"x"}, 2}};
  });

  EXPECT_EQ(registry.Render(),
            "# HELP x_requests_total Requests\\nby code\n"
            "# TYPE x_requests_total counter\n"
            "x_requests_total{code=\"NOT_FOUND\"} 1\n"
            "x_requests_total{code=\"OK\"} 3\n"
            "# HELP x_queue Queued \\\\ requests\n"
            "# TYPE x_queue gauge\n"
            "x_queue -2.5\n"
            "# HELP x_latency_seconds Latency\n"
            "# TYPE x_latency_seconds histogram\n"
            "x_latency_seconds_bucket{le=\"0.1\"} 1\n"
            "x_latency_seconds_bucket{le=\"1\"} 2\n"
            "x_latency_seconds_bucket{le=\"+Inf\"} 3\n"
            "x_latency_seconds_sum 7.6\n"
            "x_latency_seconds_count 3\n"
            "# HELP x_pool Pool\n"
            "# TYPE x_pool gauge\n"
            "x_pool{state=\"free\"} 10\n"
            "x_pool{state=\"used\\\"x\"} 2\n");
}

TEST(MetricsRegistryTest, LabelledHistogramPutsLeLast) {
  MetricsRegistry registry;
  registry.AddHistogram("h_seconds", "h", {1}, {"role"}).WithLabels({"decode"}).Observe(2);
  EXPECT_THAT(registry.Render(), HasSubstr("h_seconds_bucket{role=\"decode\",le=\"+Inf\"} 1\n"));
  EXPECT_THAT(registry.Render(), HasSubstr("h_seconds_count{role=\"decode\"} 1\n"));
}

TEST(MetricsRegistryTest, WrongNumberOfLabelValuesNeverCrashes) {
  MetricsRegistry registry;
  MetricFamily<Counter>& family = registry.AddCounter("c_total", "c", {"a", "b"});
  family.WithLabels({"only-a"}).Increment();
  family.WithLabels({"1", "2", "3"}).Increment();
  EXPECT_THAT(registry.Render(), HasSubstr("c_total{a=\"only-a\",b=\"\"} 1\n"));
  EXPECT_THAT(registry.Render(), HasSubstr("c_total{a=\"1\",b=\"2\"} 1\n"));
}

TEST(MetricsRegistryTest, CountersNeverGoDown) {
  MetricsRegistry registry;
  Counter& counter = registry.AddCounter("c_total", "c").Get();
  counter.Increment(2);
  counter.Increment(-5);
  EXPECT_EQ(counter.Value(), 2);
}

TEST(MetricsRegistryTest, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry registry;
  Counter& counter = registry.AddCounter("c_total", "c").Get();
  Histogram& histogram = registry.AddHistogram("h", "h", {0.5}).Get();
  std::vector<std::thread> threads;
  constexpr int kThreads = 4, kPerThread = 20000;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        counter.Increment();
        histogram.Observe(i % 2);
      }
      registry.Render();  // concurrent with the other threads' updates
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(counter.Value(), kThreads * kPerThread);
  const Histogram::Snapshot snapshot = histogram.Collect();
  EXPECT_EQ(snapshot.count, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(snapshot.cumulative_counts[0], static_cast<uint64_t>(kThreads * kPerThread / 2));
  EXPECT_EQ(snapshot.sum, kThreads * kPerThread / 2);
}

TEST(MetricsRegistryDeathTest, RegistrationMistakesAbortWithTheName) {
  MetricsRegistry registry;
  registry.AddCounter("dup_total", "d");
  EXPECT_DEATH(registry.AddCounter("dup_total", "d"), "dup_total.*registered twice");
  EXPECT_DEATH(registry.AddGauge("bad-name", "b"), "invalid metric name 'bad-name'");
  EXPECT_DEATH(registry.AddGauge("g", "g", {"le"}), "invalid label name 'le'");
  EXPECT_DEATH(registry.AddHistogram("h", "h", {1, 1}), "strictly increasing");
}

TEST(BuildInfoTest, ExportsVersionAndRole) {
  MetricsRegistry registry;
  AddBuildInfo(registry, "decode");
  EXPECT_THAT(registry.Render(), HasSubstr(std::string("pdserve_build_info{version=\"") +
                                           PdserveVersion() + "\",role=\"decode\"} 1\n"));
  EXPECT_THAT(registry.Render(), HasSubstr("pdserve_process_start_time_seconds 1"));
}

TEST(HistogramTest, ExponentialBuckets) {
  EXPECT_THAT(ExponentialBuckets(1, 2, 4), ::testing::ElementsAre(1, 2, 4, 8));
}

}  // namespace
}  // namespace pdserve
