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
      stub_(v1::Router::NewStub(MakeInternalChannel(router_address))),
      registration_(std::move(registration)),
      queue_(std::move(queue)) {
  thread_ = std::thread([this] { Run(); });
}

RouterRegistration::~RouterRegistration() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
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
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
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
    lock.lock();
    const double wait = registered ? interval : std::min(interval, kRetrySeconds);
    wake_.wait_for(lock, std::chrono::duration<double>(wait), [this] { return stop_; });
  }
}

}  // namespace pdserve
