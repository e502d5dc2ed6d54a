// The router's metrics (names in deploy/metrics.txt): requests by outcome and gRPC code, the
// latency histograms measured at the router (TTFT, TPOT, inter-token latency, end to end) and
// token counters. Queue depths and worker health are gauges read from the WorkerRegistry at
// scrape time. Definitions follow vLLM's: TTFT = arrival → first token written; TPOT per request
// = (last token − first token) / (tokens − 1); ITL = each gap between consecutive token writes.
#ifndef PDSERVE_SERVICES_ROUTER_ROUTER_METRICS_H_
#define PDSERVE_SERVICES_ROUTER_ROUTER_METRICS_H_

#include <atomic>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/metrics/metrics_registry.h"
#include "services/router/worker_registry.h"

namespace pdserve {

class RouterMetrics {
 public:
  // Registers the router's families in `metrics`; the gauges read `workers` and `inflight`,
  // which must outlive every scrape of `metrics`.
  RouterMetrics(MetricsRegistry& metrics, const WorkerRegistry& workers,
                const std::atomic<int>& inflight);

  // One Generate call that ended with `status` (outcome completed, rejected, cancelled or
  // failed, by its code).
  void RecordOutcome(const absl::Status& status);
  // A completed request's latencies: `first_token` and `last_token` are since its arrival.
  void RecordLatencies(absl::Duration first_token, absl::Duration last_token, absl::Duration total,
                       int completion_tokens, int prompt_tokens);
  // A gap between two consecutive token messages of one request.
  void RecordTokenGap(absl::Duration gap) { itl_.Observe(absl::ToDoubleSeconds(gap)); }

 private:
  MetricFamily<Counter>& requests_;
  Histogram& ttft_;
  Histogram& tpot_;
  Histogram& itl_;
  Histogram& e2e_;
  Counter& prompt_tokens_;
  Counter& generation_tokens_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_ROUTER_METRICS_H_
