// The decode worker's gRPC face (pdserve.v1.Decode) and its process main. The handler of a Decode
// call owns the request's pages from the moment it starts: it renews their lease while the
// request lives and releases them on every ending (done, error, cancellation, deadline).
#ifndef PDSERVE_SERVICES_DECODE_DECODE_SERVICE_H_
#define PDSERVE_SERVICES_DECODE_DECODE_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/metrics/metrics_registry.h"
#include "core/transport/transport.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "services/common/endpoint_options.h"
#include "services/common/kvstore_connection.h"
#include "services/decode/decode_worker.h"

namespace pdserve {

class DecodeService final : public v1::Decode::Service {
 public:
  DecodeService(DecodeWorker& worker, KvStoreConnections* stores)
      : worker_(worker), stores_(stores) {}

  grpc::Status Decode(grpc::ServerContext* context, const v1::DecodeRequest* request,
                      grpc::ServerWriter<v1::DecodeResponse>* writer) override;
  grpc::Status GetQueue(grpc::ServerContext* context, const v1::GetQueueRequest* request,
                        v1::QueueStatus* reply) override;

 private:
  absl::StatusOr<DecodeJob> MakeJob(const v1::DecodeRequest& request);
  grpc::Status Serve(grpc::ServerContext* context, const v1::DecodeRequest& request,
                     grpc::ServerWriter<v1::DecodeResponse>* writer);
  grpc::Status Relay(grpc::ServerContext* context, const DecodeJob& job, const DecodeStart& start,
                     grpc::ServerWriter<v1::DecodeResponse>* writer);

  DecodeWorker& worker_;
  KvStoreConnections* stores_;  // null for a monolithic worker
};

struct DecodeServerOptions {
  EndpointOptions endpoints;
  std::string router_address;   // empty: do not register
  std::string kvstore_address;  // the node-local KV store (disaggregated workers)
  uint64_t calibration_hash = 0;
};

// Serves until SIGINT/SIGTERM (blocked by the caller), then drains and returns. `transport` is
// null for a monolithic worker.
absl::Status RunDecodeServer(const DecodeServerOptions& options, DecodeWorker& worker,
                             Transport* transport);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_DECODE_DECODE_SERVICE_H_
