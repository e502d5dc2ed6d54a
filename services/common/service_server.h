// ServiceServer: one pdserve process's gRPC server — binds (port 0 picks a free port), serves the
// given services plus grpc.health.v1 (with the process's TLS identity, core/rpc/tls.h), and
// reports the bound address. Every pdserve service
// binary prints one line "PDSERVE_READY <role> <grpc host:port> <http host:port>" on stdout once it
// serves, which is how `pdserve up` and the tests learn the ports.
#ifndef PDSERVE_SERVICES_COMMON_SERVICE_SERVER_H_
#define PDSERVE_SERVICES_COMMON_SERVICE_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/metrics/metrics_registry.h"
#include "core/rpc/tls.h"
#include "services/common/calls_in_flight.h"
#include "services/common/http_server.h"

namespace pdserve {

class ServiceServer;

// The HTTP side of a process: its metrics at /metrics, plus routes the role adds.
struct HttpEndpoint {
  std::string role;                    // pdserve_build_info's role label
  MetricsRegistry* metrics = nullptr;  // not owned, outlives the server; null: no HTTP server
  HttpServerOptions options;
  // Runs once the gRPC server serves (so routes may use its InProcessChannel).
  std::function<void(httplib::Server&, const ServiceServer&)> install_routes;
};

class ServiceServer {
 public:
  // Starts serving `services` (not owned; they must outlive the server) on `listen_address`
  // ("host:port", port 0 = any free port), and the HTTP endpoint when `http.metrics` is set (it
  // registers pdserve_build_info, pdserve_process_start_time_seconds and pdserve_serving there).
  // Unavailable when an address cannot be bound.
  static absl::StatusOr<std::unique_ptr<ServiceServer>> Start(
      const std::string& listen_address, const std::vector<grpc::Service*>& services,
      const HttpEndpoint& http = {});
  ~ServiceServer();

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }
  // The HTTP server's "host:port"; "-" when there is none.
  std::string http_address() const { return http_ ? http_->address() : "-"; }
  // Health as reported by grpc.health.v1 for the whole server ("") and every service name, in
  // pdserve_serving, and by the HTTP server's GET /readyz (200 serving, 503 not).
  void SetServing(bool serving);
  // Prints the ready line "PDSERVE_READY <role> <grpc address> <http address>" on stdout and
  // flushes it.
  void AnnounceReady(const std::string& role) const;
  // A channel to this server that does not leave the process (the router's HTTP API uses it).
  std::shared_ptr<grpc::Channel> InProcessChannel() const;
  // NOT_SERVING, waits up to `grace` for running calls (services refuse new work once they are
  // told to drain; calls that still come are served and waited for), then stops accepting calls
  // and cancels those left at the end of `grace`, then stops the HTTP server.
  void Shutdown(absl::Duration grace);

 private:
  ServiceServer(std::unique_ptr<grpc::Server> server, std::shared_ptr<CallsInFlight> calls,
                std::string address);

  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<CallsInFlight> calls_;  // the calls server_ runs (its interceptor counts them)
  std::string address_;
  prometheus::Gauge* serving_ = nullptr;  // in the HTTP endpoint's registry, when there is one
  std::unique_ptr<HttpServer> http_;
  bool shut_down_ = false;
};

// Options every internal channel uses (keepalive so that a dead peer is noticed in seconds).
grpc::ChannelArguments InternalChannelArguments();
// A channel to the component of role `peer` at `address`, with the process's TLS identity
// (core/rpc/tls.h). With TLS the server must hold a certificate of `peer`'s role under the CA
// (ComponentServerName), whatever host or IP `address` names.
std::shared_ptr<grpc::Channel> MakeInternalChannel(const std::string& address, ComponentRole peer);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_SERVICE_SERVER_H_
