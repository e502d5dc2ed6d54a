// Counter: a monotonically increasing value (Prometheus counter). Thread-safe and lock-free; the
// hot path is one atomic add.
#ifndef PDSERVE_CORE_METRICS_COUNTER_H_
#define PDSERVE_CORE_METRICS_COUNTER_H_

#include <atomic>

namespace pdserve {

class Counter {
 public:
  // `amount` must be ≥ 0 (a negative amount is ignored: counters never go down).
  void Increment(double amount = 1.0) {
    if (amount > 0) value_.fetch_add(amount, std::memory_order_relaxed);
  }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_METRICS_COUNTER_H_
