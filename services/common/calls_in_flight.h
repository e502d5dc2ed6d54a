// CallsInFlight: counts the calls a gRPC server is running, through a server interceptor that
// exists for the life of each call, so that a drain can wait for them to end before the server's
// connections get their GOAWAY (ServiceServer::Shutdown says why that order matters).
#ifndef PDSERVE_SERVICES_COMMON_CALLS_IN_FLIGHT_H_
#define PDSERVE_SERVICES_COMMON_CALLS_IN_FLIGHT_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "absl/time/time.h"
#include "core/base/mutex.h"

namespace pdserve {

class CallsInFlight {
 public:
  // Counts every call of the server it is installed in (ServerBuilder::experimental()
  // .SetInterceptorCreators); the factory and its interceptors keep `calls` alive.
  static std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> Factory(
      std::shared_ptr<CallsInFlight> calls);

  // Blocks until no counted call is running or `deadline` passes; the calls still running.
  int WaitForNone(absl::Time deadline);

  // Called by the interceptor as a call begins and ends.
  void Add();
  void Remove();

 private:
  Mutex mu_;
  CondVar none_;  // signalled when count_ drops to 0
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_CALLS_IN_FLIGHT_H_
