#include "services/common/calls_in_flight.h"

#include <utility>

namespace pdserve {
namespace {

// Lives as long as its call (gRPC deletes a call's interceptors with its ServerContext).
class CountingInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit CountingInterceptor(std::shared_ptr<CallsInFlight> calls) : calls_(std::move(calls)) {
    calls_->Add();
  }
  ~CountingInterceptor() override { calls_->Remove(); }
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }

 private:
  std::shared_ptr<CallsInFlight> calls_;
};

class CountingFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingFactory(std::shared_ptr<CallsInFlight> calls) : calls_(std::move(calls)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* /*info*/) override {
    return new CountingInterceptor(calls_);
  }

 private:
  std::shared_ptr<CallsInFlight> calls_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> CallsInFlight::Factory(
    std::shared_ptr<CallsInFlight> calls) {
  return std::make_unique<CountingFactory>(std::move(calls));
}

int CallsInFlight::WaitForNone(absl::Time deadline) {
  MutexLock lock(&mu_);
  while (count_ > 0 && !none_.WaitWithDeadline(&mu_, deadline)) {
  }
  return count_;
}

void CallsInFlight::Add() {
  MutexLock lock(&mu_);
  ++count_;
}

void CallsInFlight::Remove() {
  MutexLock lock(&mu_);
  if (--count_ == 0) none_.SignalAll();
}

}  // namespace pdserve
