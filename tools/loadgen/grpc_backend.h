// loadgen gRPC backend: the router's pdserve.v1.Router service through the client SDK
// (client/pdserve_client.h): TokenRequest with StopConditions.ignore_eos, GenerateStream.
// A token is a streamed entry with an id (text-only entries do not count).
// Thread-safe (the SDK client is).
#ifndef PDSERVE_TOOLS_LOADGEN_GRPC_BACKEND_H_
#define PDSERVE_TOOLS_LOADGEN_GRPC_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/pdserve_client.h"
#include "tools/loadgen/backend.h"

namespace pdserve::loadgen {

class GrpcBackend : public Backend {
 public:
  // `address` is the router's gRPC "host:port".
  static absl::StatusOr<std::unique_ptr<GrpcBackend>> Create(const std::string& address,
                                                             const ClientOptions& options = {});

  std::string Describe() const override;
  absl::Status Probe() override;
  BackendResult Send(const BackendRequest& request, Cancellation& cancellation,
                     const std::function<void()>& on_token) override;

  Client& client() { return *client_; }

 private:
  explicit GrpcBackend(std::unique_ptr<Client> client) : client_(std::move(client)) {}
  std::unique_ptr<Client> client_;
};

}  // namespace pdserve::loadgen

#endif  // PDSERVE_TOOLS_LOADGEN_GRPC_BACKEND_H_
