#include "services/decode/decode_service.h"

#include <memory>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/rpc/tls.h"
#include "services/common/grpc_status.h"
#include "services/common/kv_transfer_metrics.h"
#include "services/common/sampling_proto.h"
#include "services/common/worker_main.h"

namespace pdserve {
namespace {

// How often the handler looks at its call for cancellation while no token comes.
constexpr absl::Duration kPollInterval = absl::Milliseconds(20);

}  // namespace

absl::StatusOr<DecodeJob> DecodeService::MakeJob(const v1::DecodeRequest& request) {
  DecodeJob job;
  job.request_id = request.request_id();
  job.sampling = SamplingFromProto(request.sampling());
  job.max_tokens = request.max_tokens();
  job.stop_ids.assign(request.stop().stop_token_ids().begin(),
                      request.stop().stop_token_ids().end());
  if (worker_.monolithic()) {
    if (request.has_manifest()) {
      return absl::InvalidArgumentError("this worker is monolithic: send the prompt, not pages");
    }
    job.prompt.assign(request.prompt().begin(), request.prompt().end());
    return job;
  }
  if (!request.has_manifest()) {
    return absl::InvalidArgumentError("this decode worker needs a page manifest");
  }
  job.manifest = request.manifest();
  job.first_token = request.first_token();
  absl::StatusOr<std::shared_ptr<KvStoreConnection>> store =
      stores_->Get(job.manifest.kvstore_grpc_address(), job.manifest.kvstore_instance());
  if (!store.ok()) return store.status();
  job.store = *store;
  return job;
}

grpc::Status DecodeService::Decode(grpc::ServerContext* context, const v1::DecodeRequest* request,
                                   grpc::ServerWriter<v1::DecodeResponse>* writer) {
  // An operator may call it directly (`pdserve loadgen --direct-decode`).
  if (grpc::Status s =
          RequirePeerRole(*context, {ComponentRole::kRouter, ComponentRole::kOperator});
      !s.ok()) {
    return s;
  }
  const grpc::Status status = Serve(context, *request, writer);
  worker_.stats()
      .requests
      .Add({{"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()))}})
      .Increment();
  return status;
}

grpc::Status DecodeService::Serve(grpc::ServerContext* context, const v1::DecodeRequest& request,
                                  grpc::ServerWriter<v1::DecodeResponse>* writer) {
  absl::StatusOr<DecodeJob> job = MakeJob(request);
  if (!job.ok()) return ToGrpcStatus(job.status());
  // The pages are released on every ending, once the scheduler is done with them.
  absl::Cleanup release = [&] {
    if (job->store == nullptr) return;
    absl::Status status =
        job->store->Release(job->manifest.allocation_id(), job->manifest.lease_token());
    if (!status.ok() && !absl::IsNotFound(status)) {
      GetLogger("decode")->warn("request {}: releasing its pages failed: {}", job->request_id,
                                std::string(status.message()));
    }
  };
  absl::StatusOr<DecodeStart> start = worker_.Start(*job);
  if (!start.ok()) {
    if (absl::IsUnavailable(start.status()) && job->store != nullptr) {
      stores_->Forget(job->store->address());
    }
    return ToGrpcStatus(start.status());
  }
  return Relay(context, *job, *start, writer);
}

grpc::Status DecodeService::Relay(grpc::ServerContext* context, const DecodeJob& job,
                                  const DecodeStart& start,
                                  grpc::ServerWriter<v1::DecodeResponse>* writer) {
  DecodeStream& stream = *start.stream;
  // Stops the scheduler's work on this request and waits until it no longer reads its pages.
  auto abandon = [&](grpc::Status status) {
    stream.Cancel();
    stream.WaitFinished(absl::Now() + absl::Seconds(10));
    return status;
  };
  double lease_seconds = start.lease_seconds;
  absl::Time renewed = absl::Now();
  bool first = true;
  while (true) {
    DecodeStream::Taken taken = stream.Take(absl::Now() + kPollInterval);
    if (context->IsCancelled()) {
      return abandon(grpc::Status(grpc::StatusCode::CANCELLED, "the caller cancelled"));
    }
    if (!taken.tokens.empty() || taken.finished) {
      v1::DecodeResponse response;
      for (int32_t token : taken.tokens) response.add_tokens(token);
      if (first) response.set_transfer_seconds(start.transfer_seconds);
      first = false;
      if (taken.finished && taken.status.ok()) {
        response.set_done(true);
        response.set_finish_reason(taken.reason);
      }
      if ((response.tokens_size() > 0 || response.done()) && !writer->Write(response)) {
        return abandon(grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away"));
      }
      if (taken.finished) return ToGrpcStatus(taken.status);
    }
    if (job.store != nullptr && lease_seconds > 0 &&
        absl::Now() - renewed > absl::Seconds(lease_seconds / 3)) {
      absl::StatusOr<double> lease =
          job.store->Renew(job.manifest.allocation_id(), job.manifest.lease_token());
      if (!lease.ok()) return abandon(ToGrpcStatus(lease.status()));
      lease_seconds = *lease;
      renewed = absl::Now();
    }
  }
}

grpc::Status DecodeService::GetQueue(grpc::ServerContext* context,
                                     const v1::GetQueueRequest* /*request*/,
                                     v1::QueueStatus* reply) {
  if (grpc::Status s = RequirePeerRole(*context, {ComponentRole::kRouter}); !s.ok()) return s;
  *reply = worker_.queue();
  return grpc::Status::OK;
}

absl::Status RunDecodeServer(const DecodeServerOptions& options, DecodeWorker& worker,
                             Transport* transport) {
  std::unique_ptr<KvStoreConnections> stores;
  if (transport != nullptr) stores = std::make_unique<KvStoreConnections>(*transport);
  DecodeService service(worker, stores.get());
  WorkerProcess process;
  process.role = worker.monolithic() ? "monolithic" : "decode";
  process.endpoints = options.endpoints;
  process.router_address = options.router_address;
  process.metrics = &worker.metrics();
  process.registration.set_role(worker.monolithic() ? v1::WORKER_ROLE_MONOLITHIC
                                                    : v1::WORKER_ROLE_DECODE);
  process.registration.set_calibration_hash(options.calibration_hash);
  process.registration.set_kvstore_grpc_address(options.kvstore_address);
  process.queue = [&worker] { return worker.queue(); };
  if (stores != nullptr) AddTransportInfoMetric(worker.metrics(), *stores);
  return ServeWorker(process, {&service});
}

}  // namespace pdserve
