// The prefill worker's gRPC face (pdserve.v1.Prefill) and its process main: serve, register with
// the router, wait for SIGINT/SIGTERM, drain.
#ifndef PDSERVE_SERVICES_PREFILL_PREFILL_SERVICE_H_
#define PDSERVE_SERVICES_PREFILL_PREFILL_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/metrics/metrics_registry.h"
#include "core/transport/transport.h"
#include "pdserve/v1/prefill.grpc.pb.h"
#include "services/common/endpoint_options.h"
#include "services/common/kvstore_connection.h"
#include "services/prefill/prefill_worker.h"

namespace pdserve {

class PrefillService final : public v1::Prefill::Service {
 public:
  PrefillService(PrefillWorker& worker, KvStoreConnections& stores)
      : worker_(worker), stores_(stores) {}

  grpc::Status Prefill(grpc::ServerContext* context, const v1::PrefillRequest* request,
                       v1::PrefillReply* reply) override;
  grpc::Status GetQueue(grpc::ServerContext* context, const v1::GetQueueRequest* request,
                        v1::QueueStatus* reply) override;

 private:
  grpc::Status Serve(grpc::ServerContext* context, const v1::PrefillRequest* request,
                     v1::PrefillReply* reply);

  PrefillWorker& worker_;
  KvStoreConnections& stores_;
};

struct PrefillServerOptions {
  EndpointOptions endpoints;
  std::string router_address;  // empty: do not register
  uint64_t calibration_hash = 0;
};

// Serves until SIGINT/SIGTERM (the caller has blocked them with BlockShutdownSignals), then
// reports NOT_SERVING, finishes in-flight prefills within a grace period and returns.
absl::Status RunPrefillServer(const PrefillServerOptions& options, PrefillWorker& worker,
                              Transport& transport);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_PREFILL_PREFILL_SERVICE_H_
