// The hot path of metrics: a counter increment and a histogram observation, from 1 and 2 threads
// updating the same series (the contended case: every worker thread of a process records into
// one family). pdserve's own lock-free types against prometheus-cpp's, in one run.
#include <benchmark/benchmark.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "core/metrics/counter.h"
#include "core/metrics/histogram.h"
#include "core/metrics/metrics_registry.h"

namespace pdserve {
namespace {

// A value that walks over the latency buckets, so the bucket search is not always the same.
double NextLatency(int i) { return 0.0003 * static_cast<double>(1 + (i * 7919) % 4000); }

void BM_CounterIncrementOwn(benchmark::State& state) {
  static Counter counter;
  for (auto _ : state) counter.Increment();
  benchmark::DoNotOptimize(counter.Value());
}
BENCHMARK(BM_CounterIncrementOwn)->Threads(1)->Threads(2)->UseRealTime();

void BM_CounterIncrementPrometheus(benchmark::State& state) {
  static prometheus::Counter counter;
  for (auto _ : state) counter.Increment();
  benchmark::DoNotOptimize(counter.Value());
}
BENCHMARK(BM_CounterIncrementPrometheus)->Threads(1)->Threads(2)->UseRealTime();

void BM_HistogramObserveOwn(benchmark::State& state) {
  static Histogram histogram(LatencyBuckets());
  int i = state.thread_index();
  for (auto _ : state) histogram.Observe(NextLatency(i++));
}
BENCHMARK(BM_HistogramObserveOwn)->Threads(1)->Threads(2)->UseRealTime();

void BM_HistogramObservePrometheus(benchmark::State& state) {
  static prometheus::Histogram histogram(LatencyBuckets());
  int i = state.thread_index();
  for (auto _ : state) histogram.Observe(NextLatency(i++));
}
BENCHMARK(BM_HistogramObservePrometheus)->Threads(1)->Threads(2)->UseRealTime();

// A labelled series found by its label values, then incremented: what the services do once per
// request (requests by outcome and code).
void BM_LabelledIncrementOwn(benchmark::State& state) {
  static MetricsRegistry registry;
  static MetricFamily<Counter>& family =
      registry.AddCounter("requests_total", "r", {"outcome", "code"});
  for (auto _ : state) family.WithLabels({"completed", "OK"}).Increment();
}
BENCHMARK(BM_LabelledIncrementOwn)->Threads(1)->Threads(2)->UseRealTime();

void BM_LabelledIncrementPrometheus(benchmark::State& state) {
  static prometheus::Registry registry;
  static prometheus::Family<prometheus::Counter>& family =
      prometheus::BuildCounter().Name("requests_total").Help("r").Register(registry);
  for (auto _ : state) family.Add({{"outcome", "completed"}, {"code", "OK"}}).Increment();
}
BENCHMARK(BM_LabelledIncrementPrometheus)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace pdserve

BENCHMARK_MAIN();
