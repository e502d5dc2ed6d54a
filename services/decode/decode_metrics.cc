#include "services/decode/decode_metrics.h"

#include <utility>
#include <vector>

#include "core/metrics/buckets.h"

namespace pdserve {

DecodeMetrics::DecodeMetrics(MetricsRegistry& metrics, std::function<v1::QueueStatus()> queue,
                             const RemoteValueTier* tier)
    : requests(metrics.AddCounter("pdserve_decode_requests_total",
                                  "Decode requests by gRPC status code")),
      batch_sequences(
          metrics.AddHistogram("pdserve_decode_batch_size_sequences", "Sequences per decode step")
              .Add({}, ExponentialBuckets(1, 2, 10))),
      step_seconds(metrics
                       .AddHistogram("pdserve_decode_step_seconds",
                                     "Duration of one decode step (forward and sampling)")
                       .Add({}, LatencyBuckets())),
      generated_tokens(metrics
                           .AddCounter("pdserve_decode_generated_tokens_total",
                                       "Tokens emitted, the first (prefill's) token included")
                           .Add({})),
      pages_refused(metrics.AddCounter(
          "pdserve_decode_kv_pages_refused_total",
          "KV pages refused before use, by reason: malformed, checksum, foreign, stale")),
      transfer(KvTransferMetrics::Register(metrics, {"get"})[0]) {
  // Every reason from the start, so that a rule can tell "none refused" from "not reporting".
  for (const char* reason : {"malformed", "checksum", "foreign", "stale"}) {
    pages_refused.Add({{"reason", reason}});
  }
  auto read = [queue = std::move(queue)](bool running) {
    const v1::QueueStatus status = queue();
    return std::vector<CallbackSample>{
        {{}, running ? double(status.running_requests()) : double(status.queued_requests())}};
  };
  metrics.AddGaugeCallback("pdserve_decode_queue_requests", "Requests waiting for a sequence slot",
                           [read] { return read(false); });
  metrics.AddGaugeCallback("pdserve_decode_active_sequences", "Sequences in the continuous batch",
                           [read] { return read(true); });
  metrics.AddCounterCallback(
      "pdserve_decode_kcache_value_fetched_bytes_total",
      "V bytes KCache fetched from the KV store for the top-N heads of each step", [tier] {
        return std::vector<CallbackSample>{
            {{}, tier != nullptr ? double(tier->remote_bytes_fetched()) : 0.0}};
      });
}

}  // namespace pdserve
