#include "core/metrics/buckets.h"

namespace pdserve {

prometheus::Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, int count) {
  prometheus::Histogram::BucketBoundaries bounds;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) bounds.push_back(bound);
  return bounds;
}

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05,
          0.075,  0.1,   0.15,   0.2,   0.3,    0.5,  0.75,  1.0,  1.5,  2.0,
          3.0,    5.0,   7.5,    10.0,  15.0,   20.0, 30.0,  60.0, 120.0};
}

}  // namespace pdserve
