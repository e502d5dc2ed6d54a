// pdserve C++ client SDK: talks to the router's pdserve.v1.Router service.
//
//   auto client = pdserve::Client::Create("127.0.0.1:50051");
//   auto result = (*client)->Generate(pdserve::TextRequest("Once upon a time", 64));
//   // result->text, result->token_ids, result->final.finish_reason(), .timings()
//
// Errors are absl::Status with the server's code and message: INVALID_ARGUMENT (bad request),
// RESOURCE_EXHAUSTED (overloaded: the router's queue is full; Generate retries it as
// CallOptions::retry says, by default up to 8 times honouring the router's hint, and the status
// it finally returns carries that hint, RetryHint in proto/retry_hint.h), UNAVAILABLE (the router
// is unreachable, or no worker can take the request), DEADLINE_EXCEEDED, CANCELLED. The channel
// does not wait for the router to come up, so an unreachable router fails promptly.
//
// Thread-safety: one Client may be used by many threads at once. A CancellationToken may be
// cancelled from any thread; it cancels the call it is attached to (or the next one, if none is
// running yet).
#ifndef PDSERVE_CLIENT_PDSERVE_CLIENT_H_
#define PDSERVE_CLIENT_PDSERVE_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/retry_policy.h"
#include "core/rpc/tls.h"
#include "pdserve/v1/router.grpc.pb.h"

namespace pdserve {

using GenerateRequest = v1::GenerateRequest;
using GenerateResponse = v1::GenerateResponse;

// A handle another thread can use to cancel a running call. Copies share one state. Once
// cancelled it stays cancelled: a call started with it afterwards fails with CANCELLED at once.
class CancellationToken {
 public:
  CancellationToken();
  void Cancel();
  bool cancelled() const;

 private:
  friend class Client;
  struct State;
  // Attaches a running call's context; false when already cancelled. Detach before the context
  // is destroyed.
  bool Attach(grpc::ClientContext* context) const;
  void Detach() const;
  // Waits `wait` unless cancelled meanwhile; false when cancelled.
  bool SleepUnlessCancelled(absl::Duration wait) const;
  std::shared_ptr<State> state_;
};

struct CallOptions {
  // The call fails with DEADLINE_EXCEEDED at `deadline` or after `timeout`, whichever is earlier;
  // the deadline propagates to every worker the request touches.
  absl::Time deadline = absl::InfiniteFuture();
  absl::Duration timeout = absl::InfiniteDuration();
  std::optional<CancellationToken> cancellation;
  // Generate and GenerateStream retry RESOURCE_EXHAUSTED (never anything else, and never once a
  // token arrived); retries stay within the deadline above.
  RetryPolicy retry;
  // Called before each retry's wait with the refusal and the wait.
  std::function<void(const absl::Status& refusal, absl::Duration wait)> on_retry;
};

struct GenerateResult {
  std::vector<int> token_ids;
  std::string text;
  GenerateResponse::Final final;  // finish reason, usage, timings, workers
};

// Builders. max_tokens must be in [1, context − prompt length].
GenerateRequest TextRequest(const std::string& text, int max_tokens);
GenerateRequest TokenRequest(const std::vector<int>& token_ids, int max_tokens);

struct ClientOptions {
  // Sent with every Generate as "authorization: Bearer <api_key>" when not empty (a router started
  // with --api-key refuses calls without one as UNAUTHENTICATED).
  std::string api_key;
  // TLS: with tls.ca set, the router's certificate must verify under it (and tls.cert/tls.key,
  // when set, are presented); empty = plaintext.
  TlsFiles tls;
};

class Client {
 public:
  // `router_address` is "host:port". Does not connect yet; InvalidArgument for an empty address.
  static absl::StatusOr<std::unique_ptr<Client>> Create(const std::string& router_address,
                                                        const ClientOptions& options = {});

  // Runs the request to its end and returns all tokens and text.
  absl::StatusOr<GenerateResult> Generate(const GenerateRequest& request,
                                          const CallOptions& options = {});

  // Calls `on_token` (on the calling thread) for each token as it arrives, then returns the final
  // message. Text-only entries (id -1) may carry text held back at the end of a stream.
  absl::StatusOr<GenerateResponse::Final> GenerateStream(
      const GenerateRequest& request, const CallOptions& options,
      const std::function<void(const GenerateResponse::Token&)>& on_token);

  absl::StatusOr<v1::ListWorkersReply> ListWorkers(const CallOptions& options = {});

  const std::string& address() const { return address_; }

 private:
  Client(std::string address, std::shared_ptr<grpc::Channel> channel, ClientOptions options);
  // The call's absolute deadline from `options` (deadline and timeout).
  static absl::Time Deadline(const CallOptions& options);
  // Sets the deadline and the API key.
  void Configure(absl::Time deadline, grpc::ClientContext& context) const;
  // One Generate call, no retry.
  absl::StatusOr<GenerateResponse::Final> GenerateOnce(
      const GenerateRequest& request, const CallOptions& options, absl::Time deadline,
      const std::function<void(const GenerateResponse::Token&)>& on_token);

  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  ClientOptions options_;
  std::unique_ptr<v1::Router::Stub> stub_;  // thread-safe
};

}  // namespace pdserve

#endif  // PDSERVE_CLIENT_PDSERVE_CLIENT_H_
