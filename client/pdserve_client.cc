#include "client/pdserve_client.h"

#include <google/protobuf/stubs/common.h>

#include <utility>

#include "absl/base/thread_annotations.h"
#include "core/base/mutex.h"
#include "proto/retry_hint.h"

namespace pdserve {
namespace {

// The call's status, with the router's retry hint (its trailing metadata) as a payload.
absl::Status FromGrpc(const grpc::Status& status, const grpc::ClientContext* context = nullptr) {
  if (status.ok()) return absl::OkStatus();
  absl::Status result(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  if (context != nullptr) {
    if (std::optional<absl::Duration> hint = RetryHintFromCall(*context)) {
      SetRetryHint(result, *hint);
    }
  }
  return result;
}

}  // namespace

struct CancellationToken::State {
  mutable Mutex mu;
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  CondVar cancel;  // signalled when cancelled is set
  grpc::ClientContext* context ABSL_GUARDED_BY(mu) = nullptr;
};

CancellationToken::CancellationToken() : state_(std::make_shared<State>()) {}

void CancellationToken::Cancel() {
  MutexLock lock(&state_->mu);
  state_->cancelled = true;
  state_->cancel.SignalAll();
  if (state_->context != nullptr) state_->context->TryCancel();
}

bool CancellationToken::cancelled() const {
  MutexLock lock(&state_->mu);
  return state_->cancelled;
}

bool CancellationToken::Attach(grpc::ClientContext* context) const {
  MutexLock lock(&state_->mu);
  if (state_->cancelled) return false;
  state_->context = context;
  return true;
}

void CancellationToken::Detach() const {
  MutexLock lock(&state_->mu);
  state_->context = nullptr;
}

bool CancellationToken::SleepUnlessCancelled(absl::Duration wait) const {
  const absl::Time deadline = absl::Now() + wait;
  MutexLock lock(&state_->mu);
  while (!state_->cancelled && !state_->cancel.WaitWithDeadline(&state_->mu, deadline)) {
  }
  return !state_->cancelled;
}

GenerateRequest TextRequest(const std::string& text, int max_tokens) {
  GenerateRequest request;
  request.set_text(text);
  request.set_max_tokens(max_tokens);
  return request;
}

GenerateRequest TokenRequest(const std::vector<int>& token_ids, int max_tokens) {
  GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Add(token_ids.begin(), token_ids.end());
  request.set_max_tokens(max_tokens);
  return request;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(const std::string& router_address,
                                                       const ClientOptions& options) {
  if (router_address.empty()) return absl::InvalidArgumentError("empty router address");
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<const Tls> tls = Tls::Insecure();
  if (!options.tls.ca.empty() || !options.tls.cert.empty()) {
    absl::StatusOr<std::shared_ptr<const Tls>> loaded = Tls::Load(options.tls);
    if (!loaded.ok()) return loaded.status();
    tls = *std::move(loaded);
  }
  auto channel = grpc::CreateCustomChannel(router_address, tls->ChannelCredentials(), args);
  for (char c : options.api_key) {
    if (c <= ' ' || c >= 0x7f) {
      return absl::InvalidArgumentError("the API key holds a space or a non-printable character");
    }
  }
  return std::unique_ptr<Client>(new Client(router_address, std::move(channel), options));
}

Client::Client(std::string address, std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : address_(std::move(address)),
      channel_(std::move(channel)),
      options_(std::move(options)),
      stub_(v1::Router::NewStub(channel_)) {}

absl::Time Client::Deadline(const CallOptions& options) {
  absl::Time deadline = options.deadline;
  if (options.timeout != absl::InfiniteDuration()) {
    deadline = std::min(deadline, absl::Now() + options.timeout);
  }
  return deadline;
}

void Client::Configure(absl::Time deadline, grpc::ClientContext& context) const {
  if (deadline != absl::InfiniteFuture()) context.set_deadline(absl::ToChronoTime(deadline));
  if (!options_.api_key.empty()) context.AddMetadata("authorization", "Bearer " + options_.api_key);
  context.set_wait_for_ready(false);  // an unreachable router is UNAVAILABLE at once
}

absl::StatusOr<GenerateResponse::Final> Client::GenerateStream(
    const GenerateRequest& request, const CallOptions& options,
    const std::function<void(const GenerateResponse::Token&)>& on_token) {
  // A proto3 string must be UTF-8: the router could not even parse the request otherwise.
  if (request.has_text() && !google::protobuf::internal::IsStructurallyValidUTF8(request.text())) {
    return absl::InvalidArgumentError("prompt text is not valid UTF-8");
  }
  for (const std::string& stop : request.stop().stop_strings()) {
    if (!google::protobuf::internal::IsStructurallyValidUTF8(stop)) {
      return absl::InvalidArgumentError("a stop string is not valid UTF-8");
    }
  }
  if (absl::Status valid = options.retry.Validate(); !valid.ok()) return valid;
  const absl::Time deadline = Deadline(options);
  for (int retry = 0;; ++retry) {
    absl::StatusOr<GenerateResponse::Final> result =
        GenerateOnce(request, options, deadline, on_token);
    if (result.ok() || result.status().code() != absl::StatusCode::kResourceExhausted) {
      return result;
    }
    const std::optional<absl::Duration> wait =
        NextRetryWait(options.retry, retry, RetryHint(result.status()), deadline);
    if (!wait.has_value()) return result;
    if (options.on_retry) options.on_retry(result.status(), *wait);
    if (!options.cancellation) {
      absl::SleepFor(*wait);
    } else if (!options.cancellation->SleepUnlessCancelled(*wait)) {
      return absl::CancelledError("cancelled while waiting to retry");
    }
  }
}

absl::StatusOr<GenerateResponse::Final> Client::GenerateOnce(
    const GenerateRequest& request, const CallOptions& options, absl::Time deadline,
    const std::function<void(const GenerateResponse::Token&)>& on_token) {
  grpc::ClientContext context;
  Configure(deadline, context);
  if (options.cancellation && !options.cancellation->Attach(&context)) {
    return absl::CancelledError("cancelled before the call started");
  }
  struct Detacher {
    const std::optional<CancellationToken>& token;
    ~Detacher() {
      if (token) token->Detach();
    }
  } detacher{options.cancellation};

  std::unique_ptr<grpc::ClientReader<GenerateResponse>> reader = stub_->Generate(&context, request);
  GenerateResponse response;
  std::optional<GenerateResponse::Final> final;
  while (reader->Read(&response)) {
    for (const GenerateResponse::Token& token : response.tokens()) {
      if (on_token) on_token(token);
    }
    if (response.has_final()) final = response.final();
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpc(status, &context);
  if (!final) return absl::InternalError("the router ended the stream without a final message");
  return *std::move(final);
}

absl::StatusOr<GenerateResult> Client::Generate(const GenerateRequest& request,
                                                const CallOptions& options) {
  GenerateResult result;
  auto final = GenerateStream(request, options, [&](const GenerateResponse::Token& token) {
    if (token.id() >= 0) result.token_ids.push_back(token.id());
    result.text += token.text();
  });
  if (!final.ok()) return final.status();
  result.final = *std::move(final);
  return result;
}

absl::StatusOr<v1::ListWorkersReply> Client::ListWorkers(const CallOptions& options) {
  grpc::ClientContext context;
  Configure(Deadline(options), context);
  if (options.cancellation && !options.cancellation->Attach(&context)) {
    return absl::CancelledError("cancelled before the call started");
  }
  v1::ListWorkersReply reply;
  grpc::Status status = stub_->ListWorkers(&context, v1::ListWorkersRequest(), &reply);
  if (options.cancellation) options.cancellation->Detach();
  if (!status.ok()) return FromGrpc(status);
  return reply;
}

}  // namespace pdserve
