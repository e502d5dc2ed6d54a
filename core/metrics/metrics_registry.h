// MetricsRegistry: the metrics of one process and their rendering for /metrics. Families are
// registered once at startup (a service builds its metrics struct from the registry) and then
// updated lock-free from any thread; Render is safe concurrently with updates.
//
// Names follow Prometheus conventions (base units, `_total` for counters, `_seconds`, `_bytes`);
// registering an invalid or duplicate name, or an invalid label name, is a programming error and
// aborts with a message naming it.
#ifndef PDSERVE_CORE_METRICS_METRICS_REGISTRY_H_
#define PDSERVE_CORE_METRICS_METRICS_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "core/metrics/counter.h"
#include "core/metrics/gauge.h"
#include "core/metrics/histogram.h"
#include "core/metrics/metric_family.h"

namespace pdserve {

// One series of a metric read at scrape time.
struct CallbackSample {
  std::vector<std::string> label_values;
  double value = 0;
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  MetricFamily<Counter>& AddCounter(const std::string& name, const std::string& help,
                                    std::vector<std::string> label_names = {});
  MetricFamily<Gauge>& AddGauge(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names = {});
  MetricFamily<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                        std::vector<double> upper_bounds,
                                        std::vector<std::string> label_names = {});
  // A gauge whose series `read` returns at every scrape (for values owned elsewhere: pool usage,
  // queue lengths). `read` runs on the scraping thread and must be thread-safe; it must not
  // outlive what it reads — register it only from objects that outlive the registry's server.
  void AddGaugeCallback(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names,
                        std::function<std::vector<CallbackSample>()> read);
  // The same for a counter kept elsewhere (`read` must return values that never decrease).
  void AddCounterCallback(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names,
                          std::function<std::vector<CallbackSample>()> read);

  // Every family in registration order, in the text exposition format.
  std::string Render() const;

 private:
  struct Entry;
  static std::unique_ptr<Entry> NewEntry(const std::string& name, const std::string& help,
                                         std::vector<std::string> label_names, const char* type);
  void Insert(std::unique_ptr<Entry> entry);
  void AddCallback(const std::string& name, const std::string& help,
                   std::vector<std::string> label_names,
                   std::function<std::vector<CallbackSample>()> read, const char* type);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_METRICS_METRICS_REGISTRY_H_
