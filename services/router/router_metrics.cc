#include "services/router/router_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/metrics/buckets.h"

namespace pdserve {
namespace {

const char* Outcome(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return "completed";
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return "rejected";
    case absl::StatusCode::kCancelled:
      return "cancelled";
    default:
      return "failed";
  }
}

std::vector<CallbackSample> WorkerQueues(const WorkerRegistry& workers, bool tokens) {
  std::vector<CallbackSample> samples;
  for (const WorkerSnapshot& worker : workers.List()) {
    samples.push_back({{{"role", WorkerRoleName(worker.role)}, {"worker", worker.address}},
                       tokens ? static_cast<double>(worker.pending_tokens)
                              : static_cast<double>(worker.pending_requests)});
  }
  return samples;
}

}  // namespace

RouterMetrics::RouterMetrics(MetricsRegistry& metrics, const WorkerRegistry& workers,
                             const AdmissionQueue& admission)
    : requests_(metrics.AddCounter("pdserve_router_requests_total",
                                   "Generate calls by outcome and gRPC status code")),
      ttft_(metrics
                .AddHistogram("pdserve_router_time_to_first_token_seconds",
                              "Arrival at the router to the first token sent, completed requests")
                .Add({}, LatencyBuckets())),
      tpot_(metrics
                .AddHistogram("pdserve_router_time_per_output_token_seconds",
                              "(last token - first token) / (tokens - 1) per completed request")
                .Add({}, LatencyBuckets())),
      itl_(metrics
               .AddHistogram("pdserve_router_inter_token_latency_seconds",
                             "Gaps between consecutive token messages of a request")
               .Add({}, LatencyBuckets())),
      e2e_(metrics
               .AddHistogram("pdserve_router_e2e_request_latency_seconds",
                             "Arrival to the final message, completed requests")
               .Add({}, LatencyBuckets())),
      admission_wait_(metrics
                          .AddHistogram("pdserve_router_admission_wait_seconds",
                                        "Time admitted requests waited in the router's admission "
                                        "queue (0 when admitted at once)")
                          .Add({}, LatencyBuckets())),
      health_changes_(metrics.AddCounter(
          "pdserve_router_worker_health_changes_total",
          "Changes of a worker's health seen by the router, by role and the state entered")),
      prompt_tokens_(metrics
                         .AddCounter("pdserve_router_prompt_tokens_total",
                                     "Prompt tokens of completed requests")
                         .Add({})),
      generation_tokens_(metrics
                             .AddCounter("pdserve_router_generation_tokens_total",
                                         "Tokens generated for completed requests")
                             .Add({})),
      cached_prompt_tokens_(metrics.AddCounter(
          "pdserve_router_cached_prompt_tokens_total",
          "Prompt tokens of prefilled requests the KV store's prefix cache served, and those the "
          "router expected it to hold when it chose the store (kv-aware policy)")),
      cached_expected_(cached_prompt_tokens_.Add({{"source", "expected"}})),
      cached_served_(cached_prompt_tokens_.Add({{"source", "served"}})) {
  // Every (role, state) series exists from the start, at 0, so that rates see the first change.
  for (WorkerRole role : {WorkerRole::kPrefill, WorkerRole::kDecode, WorkerRole::kMonolithic}) {
    for (WorkerHealth health : {WorkerHealth::kHealthy, WorkerHealth::kLate, WorkerHealth::kDead}) {
      health_changes_.Add({{"role", WorkerRoleName(role)}, {"state", WorkerHealthName(health)}});
    }
  }
  metrics.AddGaugeCallback("pdserve_router_requests_inflight",
                           "Generate calls admitted and not finished", [&admission] {
                             return std::vector<CallbackSample>{{{}, double(admission.active())}};
                           });
  metrics.AddGaugeCallback("pdserve_router_admission_queued_requests",
                           "Generate calls waiting in the router's admission queue", [&admission] {
                             return std::vector<CallbackSample>{{{}, double(admission.queued())}};
                           });
  metrics.AddGaugeCallback(
      "pdserve_router_admission_queued_bytes",
      "Request data held by calls waiting in the router's admission queue", [&admission] {
        return std::vector<CallbackSample>{{{}, double(admission.queued_bytes())}};
      });
  metrics.AddGaugeCallback("pdserve_router_queue_requests",
                           "Requests pending on each worker: its last report plus those sent since",
                           [&workers] { return WorkerQueues(workers, /*tokens=*/false); });
  metrics.AddGaugeCallback(
      "pdserve_router_queue_tokens",
      "Tokens of work pending on each worker: its last report plus those sent since",
      [&workers] { return WorkerQueues(workers, /*tokens=*/true); });
  metrics.AddGaugeCallback(
      "pdserve_router_workers", "Registered workers by role and health", [&workers] {
        std::vector<CallbackSample> samples;
        const std::vector<WorkerSnapshot> snapshot = workers.List();
        for (WorkerRole role :
             {WorkerRole::kPrefill, WorkerRole::kDecode, WorkerRole::kMonolithic}) {
          int healthy = 0, late = 0, dead = 0;
          for (const WorkerSnapshot& worker : snapshot) {
            if (worker.role != role) continue;
            ++(worker.health == WorkerHealth::kHealthy ? healthy
               : worker.health == WorkerHealth::kLate  ? late
                                                       : dead);
          }
          for (const auto& [state, count] :
               {std::pair{"healthy", healthy}, {"late", late}, {"unhealthy", dead}}) {
            samples.push_back({{{"role", WorkerRoleName(role)}, {"state", state}}, double(count)});
          }
        }
        return samples;
      });
}

void RouterMetrics::RecordOutcome(const absl::Status& status) {
  requests_
      .Add({{"outcome", Outcome(status.code())}, {"code", absl::StatusCodeToString(status.code())}})
      .Increment();
}

void RouterMetrics::RecordHealthChange(const HealthChange& change) {
  health_changes_
      .Add({{"role", WorkerRoleName(change.role)}, {"state", WorkerHealthName(change.to)}})
      .Increment();
}

void RouterMetrics::RecordLatencies(absl::Duration first_token, absl::Duration last_token,
                                    absl::Duration total, int completion_tokens,
                                    int prompt_tokens) {
  ttft_.Observe(absl::ToDoubleSeconds(first_token));
  if (completion_tokens > 1) {
    tpot_.Observe(absl::ToDoubleSeconds(last_token - first_token) / (completion_tokens - 1));
  }
  e2e_.Observe(absl::ToDoubleSeconds(total));
  prompt_tokens_.Increment(prompt_tokens);
  generation_tokens_.Increment(completion_tokens);
}

}  // namespace pdserve
