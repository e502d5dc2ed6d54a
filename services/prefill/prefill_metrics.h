// A prefill worker's metrics (names in deploy/metrics.txt): its queue, batch sizes, forward time,
// requests by code, KV pages put into the KV store, and the compression the KV techniques give:
// pdserve_prefill_kv_uncompressed_bytes_total counts what the plain model's fp32 K and V of the
// same prompts would take, pdserve_prefill_kv_stored_bytes_total what was written.
#ifndef PDSERVE_SERVICES_PREFILL_PREFILL_METRICS_H_
#define PDSERVE_SERVICES_PREFILL_PREFILL_METRICS_H_

#include <functional>
#include <vector>

#include "core/metrics/metrics_registry.h"
#include "pdserve/v1/common.pb.h"
#include "services/common/kv_transfer_metrics.h"

namespace pdserve {

struct PrefillMetrics {
  // `queue` is called at every scrape and must stay callable as long as `metrics` is scraped.
  PrefillMetrics(MetricsRegistry& metrics, std::function<v1::QueueStatus()> queue);

  prometheus::Family<prometheus::Counter>& requests;  // {code}
  prometheus::Histogram& batch_requests;
  prometheus::Histogram& batch_tokens;
  prometheus::Histogram& forward_seconds;
  prometheus::Counter& uncompressed_bytes;
  prometheus::Counter& stored_bytes;
  prometheus::Counter& cached_tokens;
  prometheus::Counter& cache_refused_pages;
  KvTransferMetrics transfer;    // direction "put": pages written
  KvTransferMetrics cache_read;  // direction "get": prefix-cache pages read

 private:
  PrefillMetrics(MetricsRegistry& metrics, std::function<v1::QueueStatus()> queue,
                 const std::vector<KvTransferMetrics>& transfers);
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_PREFILL_PREFILL_METRICS_H_
