// KV page traffic between a worker and the KV store, by direction ("put": prefill writes pages,
// "get": decode reads them, and prefill reads prefix-cache pages): bytes, pages and the seconds
// spent in transfer calls, so that rate(bytes) / rate(seconds) is the achieved bandwidth. Also
// which UCX transports the worker's KV store connections use (pdserve_ucx_transport_info{transport}
// = 1).
#ifndef PDSERVE_SERVICES_COMMON_KV_TRANSFER_METRICS_H_
#define PDSERVE_SERVICES_COMMON_KV_TRANSFER_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/metrics/metrics_registry.h"
#include "services/common/kvstore_connection.h"

namespace pdserve {

// The series of one direction.
class KvTransferMetrics {
 public:
  // Registers pdserve_kv_transfer_{bytes,pages,seconds}_total in `metrics` and returns the series
  // of each direction ("put", "get"), in order.
  static std::vector<KvTransferMetrics> Register(MetricsRegistry& metrics,
                                                 const std::vector<std::string>& directions);

  // One batched transfer call.
  void Record(int64_t bytes, int64_t pages, absl::Duration elapsed);

 private:
  KvTransferMetrics(prometheus::Counter& bytes, prometheus::Counter& pages,
                    prometheus::Counter& seconds)
      : bytes_(&bytes), pages_(&pages), seconds_(&seconds) {}

  prometheus::Counter* bytes_;
  prometheus::Counter* pages_;
  prometheus::Counter* seconds_;
};

// Registers pdserve_ucx_transport_info, read from `connections` (which must outlive every scrape).
void AddTransportInfoMetric(MetricsRegistry& metrics, const KvStoreConnections& connections);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_KV_TRANSFER_METRICS_H_
