// ServiceServer: one pdserve process's gRPC server — binds (port 0 picks a free port), serves the
// given services plus grpc.health.v1, and reports the bound address. Every pdserve service
// binary prints one line "PDSERVE_READY <role> <host:port>" on stdout once it serves, which is how
// `pdserve up` and the tests learn the ports.
#ifndef PDSERVE_SERVICES_COMMON_SERVICE_SERVER_H_
#define PDSERVE_SERVICES_COMMON_SERVICE_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pdserve {

class ServiceServer {
 public:
  // Starts serving `services` (not owned; they must outlive the server) on `listen_address`
  // ("host:port", port 0 = any free port). Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<ServiceServer>> Start(
      const std::string& listen_address, const std::vector<grpc::Service*>& services);
  ~ServiceServer();

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }
  // Health as reported by grpc.health.v1 for the whole server ("") and every service name.
  void SetServing(bool serving);
  // Prints the ready line on stdout and flushes it.
  void AnnounceReady(const std::string& role) const;
  // Stops accepting calls and cancels what is still running after `grace`.
  void Shutdown(absl::Duration grace);

 private:
  ServiceServer(std::unique_ptr<grpc::Server> server, std::string address);

  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  bool shut_down_ = false;
};

// Options every internal channel uses (keepalive so that a dead peer is noticed in seconds).
grpc::ChannelArguments InternalChannelArguments();
std::shared_ptr<grpc::Channel> MakeInternalChannel(const std::string& address);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_SERVICE_SERVER_H_
