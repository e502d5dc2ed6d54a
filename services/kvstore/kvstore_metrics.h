// The KV store's metrics (names in deploy/metrics.txt): slots by state, slot size, live leases
// and how allocations ended, read from the PagePool at scrape time, plus allocation calls by
// status code (counted by the service).
#ifndef PDSERVE_SERVICES_KVSTORE_KVSTORE_METRICS_H_
#define PDSERVE_SERVICES_KVSTORE_KVSTORE_METRICS_H_

#include "core/metrics/metrics_registry.h"
#include "services/kvstore/page_pool.h"

namespace pdserve {

// Registers the families; `pool` must outlive every scrape of `metrics`. Returns
// pdserve_kvstore_allocations_total{code}, for the service to count Allocate calls.
prometheus::Family<prometheus::Counter>& AddKvStoreMetrics(MetricsRegistry& metrics,
                                                           const PagePool& pool);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_KVSTORE_KVSTORE_METRICS_H_
