// Gauge: a value that goes up and down (Prometheus gauge). Thread-safe and lock-free.
#ifndef PDSERVE_CORE_METRICS_GAUGE_H_
#define PDSERVE_CORE_METRICS_GAUGE_H_

#include <atomic>

namespace pdserve {

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double amount) { value_.fetch_add(amount, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_METRICS_GAUGE_H_
