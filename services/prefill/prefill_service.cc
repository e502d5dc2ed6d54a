#include "services/prefill/prefill_service.h"

#include <memory>
#include <utility>

#include "core/base/status_macros.h"
#include "core/rpc/tls.h"
#include "services/common/grpc_status.h"
#include "services/common/kv_transfer_metrics.h"
#include "services/common/sampling_proto.h"
#include "services/common/worker_main.h"

namespace pdserve {

grpc::Status PrefillService::Prefill(grpc::ServerContext* context,
                                     const v1::PrefillRequest* request, v1::PrefillReply* reply) {
  if (grpc::Status s = RequirePeerRole(*context, {ComponentRole::kRouter}); !s.ok()) return s;
  const grpc::Status status = Serve(context, request, reply);
  worker_.stats()
      .requests
      .Add({{"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()))}})
      .Increment();
  return status;
}

grpc::Status PrefillService::Serve(grpc::ServerContext* context, const v1::PrefillRequest* request,
                                   v1::PrefillReply* reply) {
  auto run = [&]() -> absl::StatusOr<PrefillOutcome> {
    PDSERVE_ASSIGN_OR_RETURN(std::shared_ptr<KvStoreConnection> store,
                             stores_.Get(request->kvstore_grpc_address()));
    PrefillJob job;
    job.request_id = request->request_id();
    job.prompt.assign(request->prompt().begin(), request->prompt().end());
    job.sampling = SamplingFromProto(request->sampling());
    job.store = std::move(store);
    job.lease_seconds = request->lease_seconds();
    job.deadline = absl::FromChrono(context->deadline());
    job.cancelled = [context] { return context->IsCancelled(); };
    return worker_.Run(std::move(job));
  };
  absl::StatusOr<PrefillOutcome> outcome = run();
  if (absl::IsAborted(outcome.status())) {
    // The KV store restarted at its address (found at Allocate, before any work): reconnect once.
    stores_.Forget(request->kvstore_grpc_address());
    outcome = run();
  }
  if (!outcome.ok()) {
    if (absl::IsUnavailable(outcome.status()) || absl::IsAborted(outcome.status())) {
      stores_.Forget(request->kvstore_grpc_address());
    }
    return ToGrpcStatus(outcome.status());
  }
  reply->set_first_token(outcome->first_token);
  *reply->mutable_manifest() = std::move(outcome->manifest);
  reply->set_queue_seconds(outcome->queue_seconds);
  reply->set_compute_seconds(outcome->compute_seconds);
  reply->set_transfer_seconds(outcome->transfer_seconds);
  reply->set_cached_tokens(outcome->cached_tokens);
  reply->set_published_tokens(outcome->published_tokens);
  reply->set_page_tokens(outcome->page_tokens);
  return grpc::Status::OK;
}

grpc::Status PrefillService::GetQueue(grpc::ServerContext* context,
                                      const v1::GetQueueRequest* /*request*/,
                                      v1::QueueStatus* reply) {
  if (grpc::Status s = RequirePeerRole(*context, {ComponentRole::kRouter}); !s.ok()) return s;
  *reply = worker_.queue();
  return grpc::Status::OK;
}

absl::Status RunPrefillServer(const PrefillServerOptions& options, PrefillWorker& worker,
                              Transport& transport) {
  KvStoreConnections stores(transport);
  PrefillService service(worker, stores);
  WorkerProcess process;
  process.role = "prefill";
  process.endpoints = options.endpoints;
  process.router_address = options.router_address;
  process.metrics = &worker.metrics();
  process.registration.set_role(v1::WORKER_ROLE_PREFILL);
  process.registration.set_calibration_hash(options.calibration_hash);
  process.queue = [&worker] { return worker.queue(); };
  AddTransportInfoMetric(worker.metrics(), stores);
  return ServeWorker(process, {&service});
}

}  // namespace pdserve
