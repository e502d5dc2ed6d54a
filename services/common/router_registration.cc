#include "services/common/router_registration.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/time/time.h"
#include "core/base/logging.h"
#include "services/common/service_server.h"

namespace pdserve {
namespace {

constexpr double kRetrySeconds = 0.5;

}  // namespace

RouterRegistration::RouterRegistration(const std::string& router_address,
                                       v1::RegisterWorkerRequest registration,
                                       std::function<v1::QueueStatus()> queue)
    : router_address_(router_address),
      stub_(v1::Router::NewStub(MakeInternalChannel(router_address, ComponentRole::kRouter))),
      registration_(std::move(registration)),
      queue_(std::move(queue)) {
  thread_ = std::thread([this] { Run(); });
}

RouterRegistration::~RouterRegistration() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  wake_.SignalAll();
  thread_.join();
}

bool RouterRegistration::Register(double* interval_seconds) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  v1::RegisterWorkerRequest request = registration_;
  *request.mutable_queue() = queue_();
  v1::RegisterWorkerReply reply;
  if (!stub_->RegisterWorker(&context, request, &reply).ok()) return false;
  if (reply.heartbeat_interval_seconds() > 0)
    *interval_seconds = reply.heartbeat_interval_seconds();
  return true;
}

bool RouterRegistration::Heartbeat(bool* known) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  v1::HeartbeatRequest request;
  request.set_address(registration_.address());
  *request.mutable_queue() = queue_();
  v1::HeartbeatReply reply;
  if (!stub_->Heartbeat(&context, request, &reply).ok()) return false;
  *known = reply.known();
  return true;
}

void RouterRegistration::Run() {
  auto log = GetLogger("registration");
  double interval = kRetrySeconds;
  bool registered = false;
  bool reported_outage = false;
  while (true) {
    {
      MutexLock lock(&mu_);
      if (stop_) return;
    }
    bool ok;
    if (!registered) {
      ok = registered = Register(&interval);
      if (ok)
        log->info("registered with router {} as {}", router_address_, registration_.address());
    } else {
      bool known = true;
      ok = Heartbeat(&known);
      if (ok && !known) registered = false;
    }
    if (!ok && !reported_outage) {
      log->warn("router {} unreachable; retrying every {:.1f} s", router_address_, interval);
    }
    reported_outage = !ok;
    const double wait = registered ? interval : std::min(interval, kRetrySeconds);
    const absl::Time wake = absl::Now() + absl::Seconds(wait);
    MutexLock lock(&mu_);
    while (!stop_ && !wake_.WaitWithDeadline(&mu_, wake)) {
    }
  }
}

}  // namespace pdserve
