#include "tools/loadgen/grpc_backend.h"

#include "absl/strings/str_cat.h"

namespace pdserve::loadgen {

absl::StatusOr<std::unique_ptr<GrpcBackend>> GrpcBackend::Create(const std::string& address,
                                                                 const ClientOptions& options) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(address, options);
  if (!client.ok()) return client.status();
  return std::unique_ptr<GrpcBackend>(new GrpcBackend(*std::move(client)));
}

std::string GrpcBackend::Describe() const { return absl::StrCat("grpc ", client_->address()); }

absl::Status GrpcBackend::Probe() {
  CallOptions options;
  options.timeout = absl::Seconds(10);
  absl::StatusOr<v1::ListWorkersReply> reply = client_->ListWorkers(options);
  if (reply.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("router unreachable at ", client_->address(),
                                             " (gRPC): ", reply.status().message()));
}

BackendResult GrpcBackend::Send(const BackendRequest& request, Cancellation& cancellation,
                                const std::function<void()>& on_token) {
  GenerateRequest message = TokenRequest(*request.prompt, request.max_tokens);
  message.mutable_stop()->set_ignore_eos(true);
  BackendResult result;
  CallOptions options;
  options.timeout = absl::Seconds(request.timeout_s);
  options.retry = request.retry;
  options.on_retry = [&result](const absl::Status&, absl::Duration) { ++result.retries; };
  CancellationToken token;
  options.cancellation = token;
  cancellation.SetHook([token]() mutable { token.Cancel(); });
  int counted = 0;
  absl::StatusOr<GenerateResponse::Final> final =
      client_->GenerateStream(message, options, [&](const GenerateResponse::Token& t) {
        if (t.id() < 0) return;
        ++counted;
        on_token();
      });
  cancellation.ClearHook();
  result.cancelled = cancellation.cancelled();
  if (!final.ok()) {
    result.code = absl::StatusCodeToString(final.status().code());
    result.message = std::string(final.status().message());
    result.output_tokens = counted;
    return result;
  }
  result.output_tokens = final->completion_tokens() > 0 ? final->completion_tokens() : counted;
  if (final->has_timings()) {
    result.queue_s = final->timings().queue_seconds();
    result.cached_tokens = static_cast<int>(final->timings().cached_prompt_tokens());
  }
  return result;
}

}  // namespace pdserve::loadgen
