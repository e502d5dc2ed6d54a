#include "core/base/mutex.h"
// MetricsRegistry: the metrics of one process, kept by prometheus-cpp, and their rendering for
// /metrics. A service registers its families once at startup (AddCounter, AddGauge, AddHistogram
// return prometheus-cpp families; `family.Add(labels)` gives a series whose reference stays valid
// as long as the registry) and updates them from any thread; Render is safe concurrently with
// updates.
//
// What this layer adds to prometheus::Registry: values owned elsewhere (pool usage, queue
// lengths) exported by callbacks read at scrape time, which prometheus-cpp has no type for; and
// registration mistakes (an invalid or repeated name, help text the library would not escape)
// abort with a message naming the metric instead of throwing a bare std::invalid_argument.
// Names follow Prometheus conventions (base units, `_total` for counters, `_seconds`, `_bytes`).
#ifndef PDSERVE_CORE_METRICS_METRICS_REGISTRY_H_
#define PDSERVE_CORE_METRICS_METRICS_REGISTRY_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace pdserve {

// The Content-Type of what Render returns: the text exposition format 0.0.4.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// One series of a metric read at scrape time.
struct CallbackSample {
  prometheus::Labels labels;
  double value = 0;
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // `help` is one line without backslashes (prometheus-cpp 1.0 writes it unescaped).
  prometheus::Family<prometheus::Counter>& AddCounter(const std::string& name,
                                                      const std::string& help);
  prometheus::Family<prometheus::Gauge>& AddGauge(const std::string& name, const std::string& help);
  // Each series takes its bucket bounds when added: family.Add(labels, LatencyBuckets()).
  prometheus::Family<prometheus::Histogram>& AddHistogram(const std::string& name,
                                                          const std::string& help);

  // A gauge whose series `read` returns at every scrape. `read` runs on the scraping thread and
  // must be thread-safe; what it reads must outlive every Render of this registry.
  void AddGaugeCallback(const std::string& name, const std::string& help,
                        std::function<std::vector<CallbackSample>()> read);
  // The same for a counter kept elsewhere (`read` must return values that never decrease).
  void AddCounterCallback(const std::string& name, const std::string& help,
                          std::function<std::vector<CallbackSample>()> read);

  // Every series, in the text exposition format (kPrometheusContentType).
  std::string Render() const;

 private:
  class CallbackFamily;

  // Aborts unless `name` is a valid metric name not registered before and `help` is one plain
  // line; then reserves the name.
  void Reserve(const std::string& name, const std::string& help);
  template <typename Metric>
  prometheus::Family<Metric>& Register(prometheus::detail::Builder<Metric> builder,
                                       const std::string& name, const std::string& help);
  void AddCallback(const std::string& name, const std::string& help, prometheus::MetricType type,
                   std::function<std::vector<CallbackSample>()> read);

  prometheus::Registry registry_;
  mutable Mutex mu_;
  std::set<std::string> names_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<CallbackFamily>> callbacks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_METRICS_METRICS_REGISTRY_H_
