// The router's metrics (names in deploy/metrics.txt): requests by outcome and gRPC code, the
// latency histograms measured at the router (TTFT, TPOT, inter-token latency, end to end, the
// wait in the admission queue), token counters and changes of worker health. Worker queues and
// health, and the admission queue's depth, are gauges read at scrape time. Definitions follow
// vLLM's: TTFT = arrival → first token written; TPOT per request = (last token − first token) /
// (tokens − 1); ITL = each gap between consecutive token writes.
#ifndef PDSERVE_SERVICES_ROUTER_ROUTER_METRICS_H_
#define PDSERVE_SERVICES_ROUTER_ROUTER_METRICS_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/metrics/metrics_registry.h"
#include "services/common/admission_queue.h"
#include "services/router/worker_registry.h"

namespace pdserve {

class RouterMetrics {
 public:
  // Registers the router's families in `metrics`; the gauges read `workers` and `admission`,
  // which must outlive every scrape of `metrics`.
  RouterMetrics(MetricsRegistry& metrics, const WorkerRegistry& workers,
                const AdmissionQueue& admission);

  // One Generate call that ended with `status` (outcome completed, rejected, cancelled or
  // failed, by its code).
  void RecordOutcome(const absl::Status& status);
  // A completed request's latencies: `first_token` and `last_token` are since its arrival.
  void RecordLatencies(absl::Duration first_token, absl::Duration last_token, absl::Duration total,
                       int completion_tokens, int prompt_tokens);
  // A gap between two consecutive token messages of one request.
  void RecordTokenGap(absl::Duration gap) { itl_.Observe(absl::ToDoubleSeconds(gap)); }
  // How long an admitted request waited in the admission queue (zero: admitted at once).
  void RecordAdmissionWait(absl::Duration wait) {
    admission_wait_.Observe(absl::ToDoubleSeconds(wait));
  }
  void RecordHealthChange(const HealthChange& change);
  // A prefill reply: the prompt tokens its KV store's prefix cache `served`, and those the
  // router `expected` it to hold when it chose the store (0 unless the policy is kv-aware).
  void RecordCachedPromptTokens(int64_t expected, int64_t served) {
    cached_expected_.Increment(static_cast<double>(expected));
    cached_served_.Increment(static_cast<double>(served));
  }

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Histogram& ttft_;
  prometheus::Histogram& tpot_;
  prometheus::Histogram& itl_;
  prometheus::Histogram& e2e_;
  prometheus::Histogram& admission_wait_;
  prometheus::Family<prometheus::Counter>& health_changes_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generation_tokens_;
  prometheus::Family<prometheus::Counter>& cached_prompt_tokens_;
  prometheus::Counter& cached_expected_;
  prometheus::Counter& cached_served_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_ROUTER_METRICS_H_
