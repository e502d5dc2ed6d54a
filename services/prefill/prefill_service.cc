#include "services/prefill/prefill_service.h"

#include <memory>
#include <utility>

#include "core/base/logging.h"
#include "services/common/grpc_status.h"
#include "services/common/router_registration.h"
#include "services/common/service_server.h"
#include "services/common/shutdown_signal.h"

namespace pdserve {

grpc::Status PrefillService::Prefill(grpc::ServerContext* /*context*/,
                                     const v1::PrefillRequest* request, v1::PrefillReply* reply) {
  absl::StatusOr<std::shared_ptr<KvStoreConnection>> store =
      stores_.Get(request->kvstore_grpc_address());
  if (!store.ok()) return ToGrpcStatus(store.status());
  PrefillJob job;
  job.request_id = request->request_id();
  job.prompt.assign(request->prompt().begin(), request->prompt().end());
  job.sampling.temperature = request->sampling().temperature();
  job.sampling.top_p = request->sampling().top_p() == 0 ? 1.0f : request->sampling().top_p();
  job.sampling.top_k = request->sampling().top_k();
  job.sampling.seed = request->sampling().seed();
  job.store = *store;
  job.lease_seconds = request->lease_seconds();
  absl::StatusOr<PrefillOutcome> outcome = worker_.Run(std::move(job));
  if (!outcome.ok()) {
    if (absl::IsUnavailable(outcome.status())) stores_.Forget(request->kvstore_grpc_address());
    return ToGrpcStatus(outcome.status());
  }
  reply->set_first_token(outcome->first_token);
  *reply->mutable_manifest() = std::move(outcome->manifest);
  reply->set_queue_seconds(outcome->queue_seconds);
  reply->set_compute_seconds(outcome->compute_seconds);
  reply->set_transfer_seconds(outcome->transfer_seconds);
  return grpc::Status::OK;
}

grpc::Status PrefillService::GetQueue(grpc::ServerContext* /*context*/,
                                      const v1::GetQueueRequest* /*request*/,
                                      v1::QueueStatus* reply) {
  *reply = worker_.queue();
  return grpc::Status::OK;
}

absl::Status RunPrefillServer(const PrefillServerOptions& options, PrefillWorker& worker,
                              Transport& transport) {
  KvStoreConnections stores(transport);
  PrefillService service(worker, stores);
  absl::StatusOr<std::unique_ptr<ServiceServer>> server =
      ServiceServer::Start(options.listen_address, {&service});
  if (!server.ok()) return server.status();
  std::unique_ptr<RouterRegistration> registration;
  if (!options.router_address.empty()) {
    v1::RegisterWorkerRequest request;
    request.set_role(v1::WORKER_ROLE_PREFILL);
    request.set_address((*server)->address());
    request.set_calibration_hash(options.calibration_hash);
    registration = std::make_unique<RouterRegistration>(options.router_address, request,
                                                        [&worker] { return worker.queue(); });
  }
  GetLogger("prefill")->info("prefill worker serving on {}", (*server)->address());
  (*server)->AnnounceReady("prefill");
  const int signal_number = WaitForShutdownSignal();
  GetLogger("prefill")->info("signal {}: draining", signal_number);
  (*server)->SetServing(false);
  registration.reset();
  (*server)->Shutdown(absl::Seconds(10));
  return absl::OkStatus();
}

}  // namespace pdserve
