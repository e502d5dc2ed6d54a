#include "services/router/openai_api.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "core/base/mutex.h"
#include "core/metrics/buckets.h"
#include "pdserve/v1/router.grpc.pb.h"
#include "proto/retry_hint.h"
#include "services/router/openai_protocol.h"

namespace pdserve {
namespace {

constexpr char kJsonType[] = "application/json";
constexpr char kCompletionsPath[] = "/v1/completions";
constexpr char kChatPath[] = "/v1/chat/completions";
constexpr char kModelsPath[] = "/v1/models";
constexpr char kModelPath[] = "/v1/models/{id}";  // the metrics label

void SendError(httplib::Response& res, const OpenAiError& error) {
  res.status = error.http_status;
  if (error.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(DumpJson(ErrorBody(error)), kJsonType);
}

// Why a Router/Generate call produced no first message: its status, and the router's retry hint
// (kRetryAfterMsTrailer) when it was refused for overload.
struct RouterRefusal {
  grpc::Status status;
  std::optional<absl::Duration> retry_after;
};

// A refusal as the OpenAI error JSON, with Retry-After (whole seconds, rounded up) when the router
// gave a retry hint.
void SendRefusal(httplib::Response& res, const RouterRefusal& refusal, OpenAiEndpoint endpoint) {
  SendError(res,
            ErrorFromRouter(refusal.status.error_code(), refusal.status.error_message(), endpoint));
  if (refusal.retry_after.has_value()) {
    const int64_t seconds =
        absl::ToInt64Seconds(absl::Ceil(*refusal.retry_after, absl::Seconds(1)));
    res.set_header("Retry-After", absl::StrCat(std::max<int64_t>(1, seconds)));
  }
}

// One Router/Generate call. Not thread-safe (used by one HTTP request at a time).
struct RouterCall {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  bool finished = false;

  grpc::Status Finish() {
    finished = true;
    return reader->Finish();
  }
  // Ends the call (cancelling it when it still runs) and waits for gRPC to let go of it.
  void Cancel() {
    if (finished) return;
    context.TryCancel();
    v1::GenerateResponse ignored;
    while (reader->Read(&ignored)) {
    }
    Finish();
  }
  // Reads what is left of a call that has ended (after its final message) and collects its status.
  void Drain() {
    if (finished) return;
    v1::GenerateResponse ignored;
    while (reader->Read(&ignored)) {
    }
    Finish();
  }
  ~RouterCall() { Cancel(); }
};

// The room the router reported in "max_tokens = N must be in [1, R] ..." (request_validation.cc),
// or nullopt.
std::optional<int> RoomFromRouterMessage(const std::string& message) {
  const std::string kPrefix = "must be in [1, ";
  const size_t at = message.find(kPrefix);
  if (message.rfind("max_tokens", 0) != 0 || at == std::string::npos) return std::nullopt;
  const size_t start = at + kPrefix.size();
  const size_t end = message.find(']', start);
  int room = 0;
  if (end == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(message).substr(start, end - start), &room) || room < 1) {
    return std::nullopt;
  }
  return room;
}

class OpenAiApi : public std::enable_shared_from_this<OpenAiApi> {
 public:
  explicit OpenAiApi(const OpenAiApiOptions& options)
      : options_(options),
        stub_(v1::Router::NewStub(options.router)),
        created_(absl::ToUnixSeconds(absl::Now())) {
    if (options.metrics != nullptr) {
      requests_ = &options.metrics->AddCounter("pdserve_http_requests_total",
                                               "HTTP requests answered, by route and status code");
      duration_ = &options.metrics->AddHistogram(
          "pdserve_http_request_duration_seconds",
          "HTTP request duration, arrival to the last byte of the response");
    }
  }

  // Whether `req` may use the API; answers 401 when not.
  bool Authorized(const httplib::Request& req, httplib::Response& res) const {
    if (options_.api_keys == nullptr) return true;
    const absl::Status status =
        options_.api_keys->Authenticate(req.get_header_value("Authorization"));
    if (status.ok()) return true;
    SendError(res, ErrorFromRouter(grpc::StatusCode::UNAUTHENTICATED, std::string(status.message()),
                                   OpenAiEndpoint::kCompletions));
    return false;
  }

  // POST /v1/completions and /v1/chat/completions.
  void Generate(OpenAiEndpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void ListModels(httplib::Response& res);
  void GetModel(const std::string& id, httplib::Response& res);

  // Counts a response and, with a start time, its duration.
  void Record(const char* path, int code, std::optional<absl::Time> start) {
    if (requests_ != nullptr) {
      requests_->Add({{"path", path}, {"code", absl::StrCat(code)}}).Increment();
    }
    if (duration_ != nullptr && start.has_value()) {
      duration_->Add({{"path", path}}, LatencyBuckets())
          .Observe(absl::ToDoubleSeconds(absl::Now() - *start));
    }
  }

 private:
  // Starts the call (with the client's Authorization header, when it sent one) and reads its
  // first message; on failure returns nullptr with `*refusal`.
  std::unique_ptr<RouterCall> Start(const v1::GenerateRequest& request,
                                    const std::string& authorization, v1::GenerateResponse* first,
                                    RouterRefusal* refusal);
  std::unique_ptr<RouterCall> StartWithDefaultRoom(OpenAiRequest& request,
                                                   const std::string& authorization,
                                                   v1::GenerateResponse* first,
                                                   RouterRefusal* refusal);
  void Collect(OpenAiRequest& request, std::unique_ptr<RouterCall> call, v1::GenerateResponse first,
               httplib::Response& res);
  void Stream(OpenAiRequest& request, std::unique_ptr<RouterCall> call, v1::GenerateResponse first,
              absl::Time start, httplib::Response& res);
  Json ModelObject() const {
    Json model = Json::object();
    model["id"] = options_.model_id;
    model["object"] = "model";
    model["created"] = created_;
    model["owned_by"] = "pdserve";
    if (options_.max_context > 0) model["max_model_len"] = options_.max_context;
    return model;
  }

  const OpenAiApiOptions options_;
  const std::unique_ptr<v1::Router::Stub> stub_;
  const int64_t created_;
  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  prometheus::Family<prometheus::Histogram>* duration_ = nullptr;
};

std::unique_ptr<RouterCall> OpenAiApi::Start(const v1::GenerateRequest& request,
                                             const std::string& authorization,
                                             v1::GenerateResponse* first, RouterRefusal* refusal) {
  auto call = std::make_unique<RouterCall>();
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + options_.default_timeout));
  // Authorized already, so printable: the router applies the key's limits.
  if (!authorization.empty()) call->context.AddMetadata("authorization", authorization);
  call->reader = stub_->Generate(&call->context, request);
  if (call->reader->Read(first)) return call;
  refusal->status = call->Finish();
  if (refusal->status.ok()) {
    refusal->status =
        grpc::Status(grpc::StatusCode::INTERNAL, "the router ended the call without a reply");
  }
  refusal->retry_after = RetryHintFromCall(call->context);
  return nullptr;
}

// A chat request without max_tokens asks for the whole context first; the router answers how many
// tokens fit after the prompt (it alone tokenizes), and the request is sent again with that many.
std::unique_ptr<RouterCall> OpenAiApi::StartWithDefaultRoom(OpenAiRequest& request,
                                                            const std::string& authorization,
                                                            v1::GenerateResponse* first,
                                                            RouterRefusal* refusal) {
  std::unique_ptr<RouterCall> call = Start(request.generate, authorization, first, refusal);
  if (call != nullptr || !request.max_tokens_is_default ||
      refusal->status.error_code() != grpc::StatusCode::INVALID_ARGUMENT) {
    return call;
  }
  const std::optional<int> room = RoomFromRouterMessage(refusal->status.error_message());
  if (!room.has_value() || *room >= request.generate.max_tokens()) return call;
  request.generate.set_max_tokens(*room);
  return Start(request.generate, authorization, first, refusal);
}

void OpenAiApi::Generate(OpenAiEndpoint endpoint, const httplib::Request& req,
                         httplib::Response& res) {
  const absl::Time start = absl::Now();
  const char* path = endpoint == OpenAiEndpoint::kCompletions ? kCompletionsPath : kChatPath;
  OpenAiRequest request;
  const OpenAiLimits limits{options_.model_id, options_.max_context, options_.chat_template.get(),
                            options_.chat_template_error};
  if (!Authorized(req, res)) {
    Record(path, res.status, start);
    return;
  }
  if (auto error = ParseOpenAiRequest(endpoint, req.body, limits, &request)) {
    SendError(res, *error);
    Record(path, res.status, start);
    return;
  }
  v1::GenerateResponse first;
  RouterRefusal refusal;
  std::unique_ptr<RouterCall> call =
      StartWithDefaultRoom(request, req.get_header_value("Authorization"), &first, &refusal);
  if (call == nullptr) {
    SendRefusal(res, refusal, endpoint);
    Record(path, res.status, start);
    return;
  }
  if (request.stream) {
    Stream(request, std::move(call), std::move(first), start, res);  // records when it ends
    return;
  }
  Collect(request, std::move(call), std::move(first), res);
  Record(path, res.status, start);
}

void OpenAiApi::Collect(OpenAiRequest& request, std::unique_ptr<RouterCall> call,
                        v1::GenerateResponse first, httplib::Response& res) {
  std::string text;
  std::optional<v1::GenerateResponse::Final> final;
  v1::GenerateResponse message = std::move(first);
  do {
    for (const auto& token : message.tokens()) text += token.text();
    if (message.has_final()) final = message.final();
  } while (call->reader->Read(&message));
  const grpc::Status status = call->Finish();
  if (!status.ok()) {
    SendError(res, ErrorFromRouter(status.error_code(), status.error_message(), request.endpoint));
    return;
  }
  if (!final.has_value()) {
    SendError(res, ErrorFromRouter(grpc::StatusCode::INTERNAL,
                                   "the router ended the stream without a final message",
                                   request.endpoint));
    return;
  }
  const ResponseIdentity identity = NewResponseIdentity(request.endpoint, options_.model_id);
  res.status = 200;
  res.set_content(DumpJson(CompletionResponse(request.endpoint, identity, text, *final)),
                  kJsonType);
}

// Watches a streaming response's connection while its content provider waits for the router:
// when the client goes away, cancels the call at once instead of at the next token (a request may
// wait long in a queue or between tokens). One thread per streaming response.
class DisconnectWatch {
 public:
  explicit DisconnectWatch(grpc::ClientContext* context)
      : context_(context), thread_([this] { Loop(); }) {}
  ~DisconnectWatch() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      wake_.SignalAll();
    }
    thread_.join();
  }
  // Between Begin and End (on the provider's thread) the watch may probe `sink`.
  void Begin(httplib::DataSink* sink) {
    MutexLock lock(&mu_);
    sink_ = sink;
  }
  void End() {
    MutexLock lock(&mu_);  // waits for a probe in progress
    sink_ = nullptr;
  }

 private:
  void Loop() {
    MutexLock lock(&mu_);
    while (!stopping_) {
      wake_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
      if (!stopping_ && sink_ != nullptr && !sink_->is_writable()) {
        context_->TryCancel();
        sink_ = nullptr;
      }
    }
  }

  grpc::ClientContext* const context_;
  Mutex mu_;
  CondVar wake_;  // signalled when stopping_ is set
  httplib::DataSink* sink_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// What one streaming response keeps between calls of its content provider (all on one httplib
// thread).
struct StreamState {
  std::shared_ptr<OpenAiApi> api;
  OpenAiEndpoint endpoint;
  bool include_usage = false;
  ResponseIdentity identity;
  std::unique_ptr<RouterCall> call;
  std::unique_ptr<DisconnectWatch> watch;       // of `call`; destroyed before it
  std::optional<v1::GenerateResponse> pending;  // the first message, read before the headers
  bool first_chunk = true;
  bool done = false;
  absl::Time start;

  // The events for one router message (and the end of the stream after the final one).
  std::string Events(const v1::GenerateResponse& message) {
    std::string text;
    for (const auto& token : message.tokens()) text += token.text();
    std::string out;
    if (!text.empty() || (first_chunk && endpoint == OpenAiEndpoint::kChatCompletions)) {
      out += SseEvent(StreamChunk(endpoint, identity, text, nullptr, first_chunk));
      first_chunk = false;
    }
    if (message.has_final()) {
      out += SseEvent(StreamChunk(endpoint, identity, "",
                                  FinishReasonName(message.final().finish_reason()), first_chunk));
      if (include_usage) out += SseEvent(UsageChunk(endpoint, identity, message.final()));
      out += kSseDone;
      done = true;
    }
    return out;
  }

  // Feeds the sink one router message per call; false when the client has gone.
  bool Provide(httplib::DataSink& sink) {
    if (done) {
      sink.done();
      return true;
    }
    v1::GenerateResponse message;
    if (pending.has_value()) {
      message = *std::move(pending);
      pending.reset();
    } else {
      if (!sink.is_writable()) return false;
      watch->Begin(&sink);
      const bool read = call->reader->Read(&message);
      watch->End();
      if (!read) {
        // The router ended without a final message: an error after the stream started.
        const grpc::Status status = call->Finish();
        const OpenAiError error =
            status.ok()
                ? ErrorFromRouter(grpc::StatusCode::INTERNAL,
                                  "the router ended the stream without a final message", endpoint)
                : ErrorFromRouter(status.error_code(), status.error_message(), endpoint);
        done = true;
        const std::string event = SseEvent(ErrorBody(error));
        if (!sink.write(event.data(), event.size())) return false;
        sink.done();
        return true;
      }
    }
    const std::string events = Events(message);
    if (!events.empty() && !sink.write(events.data(), events.size())) return false;
    if (done) {
      call->Drain();
      sink.done();
    }
    return true;
  }
};

void OpenAiApi::Stream(OpenAiRequest& request, std::unique_ptr<RouterCall> call,
                       v1::GenerateResponse first, absl::Time start, httplib::Response& res) {
  auto state = std::make_shared<StreamState>();
  state->api = shared_from_this();
  state->endpoint = request.endpoint;
  state->include_usage = request.include_usage;
  state->identity = NewResponseIdentity(request.endpoint, options_.model_id);
  state->call = std::move(call);
  state->watch = std::make_unique<DisconnectWatch>(&state->call->context);
  state->pending = std::move(first);
  state->start = start;
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [state](size_t /*offset*/, httplib::DataSink& sink) {
        try {
          return state->Provide(sink);
        } catch (const std::exception&) {
          return false;
        }
      },
      [state](bool /*success*/) {
        if (state->call == nullptr) return;
        state->watch.reset();
        state->call->Cancel();  // the client went away mid-stream: stop generating
        state->call.reset();
        state->api->Record(
            state->endpoint == OpenAiEndpoint::kCompletions ? kCompletionsPath : kChatPath, 200,
            state->start);
      });
}

void OpenAiApi::ListModels(httplib::Response& res) {
  Json body = Json::object();
  body["object"] = "list";
  body["data"] = Json::array({ModelObject()});
  res.set_content(DumpJson(body), kJsonType);
}

void OpenAiApi::GetModel(const std::string& id, httplib::Response& res) {
  if (id != options_.model_id) {
    OpenAiError error =
        InvalidRequest(absl::StrCat("The model '", id, "' does not exist"), "model");
    error.http_status = 404;
    error.code = "model_not_found";
    SendError(res, error);
    return;
  }
  res.set_content(DumpJson(ModelObject()), kJsonType);
}

// The metrics label of a request path.
const char* PathLabel(const std::string& path) {
  if (path == kCompletionsPath) return kCompletionsPath;
  if (path == kChatPath) return kChatPath;
  if (path == kModelsPath) return kModelsPath;
  if (path.rfind("/v1/models/", 0) == 0) return kModelPath;
  return "other";
}

// Wraps a handler: no exception escapes to httplib (it would answer a bare 500).
template <typename Handler>
httplib::Server::Handler Guarded(Handler handler) {
  return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    try {
      handler(req, res);
    } catch (const std::exception& e) {
      OpenAiError error;
      error.http_status = 500;
      error.type = "server_error";
      error.message = absl::StrCat("internal error: ", e.what());
      SendError(res, error);
    }
  };
}

void MethodNotAllowed(httplib::Server& server, const std::string& pattern, const char* allowed) {
  auto handler = [allowed](const httplib::Request& req, httplib::Response& res) {
    OpenAiError error = InvalidRequest(
        absl::StrCat("method ", req.method, " is not allowed on ", req.path, "; use ", allowed));
    error.http_status = 405;
    error.code = "method_not_allowed";
    res.set_header("Allow", allowed);
    SendError(res, error);
  };
  if (std::string(allowed) != "GET") server.Get(pattern, handler);
  if (std::string(allowed) != "POST") server.Post(pattern, handler);
  server.Put(pattern, handler);
  server.Patch(pattern, handler);
  server.Delete(pattern, handler);
}

}  // namespace

void InstallOpenAiRoutes(httplib::Server& server, const OpenAiApiOptions& options) {
  auto api = std::make_shared<OpenAiApi>(options);
  server.Post(kCompletionsPath, Guarded([api](const httplib::Request& req, httplib::Response& res) {
                api->Generate(OpenAiEndpoint::kCompletions, req, res);
              }));
  server.Post(kChatPath, Guarded([api](const httplib::Request& req, httplib::Response& res) {
                api->Generate(OpenAiEndpoint::kChatCompletions, req, res);
              }));
  server.Get(kModelsPath, Guarded([api](const httplib::Request& req, httplib::Response& res) {
               const absl::Time start = absl::Now();
               if (api->Authorized(req, res)) api->ListModels(res);
               api->Record(kModelsPath, res.status, start);
             }));
  server.Get("/v1/models/(.+)", Guarded([api](const httplib::Request& req, httplib::Response& res) {
               const absl::Time start = absl::Now();
               if (api->Authorized(req, res)) api->GetModel(req.matches[1].str(), res);
               api->Record(kModelPath, res.status, start);
             }));
  MethodNotAllowed(server, kCompletionsPath, "POST");
  MethodNotAllowed(server, kChatPath, "POST");
  MethodNotAllowed(server, kModelsPath, "GET");
  MethodNotAllowed(server, "/v1/models/(.+)", "GET");

  // Error responses httplib makes itself (unknown path, body too large, malformed HTTP) get an
  // OpenAI-shaped body; responses the routes above made already have one.
  server.set_error_handler(httplib::Server::HandlerWithResponse(
      [api](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        OpenAiError error;
        error.http_status = res.status;
        switch (res.status) {
          case 404:
            error.message = absl::StrCat("unknown path: ", req.method, " ", req.path);
            error.code = "not_found";
            break;
          case 405:
            error.message = absl::StrCat("method ", req.method, " is not allowed on ", req.path);
            error.code = "method_not_allowed";
            break;
          case 413:
            error.message = "the request body is too large";
            error.code = "request_too_large";
            break;
          default:
            error.message = absl::StrCat("HTTP error ", res.status);
            if (res.status >= 500) error.type = "server_error";
            break;
        }
        res.set_content(DumpJson(ErrorBody(error)), kJsonType);
        api->Record(PathLabel(req.path), res.status, std::nullopt);
        return httplib::Server::HandlerResponse::Handled;
      }));
}

}  // namespace pdserve
