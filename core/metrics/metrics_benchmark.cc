// The hot path of metrics: a counter increment, a histogram observation and a labelled lookup,
// from 1 and 2 threads updating the same series (the contended case: every worker thread of a
// process records into one family). docs/measurements.md has these against the metric types
// pdserve had before prometheus-cpp, measured in one run.
#include <benchmark/benchmark.h>

#include "core/metrics/buckets.h"
#include "core/metrics/metrics_registry.h"

namespace pdserve {
namespace {

// A value that walks over the latency buckets, so the bucket search is not always the same.
double NextLatency(int i) { return 0.0003 * static_cast<double>(1 + (i * 7919) % 4000); }

MetricsRegistry& Registry() {
  static MetricsRegistry* registry = new MetricsRegistry;
  return *registry;
}

void BM_CounterIncrement(benchmark::State& state) {
  static prometheus::Counter& counter = Registry().AddCounter("c_total", "c").Add({});
  for (auto _ : state) counter.Increment();
  benchmark::DoNotOptimize(counter.Value());
}
BENCHMARK(BM_CounterIncrement)->Threads(1)->Threads(2)->UseRealTime();

void BM_HistogramObserve(benchmark::State& state) {
  static prometheus::Histogram& histogram =
      Registry().AddHistogram("h_seconds", "h").Add({}, LatencyBuckets());
  int i = state.thread_index();
  for (auto _ : state) histogram.Observe(NextLatency(i++));
}
BENCHMARK(BM_HistogramObserve)->Threads(1)->Threads(2)->UseRealTime();

// A labelled series found by its label values, then incremented: what the services do once per
// request (requests by outcome and code).
void BM_LabelledIncrement(benchmark::State& state) {
  static prometheus::Family<prometheus::Counter>& family =
      Registry().AddCounter("requests_total", "r");
  for (auto _ : state) family.Add({{"outcome", "completed"}, {"code", "OK"}}).Increment();
}
BENCHMARK(BM_LabelledIncrement)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace pdserve

BENCHMARK_MAIN();
