#include "services/prefill/prefill_metrics.h"

#include <utility>
#include <vector>

#include "core/metrics/buckets.h"

namespace pdserve {

PrefillMetrics::PrefillMetrics(MetricsRegistry& metrics, std::function<v1::QueueStatus()> queue)
    : PrefillMetrics(metrics, std::move(queue),
                     KvTransferMetrics::Register(metrics, {"put", "get"})) {}

PrefillMetrics::PrefillMetrics(MetricsRegistry& metrics, std::function<v1::QueueStatus()> queue,
                               const std::vector<KvTransferMetrics>& transfers)
    : requests(metrics.AddCounter("pdserve_prefill_requests_total",
                                  "Prefill requests by gRPC status code")),
      batch_requests(metrics
                         .AddHistogram("pdserve_prefill_batch_size_requests",
                                       "Prompts per prefill forward pass")
                         .Add({}, ExponentialBuckets(1, 2, 9))),
      batch_tokens(
          metrics
              .AddHistogram("pdserve_prefill_batch_size_tokens", "Prompt tokens per prefill batch")
              .Add({}, ExponentialBuckets(16, 2, 12))),
      forward_seconds(
          metrics
              .AddHistogram("pdserve_prefill_forward_seconds", "Compute time of one prefill batch")
              .Add({}, LatencyBuckets())),
      uncompressed_bytes(metrics
                             .AddCounter("pdserve_prefill_kv_uncompressed_bytes_total",
                                         "Bytes the plain model's fp32 K and V of the prefilled "
                                         "prompts would take")
                             .Add({})),
      stored_bytes(metrics
                       .AddCounter("pdserve_prefill_kv_stored_bytes_total",
                                   "Bytes of KV pages written to the KV store for completed "
                                   "prefills (after SwiftKV, ZACK, FP8 and AcrossKV)")
                       .Add({})),
      cached_tokens(
          metrics
              .AddCounter("pdserve_prefill_prefix_cached_tokens_total",
                          "Prompt tokens whose KV the prefix cache gave (read from the KV "
                          "store instead of computed)")
              .Add({})),
      cache_refused_pages(metrics
                              .AddCounter("pdserve_prefill_prefix_refused_pages_total",
                                          "Prefix-cache pages read and refused: their header, "
                                          "layout or checksum is not what their name promises")
                              .Add({})),
      transfer(transfers[0]),
      cache_read(transfers[1]) {
  auto read = [queue = std::move(queue)](bool tokens) {
    const v1::QueueStatus status = queue();
    return std::vector<CallbackSample>{
        {{}, tokens ? double(status.queued_tokens()) : double(status.queued_requests())}};
  };
  metrics.AddGaugeCallback("pdserve_prefill_queue_requests", "Prompts waiting for a batch",
                           [read] { return read(false); });
  metrics.AddGaugeCallback("pdserve_prefill_queue_tokens", "Prompt tokens waiting for a batch",
                           [read] { return read(true); });
}

}  // namespace pdserve
