// loadgen backend: how a request reaches the router (gRPC: grpc_backend.h; OpenAI-compatible HTTP
// with SSE: http_backend.h). A backend sends one request with exact-length output (ignore_eos,
// greedy), calls back once per streamed chunk that carries a token, and fills in the outcome.
//
// Thread-safety: Send and Probe may be called from many threads at once. A Cancellation is shared
// by the thread running the request and the one that stops the run.
#ifndef PDSERVE_TOOLS_LOADGEN_BACKEND_H_
#define PDSERVE_TOOLS_LOADGEN_BACKEND_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "client/retry_policy.h"
#include "core/base/mutex.h"

namespace pdserve::loadgen {

// Stops a running request from another thread. The backend installs a hook that aborts its
// call; Cancel runs it (at once, or when installed if Cancel came first).
class Cancellation {
 public:
  void Cancel() {
    std::function<void()> hook;
    {
      MutexLock lock(&mutex_);
      cancelled_ = true;
      hook = hook_;
    }
    if (hook) hook();
  }
  bool cancelled() const {
    MutexLock lock(&mutex_);
    return cancelled_;
  }
  // The hook must stay callable until ClearHook returns.
  void SetHook(std::function<void()> hook) {
    bool run = false;
    {
      MutexLock lock(&mutex_);
      hook_ = hook;
      run = cancelled_;
    }
    if (run) hook();
  }
  void ClearHook() {
    MutexLock lock(&mutex_);
    hook_ = nullptr;
  }

 private:
  mutable Mutex mutex_;
  bool cancelled_ ABSL_GUARDED_BY(mutex_) = false;
  std::function<void()> hook_ ABSL_GUARDED_BY(mutex_);
};

struct BackendRequest {
  const std::vector<int>* prompt = nullptr;
  int max_tokens = 0;
  double timeout_s = 300;  // for the request, its retries included
  // Refusals for overload (RESOURCE_EXHAUSTED, HTTP 429) are retried so.
  RetryPolicy retry;
};

struct BackendResult {
  // "OK", a gRPC code name, "HTTP <status>" or "CONNECTION".
  std::string code = "OK";
  std::string message;
  int output_tokens = 0;  // as reported by the server (usage), else counted chunks
  bool cancelled = false;
  int retries = 0;      // refusals for overload retried before this outcome
  double queue_s = -1;  // the server's queue time, when the protocol reports it
  // Prompt tokens the server took from its prefix cache, when it reports them (gRPC timings;
  // HTTP usage.prompt_tokens_details.cached_tokens, else llama-server's timings.cache_n); -1 if
  // not.
  int cached_tokens = -1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "grpc 127.0.0.1:50051" or "http 127.0.0.1:8000".
  virtual std::string Describe() const = 0;
  // A cheap call that fails (Unavailable, naming the address) when the router is unreachable.
  virtual absl::Status Probe() = 0;
  // Runs one request to its end; `on_token` is called (on this thread) when a chunk carrying a
  // token arrives. Never fails as a call: errors land in the result.
  virtual BackendResult Send(const BackendRequest& request, Cancellation& cancellation,
                             const std::function<void()>& on_token) = 0;
};

}  // namespace pdserve::loadgen

#endif  // PDSERVE_TOOLS_LOADGEN_BACKEND_H_
