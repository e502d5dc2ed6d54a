#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/metrics/buckets.h"
#include "core/metrics/build_info.h"
#include "core/metrics/metrics_registry.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Bounds = prometheus::Histogram::BucketBoundaries;

// The lines of a rendered page that are samples (not comments), for order-free comparisons:
// prometheus-cpp keeps a family's series in a hash map.
std::vector<std::string> SampleLines(const std::string& page) {
  std::vector<std::string> lines;
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  return lines;
}

TEST(MetricsRegistryTest, RendersEveryKindInTheTextFormat) {
  MetricsRegistry registry;
  prometheus::Family<prometheus::Counter>& requests =
      registry.AddCounter("x_requests_total", "Requests by code");
  requests.Add({{"code", "OK"}}).Increment(3);
  requests.Add({{"code", "NOT_FOUND"}}).Increment();
  registry.AddGauge("x_queue", "Queued requests").Add({}).Set(-2.5);
  prometheus::Histogram& latency =
      registry.AddHistogram("x_latency_seconds", "Latency").Add({}, Bounds{0.1, 1});
  latency.Observe(0.1);  // on the bound: counted in le="0.1"
  latency.Observe(0.5);
  latency.Observe(7);
  registry.AddGaugeCallback("x_pool", "Pool", [] {
    return std::vector<CallbackSample>{{{{"state", "free"}}, 10}, {{{"state", "used\"x"}}, 2}};
  });
  registry.AddCounterCallback("x_frees_total", "Frees", [] {
    return std::vector<CallbackSample>{{{}, 4}};
  });

  const std::string page = registry.Render();
  for (const char* header :
       {"# HELP x_requests_total Requests by code\n# TYPE x_requests_total counter\n",
        "# HELP x_queue Queued requests\n# TYPE x_queue gauge\n",
        "# TYPE x_latency_seconds histogram\n", "# HELP x_pool Pool\n# TYPE x_pool gauge\n",
        "# TYPE x_frees_total counter\n"}) {
    EXPECT_THAT(page, HasSubstr(header));
  }
  EXPECT_THAT(SampleLines(page),
              ::testing::UnorderedElementsAre(
                  "x_requests_total{code=\"NOT_FOUND\"} 1", "x_requests_total{code=\"OK\"} 3",
                  "x_queue -2.5", "x_latency_seconds_bucket{le=\"0.1\"} 1",
                  "x_latency_seconds_bucket{le=\"1\"} 2", "x_latency_seconds_bucket{le=\"+Inf\"} 3",
                  "x_latency_seconds_sum 7.6", "x_latency_seconds_count 3",
                  "x_pool{state=\"free\"} 10", "x_pool{state=\"used\\\"x\"} 2", "x_frees_total 4"));
}

TEST(MetricsRegistryTest, LabelledHistogramPutsLeLast) {
  MetricsRegistry registry;
  registry.AddHistogram("h_seconds", "h").Add({{"role", "decode"}}, Bounds{1}).Observe(2);
  EXPECT_THAT(registry.Render(), HasSubstr("h_seconds_bucket{role=\"decode\",le=\"+Inf\"} 1\n"));
  EXPECT_THAT(registry.Render(), HasSubstr("h_seconds_count{role=\"decode\"} 1\n"));
}

TEST(MetricsRegistryTest, LabelValuesAreEscaped) {
  MetricsRegistry registry;
  registry.AddCounter("c_total", "c").Add({{"path", "a\"b\\c\nd"}}).Increment();
  EXPECT_THAT(registry.Render(), HasSubstr("c_total{path=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

TEST(MetricsRegistryTest, CallbacksAreReadAtEveryRender) {
  MetricsRegistry registry;
  double value = 1;
  registry.AddGaugeCallback("g", "g", [&value] {
    return std::vector<CallbackSample>{{{}, value}};
  });
  EXPECT_THAT(registry.Render(), HasSubstr("\ng 1\n"));
  value = 5;
  EXPECT_THAT(registry.Render(), HasSubstr("\ng 5\n"));
  EXPECT_THAT(registry.Render(), Not(HasSubstr("\ng 1\n")));
}

TEST(MetricsRegistryTest, CountersNeverGoDown) {
  MetricsRegistry registry;
  prometheus::Counter& counter = registry.AddCounter("c_total", "c").Add({});
  counter.Increment(2);
  counter.Increment(-5);
  EXPECT_EQ(counter.Value(), 2);
}

TEST(MetricsRegistryTest, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry registry;
  prometheus::Counter& counter = registry.AddCounter("c_total", "c").Add({});
  prometheus::Histogram& histogram = registry.AddHistogram("h", "h").Add({}, Bounds{0.5});
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
  const std::string page = registry.Render();
  const std::string total = std::to_string(kThreads * kPerThread);
  EXPECT_THAT(page, HasSubstr("\nc_total " + total + "\n"));
  EXPECT_THAT(page, HasSubstr("\nh_count " + total + "\n"));
  EXPECT_THAT(page,
              HasSubstr("\nh_bucket{le=\"0.5\"} " + std::to_string(kThreads * kPerThread / 2)));
  EXPECT_THAT(page, HasSubstr("\nh_sum " + std::to_string(kThreads * kPerThread / 2) + "\n"));
}

TEST(MetricsRegistryDeathTest, RegistrationMistakesAbortWithTheName) {
  MetricsRegistry registry;
  registry.AddCounter("dup_total", "d");
  registry.AddGaugeCallback("cb", "c", [] { return std::vector<CallbackSample>{}; });
  EXPECT_DEATH(registry.AddCounter("dup_total", "d"), "dup_total.*registered twice");
  EXPECT_DEATH(registry.AddGauge("cb", "d"), "'cb' registered twice");
  EXPECT_DEATH(registry.AddGaugeCallback("dup_total", "d", {}), "dup_total.*registered twice");
  EXPECT_DEATH(registry.AddGauge("bad-name", "b"), "invalid metric name 'bad-name'");
  EXPECT_DEATH(registry.AddGauge("g", "two\nlines"), "help of g must be one line");
}

TEST(BuildInfoTest, ExportsVersionAndRole) {
  MetricsRegistry registry;
  AddBuildInfo(registry, "decode");
  const std::string page = registry.Render();
  EXPECT_THAT(page, HasSubstr(std::string("pdserve_build_info{role=\"decode\",version=\"") +
                              PdserveVersion() + "\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("\npdserve_process_start_time_seconds 1"));
}

TEST(BucketsTest, ExponentialAndLatencyBounds) {
  EXPECT_THAT(ExponentialBuckets(1, 2, 4), ::testing::ElementsAre(1, 2, 4, 8));
  const prometheus::Histogram::BucketBoundaries latency = LatencyBuckets();
  EXPECT_TRUE(std::is_sorted(latency.begin(), latency.end()));
  EXPECT_EQ(latency.front(), 0.0005);
  EXPECT_EQ(latency.back(), 120.0);
}

}  // namespace
}  // namespace pdserve
