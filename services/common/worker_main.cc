#include "services/common/worker_main.h"

#include <memory>

#include "core/base/logging.h"
#include "services/common/router_registration.h"
#include "services/common/shutdown_signal.h"

namespace pdserve {

absl::Status ServeWorker(const WorkerProcess& process,
                         const std::vector<grpc::Service*>& services) {
  HttpEndpoint http;
  http.role = process.role;
  http.metrics = process.metrics;
  http.options.listen_address = process.endpoints.http_listen_address;
  http.options.metrics_keys = process.endpoints.metrics_keys;
  absl::StatusOr<std::unique_ptr<ServiceServer>> server =
      ServiceServer::Start(process.endpoints.listen_address, services, http);
  if (!server.ok()) return server.status();
  std::unique_ptr<RouterRegistration> registration;
  if (!process.router_address.empty()) {
    v1::RegisterWorkerRequest request = process.registration;
    request.set_address((*server)->address());
    registration =
        std::make_unique<RouterRegistration>(process.router_address, request, process.queue);
  }
  auto log = GetLogger(process.role);
  log->info("{} worker serving on {} (metrics on http://{}/metrics)", process.role,
            (*server)->address(), (*server)->http_address());
  (*server)->AnnounceReady(process.role);
  const int signal_number = WaitForShutdownSignal();
  log->info("signal {}: draining (up to {})", signal_number,
            absl::FormatDuration(process.endpoints.drain));
  (*server)->SetServing(false);
  registration.reset();
  (*server)->Shutdown(process.endpoints.drain);
  return absl::OkStatus();
}

}  // namespace pdserve
