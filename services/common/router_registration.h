// RouterRegistration: keeps a worker registered with the router — registers, then sends a
// heartbeat with the worker's queue every interval the router asked for, registering again when
// the router has forgotten it. Runs on its own thread from construction until destruction; an
// unreachable router is retried every interval and logged once per outage.
#ifndef PDSERVE_SERVICES_COMMON_ROUTER_REGISTRATION_H_
#define PDSERVE_SERVICES_COMMON_ROUTER_REGISTRATION_H_

#include <functional>
#include <string>
#include <thread>

#include "core/base/mutex.h"
#include "pdserve/v1/router.grpc.pb.h"

namespace pdserve {

class RouterRegistration {
 public:
  // `registration` names the worker (role, address, kvstore, calibration hash); `queue` is called
  // on the registration thread for each heartbeat.
  RouterRegistration(const std::string& router_address, v1::RegisterWorkerRequest registration,
                     std::function<v1::QueueStatus()> queue);
  ~RouterRegistration();

 private:
  void Run();
  bool Register(double* interval_seconds);
  bool Heartbeat(bool* known);

  std::string router_address_;
  std::unique_ptr<v1::Router::Stub> stub_;
  v1::RegisterWorkerRequest registration_;
  std::function<v1::QueueStatus()> queue_;
  Mutex mu_;
  CondVar wake_;  // signalled when stop_ is set
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_ROUTER_REGISTRATION_H_
