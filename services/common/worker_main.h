// The life of a worker process after its service is built: serve, register with the router (when
// one is given) and report the queue with every heartbeat, announce readiness, wait for
// SIGINT/SIGTERM (blocked by the caller), then drain — NOT_SERVING, leave the router, finish
// in-flight calls within `grace` — and exits cleanly.
#ifndef PDSERVE_SERVICES_COMMON_WORKER_MAIN_H_
#define PDSERVE_SERVICES_COMMON_WORKER_MAIN_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/metrics/metrics_registry.h"
#include "pdserve/v1/router.pb.h"
#include "services/common/endpoint_options.h"
#include "services/common/service_server.h"

namespace pdserve {

struct WorkerProcess {
  std::string role;  // the ready line's role, e.g. "prefill"
  EndpointOptions endpoints;
  MetricsRegistry* metrics = nullptr;  // served at /metrics; required
  std::string router_address;          // empty: do not register
  // Role, calibration hash and KV store; the address is filled in once bound.
  v1::RegisterWorkerRequest registration;
  std::function<v1::QueueStatus()> queue;
};

absl::Status ServeWorker(const WorkerProcess& process, const std::vector<grpc::Service*>& services);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_WORKER_MAIN_H_
