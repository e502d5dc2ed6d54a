// Bucket layouts for pdserve's histograms (deploy/metrics.txt names which family uses which; the
// dashboards' quantiles depend on them, so a change here is a change of the metrics contract).
#ifndef PDSERVE_CORE_METRICS_BUCKETS_H_
#define PDSERVE_CORE_METRICS_BUCKETS_H_

#include <prometheus/histogram.h>

namespace pdserve {

// Upper bounds `start`, `start·factor`, ... (`count` of them; the +Inf bucket is implied).
prometheus::Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, int count);
// Upper bounds for request latencies in seconds: 0.5 ms … 2 min.
prometheus::Histogram::BucketBoundaries LatencyBuckets();

}  // namespace pdserve

#endif  // PDSERVE_CORE_METRICS_BUCKETS_H_
