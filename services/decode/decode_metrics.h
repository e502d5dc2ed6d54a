// A decode worker's metrics (names in deploy/metrics.txt): queue and live sequences, batch size
// and duration of each step, requests by code, tokens generated, K pages read from the KV store
// and the V bytes KCache fetched remotely (per token: divide by generated tokens).
#ifndef PDSERVE_SERVICES_DECODE_DECODE_METRICS_H_
#define PDSERVE_SERVICES_DECODE_DECODE_METRICS_H_

#include <functional>

#include "core/metrics/metrics_registry.h"
#include "pdserve/v1/common.pb.h"
#include "services/common/kv_transfer_metrics.h"
#include "services/decode/remote_value_tier.h"

namespace pdserve {

struct DecodeMetrics {
  // `queue` and `tier` (null for a monolithic worker) are read at every scrape and must outlive
  // the scrapes of `metrics`.
  DecodeMetrics(MetricsRegistry& metrics, std::function<v1::QueueStatus()> queue,
                const RemoteValueTier* tier);

  prometheus::Family<prometheus::Counter>& requests;  // {code}
  prometheus::Histogram& batch_sequences;
  prometheus::Histogram& step_seconds;
  prometheus::Counter& generated_tokens;
  // KV pages refused before use, {reason}: malformed, checksum, foreign (another request, layer,
  // page or calibration), stale (another KV store epoch).
  prometheus::Family<prometheus::Counter>& pages_refused;
  KvTransferMetrics transfer;  // direction "get"
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_DECODE_DECODE_METRICS_H_
