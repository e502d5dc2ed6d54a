// Histogram: counts of observations in cumulative buckets plus their sum (Prometheus histogram).
// Thread-safe and lock-free: Observe is a binary search and three atomic adds.
#ifndef PDSERVE_CORE_METRICS_HISTOGRAM_H_
#define PDSERVE_CORE_METRICS_HISTOGRAM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace pdserve {

class Histogram {
 public:
  // `upper_bounds` must be finite and strictly increasing (the +Inf bucket is implied); the
  // registry checks this before constructing one.
  explicit Histogram(std::vector<double> upper_bounds);

  void Observe(double value);

  struct Snapshot {
    std::vector<double> upper_bounds;         // without +Inf
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf (== count)
    double sum = 0;
    uint64_t count = 0;
  };
  // Counts are read bucket by bucket, so a snapshot taken during Observe may include an
  // observation in count but not yet in sum; count always equals the +Inf bucket.
  Snapshot Collect() const;

 private:
  const std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative; +Inf last
  std::atomic<double> sum_{0.0};
};

// Bucket bounds `start`, `start·factor`, ... (`count` of them); for latencies and sizes.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Buckets for request latencies in seconds: 0.5 ms … ~2 min.
std::vector<double> LatencyBuckets();

}  // namespace pdserve

#endif  // PDSERVE_CORE_METRICS_HISTOGRAM_H_
