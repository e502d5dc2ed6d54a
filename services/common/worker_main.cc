#include "services/common/worker_main.h"

#include <memory>

#include "core/base/logging.h"
#include "services/common/router_registration.h"
#include "services/common/shutdown_signal.h"

namespace pdserve {

absl::Status ServeWorker(const WorkerProcess& process,
                         const std::vector<grpc::Service*>& services) {
  absl::StatusOr<std::unique_ptr<ServiceServer>> server =
      ServiceServer::Start(process.listen_address, services);
  if (!server.ok()) return server.status();
  std::unique_ptr<RouterRegistration> registration;
  if (!process.router_address.empty()) {
    v1::RegisterWorkerRequest request = process.registration;
    request.set_address((*server)->address());
    registration =
        std::make_unique<RouterRegistration>(process.router_address, request, process.queue);
  }
  auto log = GetLogger(process.role);
  log->info("{} worker serving on {}", process.role, (*server)->address());
  (*server)->AnnounceReady(process.role);
  const int signal_number = WaitForShutdownSignal();
  log->info("signal {}: draining", signal_number);
  (*server)->SetServing(false);
  registration.reset();
  (*server)->Shutdown(process.grace);
  return absl::OkStatus();
}

}  // namespace pdserve
