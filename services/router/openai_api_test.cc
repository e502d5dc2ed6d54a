// Drives the OpenAI-compatible HTTP API end to end in-process: a real RouterServer (ByteTokenizer)
// with one small fake monolithic worker, an HttpServer with the routes, and httplib::Client.
#include "services/router/openai_api.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/pdserve_client.h"
#include "core/base/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/decode.grpc.pb.h"
#include "services/common/http_server.h"
#include "services/router/plain_chat_template.h"
#include "services/router/router_service.h"
#include "services/router/test_byte_tokenizer.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr absl::Duration kWait = absl::Seconds(10);
constexpr int kMaxContext = 256;

// A monolithic worker: streams `script_` (at most max_tokens of it), one token per message,
// `delay_` apart; ends with FINISH_REASON_LENGTH when max_tokens cut it, else `reason_`. With
// `fail_after_` >= 0 it fails with INTERNAL after that many tokens; with `hang_after_` >= 0 it
// waits there for the call to be cancelled.
class FakeWorker final : public v1::Decode::Service {
 public:
  grpc::Status Decode(grpc::ServerContext* context, const v1::DecodeRequest* request,
                      grpc::ServerWriter<v1::DecodeResponse>* writer) override {
    {
      MutexLock lock(&mu_);
      requests_.push_back(*request);
    }
    const int n = std::min<int>(script_.size(), request->max_tokens());
    for (int i = 0; i < n; ++i) {
      if (i == fail_after_) return grpc::Status(grpc::StatusCode::INTERNAL, "worker broke");
      if (i == hang_after_) {
        const absl::Time give_up = absl::Now() + absl::Seconds(30);
        while (!context->IsCancelled() && absl::Now() < give_up) {
          absl::SleepFor(absl::Milliseconds(2));
        }
        MarkCancelled();
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      if (context->IsCancelled()) {
        MarkCancelled();
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      v1::DecodeResponse response;
      response.add_tokens(script_[i]);
      if (i + 1 == n) {
        response.set_done(true);
        response.set_finish_reason(n < static_cast<int>(script_.size()) ? v1::FINISH_REASON_LENGTH
                                                                        : reason_);
      }
      if (!writer->Write(response)) {
        MarkCancelled();
        return grpc::Status(grpc::StatusCode::CANCELLED, "write failed");
      }
      absl::SleepFor(delay_);
    }
    return grpc::Status::OK;
  }
  grpc::Status GetQueue(grpc::ServerContext*, const v1::GetQueueRequest*,
                        v1::QueueStatus*) override {
    return grpc::Status::OK;
  }

  std::vector<v1::DecodeRequest> requests() {
    MutexLock lock(&mu_);
    return requests_;
  }
  bool WaitCancelled() {
    const absl::Time deadline = absl::Now() + kWait;
    MutexLock lock(&mu_);
    while (!cancelled_ && !changed_.WaitWithDeadline(&mu_, deadline)) {
    }
    return cancelled_;
  }

  std::vector<int> script_ = ByteTokenizer::Ids("Hello world");
  v1::FinishReason reason_ = v1::FINISH_REASON_STOP_TOKEN;
  absl::Duration delay_ = absl::ZeroDuration();
  int fail_after_ = -1;
  int hang_after_ = -1;

 private:
  void MarkCancelled() {
    MutexLock lock(&mu_);
    cancelled_ = true;
    changed_.SignalAll();
  }

  Mutex mu_;
  CondVar changed_;
  std::vector<v1::DecodeRequest> requests_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

std::string PromptText(const v1::DecodeRequest& request) {
  std::string text;
  for (int id : request.prompt()) text += ByteTokenizer().DecodePiece(0, id);
  return text;
}

struct SseStream {
  std::vector<Json> events;
  bool done = false;  // saw data: [DONE]
};

SseStream ParseSse(const std::string& body) {
  SseStream out;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::StartsWith(event, "data: ")) << event;
    const absl::string_view data = event.substr(6);
    if (data == "[DONE]") {
      EXPECT_FALSE(out.done) << "two [DONE]";
      out.done = true;
      continue;
    }
    EXPECT_FALSE(out.done) << "data after [DONE]";
    out.events.push_back(Json::parse(data));
  }
  return out;
}

class OpenAiApiTest : public ::testing::Test {
 protected:
  void TearDown() override {
    http_.reset();
    router_.reset();
    if (worker_server_ != nullptr) worker_server_->Shutdown(absl::ZeroDuration());
  }

  static RouterOptions Options() {
    RouterOptions o;
    o.tokenizer = std::make_shared<ByteTokenizer>();
    o.max_context = kMaxContext;
    o.vocab_size = ByteTokenizer::kVocab;
    o.heartbeat_interval = absl::Milliseconds(100);
    return o;
  }
  // Starts the worker, the router (`options` plus the worker) and the HTTP server.
  void Start(RouterOptions options, absl::Duration timeout = absl::Seconds(30),
             size_t max_body_bytes = 1 << 20) {
    auto worker = ServiceServer::Start("127.0.0.1:0", {&worker_});
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_server_ = *std::move(worker);
    options.monolithic_workers = {worker_server_->address()};
    auto router = RouterServer::Start(options);
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    OpenAiApiOptions api;
    api.router = router_->server().InProcessChannel();
    api.model_id = "stories260K";
    api.max_context = kMaxContext;
    api.metrics = &metrics_;
    api.default_timeout = timeout;
    api.api_keys = options.api_keys;
    HttpServerOptions http;
    http.max_body_bytes = max_body_bytes;
    auto server =
        HttpServer::Start(http, metrics_, [&](httplib::Server& s) { InstallOpenAiRoutes(s, api); });
    ASSERT_TRUE(server.ok()) << server.status();
    http_ = *std::move(server);
    client_ = std::make_unique<httplib::Client>("http://" + http_->address());
    client_->set_read_timeout(30, 0);
  }
  void Start() { Start(Options()); }

  // Starts a streaming completion (with `authorization`, when given) on its own thread and returns
  // once the router has admitted it; its client then reads nothing until `hang_up`, and the
  // returned thread ends once it hung up.
  std::thread HangingStream(std::atomic<bool>& hang_up, const std::string& authorization = "") {
    auto admitted = std::make_shared<std::atomic<bool>>(false);
    std::thread thread([this, &hang_up, admitted, authorization] {
      httplib::Request request;
      request.method = "POST";
      request.path = "/v1/completions";
      request.body = R"({"prompt": "x", "stream": true})";
      if (!authorization.empty()) request.headers.emplace("Authorization", authorization);
      request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
        *admitted = true;
        while (!hang_up) absl::SleepFor(absl::Milliseconds(5));
        return false;
      };
      httplib::Client("http://" + http_->address()).send(request);
    });
    while (!*admitted) absl::SleepFor(absl::Milliseconds(5));  // admitted: the worker holds it
    return thread;
  }

  httplib::Result Post(const std::string& path, const std::string& body) {
    return client_->Post(path.c_str(), body, "application/json");
  }
  // Posts `body` and expects an OpenAI-shaped error with `status`; returns the error object.
  Json ExpectError(const std::string& path, const std::string& body, int status) {
    auto res = Post(path, body);
    EXPECT_TRUE(res) << body;
    if (!res) return Json();
    EXPECT_EQ(res->status, status) << body << " → " << res->body;
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    Json json = Json::parse(res->body, nullptr, false);
    EXPECT_TRUE(json.is_object() && json.contains("error")) << res->body;
    if (!json.is_object() || !json.contains("error")) return Json();
    const Json& error = json["error"];
    EXPECT_TRUE(error["message"].is_string());
    EXPECT_TRUE(error["type"].is_string());
    EXPECT_TRUE(error.contains("param"));
    EXPECT_TRUE(error.contains("code"));
    return error;
  }

  FakeWorker worker_;
  MetricsRegistry metrics_;
  std::unique_ptr<ServiceServer> worker_server_;
  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(OpenAiApiTest, Completion) {
  Start();
  auto res =
      Post("/v1/completions",
           R"({"model": "stories260K", "prompt": "Once", "max_tokens": 5, "temperature": 0})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json body = Json::parse(res->body);
  EXPECT_THAT(body["id"].get<std::string>(), ::testing::StartsWith("cmpl-"));
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "stories260K");
  EXPECT_TRUE(body["created"].is_number_integer());
  ASSERT_EQ(body["choices"].size(), 1u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["text"], "Hello");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);  // BOS O n c e
  EXPECT_EQ(body["usage"]["completion_tokens"], 5);
  EXPECT_EQ(body["usage"]["total_tokens"], 10);
  const auto requests = worker_.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].max_tokens(), 5);
  EXPECT_EQ(PromptText(requests[0]), "Once");
  EXPECT_FLOAT_EQ(requests[0].sampling().temperature(), 0.0f);

  // Token-id prompt, the whole script: finish_reason "stop".
  res = Post("/v1/completions", R"({"prompt": [[50, 51]], "max_tokens": 50})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body)["choices"][0]["text"], "Hello world");
  EXPECT_EQ(Json::parse(res->body)["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(Json::parse(res->body)["usage"]["prompt_tokens"], 2);

  const std::string rendered = metrics_.Render();
  EXPECT_THAT(rendered,
              HasSubstr(R"(pdserve_http_requests_total{code="200",path="/v1/completions"} 2)"));
  EXPECT_THAT(
      rendered,
      HasSubstr(R"(pdserve_http_request_duration_seconds_count{path="/v1/completions"} 2)"));
}

TEST_F(OpenAiApiTest, StreamedCompletionEqualsTheWholeOne) {
  Start();
  const std::string request =
      R"({"prompt": "Once", "max_tokens": 50, "temperature": 0, "stop": "wor", )";
  auto whole = Post("/v1/completions", request + R"("stream": false})");
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200);
  EXPECT_EQ(Json::parse(whole->body)["choices"][0]["text"], "Hello ");

  auto res = Post("/v1/completions",
                  request + R"("stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const SseStream stream = ParseSse(res->body);
  EXPECT_TRUE(stream.done);
  ASSERT_GE(stream.events.size(), 3u);
  std::string text;
  std::string id = stream.events[0]["id"];
  for (size_t i = 0; i + 1 < stream.events.size(); ++i) {
    const Json& e = stream.events[i];
    EXPECT_EQ(e["object"], "text_completion");
    EXPECT_EQ(e["id"], id);
    ASSERT_EQ(e["choices"].size(), 1u);
    text += e["choices"][0]["text"].get<std::string>();
    const bool last = i + 2 == stream.events.size();
    EXPECT_EQ(e["choices"][0]["finish_reason"].is_null(), !last) << e.dump();
  }
  EXPECT_EQ(text, "Hello ");
  EXPECT_EQ(stream.events[stream.events.size() - 2]["choices"][0]["finish_reason"], "stop");
  const Json& usage = stream.events.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 9);  // H e l l o ␠ w o r
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 5);

  // Without include_usage: no usage chunk.
  res = Post("/v1/completions", request + R"("stream": true})");
  ASSERT_TRUE(res);
  const SseStream plain = ParseSse(res->body);
  EXPECT_TRUE(plain.done);
  for (const Json& e : plain.events) EXPECT_EQ(e["choices"].size(), 1u);
}

TEST_F(OpenAiApiTest, Chat) {
  worker_.script_ = ByteTokenizer::Ids(" Hi there.\nUser: and more");
  Start();
  auto res = Post("/v1/chat/completions", R"({"model": "stories260K", "messages": [
      {"role": "system", "content": "Be nice."}, {"role": "user", "content": "Hello"}],
      "max_tokens": 100, "temperature": 0})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json body = Json::parse(res->body);
  EXPECT_THAT(body["id"].get<std::string>(), ::testing::StartsWith("chatcmpl-"));
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], " Hi there.");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  const auto requests = worker_.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(PromptText(requests[0]), "Be nice.\n\nUser: Hello\nAssistant:");

  res = Post("/v1/chat/completions",
             R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}],
                 "max_completion_tokens": 100, "temperature": 0, "stream": true})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const SseStream stream = ParseSse(res->body);
  EXPECT_TRUE(stream.done);
  ASSERT_GE(stream.events.size(), 2u);
  EXPECT_EQ(stream.events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(stream.events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content;
  for (const Json& e : stream.events) {
    const Json& delta = e["choices"][0]["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(content, " Hi there.");
  EXPECT_EQ(stream.events.back()["choices"][0]["finish_reason"], "stop");
}

TEST_F(OpenAiApiTest, ChatWithoutMaxTokensGetsTheRestOfTheContext) {
  Start();
  auto res = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}]})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const auto requests = worker_.requests();
  ASSERT_EQ(requests.size(), 1u);
  const int prompt = 1 + static_cast<int>(std::string("User: Hi\nAssistant:").size());
  EXPECT_EQ(requests[0].max_tokens(), kMaxContext - prompt);
}

TEST_F(OpenAiApiTest, Models) {
  Start();
  auto res = client_->Get("/v1/models");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const Json list = Json::parse(res->body);
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], "stories260K");
  EXPECT_EQ(list["data"][0]["object"], "model");
  EXPECT_EQ(list["data"][0]["owned_by"], "pdserve");
  EXPECT_EQ(list["data"][0]["max_model_len"], kMaxContext);
  res = client_->Get("/v1/models/stories260K");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(Json::parse(res->body)["id"], "stories260K");
  res = client_->Get("/v1/models/gpt-4");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], "model_not_found");
}

TEST_F(OpenAiApiTest, RequestErrors) {
  Start();
  Json e = ExpectError("/v1/completions", R"({"prompt": "x", "max_tokens": -1})", 400);
  EXPECT_EQ(e["param"], "max_tokens");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("max_tokens"));
  e = ExpectError("/v1/completions", R"({"prompt": "x", "model": "gpt-4"})", 404);
  EXPECT_EQ(e["code"], "model_not_found");
  ExpectError("/v1/completions", R"({"prompt": "x", )", 400);
  // The router's validation: a prompt that fills the context, ids outside the vocabulary.
  e = ExpectError("/v1/completions", Json{{"prompt", std::string(300, 'a')}}.dump(), 400);
  EXPECT_EQ(e["param"], "prompt");
  e = ExpectError("/v1/completions", R"({"prompt": [100000]})", 400);
  EXPECT_EQ(e["param"], "prompt");
  e = ExpectError("/v1/completions", R"({"prompt": "abc", "max_tokens": 254})", 400);
  EXPECT_EQ(e["param"], "max_tokens");
  e = ExpectError("/v1/chat/completions", R"({"messages": []})", 400);
  EXPECT_EQ(e["param"], "messages");

  // Fuzz: nothing crashes, every answer is a JSON error.
  const std::string bodies[] = {
      "",
      "{",
      "nul",
      R"({"prompt": ["a", "b"]})",
      R"({"prompt": "x", "max_tokens": 1e999})",
      R"({"prompt": "x", "max_tokens": 18446744073709551616})",
      R"({"prompt": "x", "temperature": -1e308})",
      R"({"prompt": "x", "seed": "1"})",
      std::string("{\"prompt\": \"\xc3\x28\"}"),
      std::string("\xff\xfe{}"),
      R"({"messages": {}, "prompt": {}})",
      R"({"prompt": [1, [2]]})",
      std::string(10000, '{'),
  };
  for (const std::string& body : bodies) {
    ExpectError("/v1/completions", body, 400);
    ExpectError("/v1/chat/completions", body, 400);
  }
}

TEST_F(OpenAiApiTest, HttpLevelErrors) {
  Start();
  auto res = client_->Get("/v1/completions");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  EXPECT_EQ(res->get_header_value("Allow"), "POST");
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], "method_not_allowed");
  res = client_->Delete("/v1/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 405);
  res = client_->Get("/v1/nothing");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], "not_found");
  res = Post("/v1/completions", std::string(2 << 20, ' '));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_EQ(Json::parse(res->body)["error"]["code"], "request_too_large");
  // /metrics is untouched.
  res = client_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr(R"(pdserve_http_requests_total{code="404",path="other"} 1)"));
}

// A full admission queue answers 429 with Retry-After (the router's hint, in whole seconds).
TEST_F(OpenAiApiTest, OverloadedIs429WithRetryAfter) {
  worker_.hang_after_ = 1;
  RouterOptions options = Options();
  options.max_inflight = 1;
  options.max_queued = 0;
  Start(options);
  std::atomic<bool> hang_up{false};
  std::thread hanging = HangingStream(hang_up);
  Json e = ExpectError("/v1/completions", R"({"prompt": "x"})", 429);
  EXPECT_EQ(e["type"], "rate_limit_error");
  auto res = Post("/v1/completions", R"({"prompt": "x"})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429);
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  // The client hangs up while the router waits for the worker: the call is cancelled anyway.
  hang_up = true;
  hanging.join();
  EXPECT_TRUE(worker_.WaitCancelled());
}

TEST_F(OpenAiApiTest, DeadlineIs504) {
  worker_.hang_after_ = 0;
  RouterOptions options = Options();
  Start(options, absl::Milliseconds(300));
  Json e = ExpectError("/v1/completions", R"({"prompt": "x"})", 504);
  EXPECT_EQ(e["code"], "deadline_exceeded");
  EXPECT_TRUE(worker_.WaitCancelled());
}

TEST_F(OpenAiApiTest, NoWorkerIs503) {
  RouterOptions options = Options();
  Start(options);
  worker_server_->Shutdown(absl::ZeroDuration());
  // The router notices the dead worker (first failed call or poll); every answer is 503.
  for (int i = 0; i < 3; ++i) {
    Json e = ExpectError("/v1/completions", R"({"prompt": "x"})", 503);
    EXPECT_EQ(e["type"], "service_unavailable");
  }
}

TEST_F(OpenAiApiTest, ErrorAfterTheStreamStartedIsAnSseEvent) {
  worker_.fail_after_ = 3;
  RouterOptions options = Options();
  Start(options);
  auto res = Post("/v1/completions", R"({"prompt": "x", "stream": true})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const SseStream stream = ParseSse(res->body);
  EXPECT_FALSE(stream.done);
  ASSERT_FALSE(stream.events.empty());
  const Json& last = stream.events.back();
  ASSERT_TRUE(last.contains("error")) << last.dump();
  // The worker's own error (INTERNAL "worker broke") reaches the client as a server error.
  EXPECT_EQ(last["error"]["type"], "server_error");
  EXPECT_THAT(last["error"]["message"].get<std::string>(), HasSubstr("decode worker"));
  EXPECT_THAT(last["error"]["message"].get<std::string>(), HasSubstr("worker broke"));
  std::string text;
  for (size_t i = 0; i + 1 < stream.events.size(); ++i) {
    text += stream.events[i]["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "Hel");
}

TEST_F(OpenAiApiTest, ClientDisconnectCancelsTheCall) {
  worker_.script_ = ByteTokenizer::Ids(std::string(200, 'z'));
  worker_.delay_ = absl::Milliseconds(20);
  RouterOptions options = Options();
  Start(options);
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/completions";
  request.body = R"({"prompt": "x", "stream": true, "max_tokens": 250, "ignore_eos": true})";
  request.set_header("Content-Type", "application/json");
  int chunks = 0;
  request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    return ++chunks < 2;  // hang up after the second chunk
  };
  httplib::Client client("http://" + http_->address());
  const absl::Time start = absl::Now();
  auto res = client.send(request);
  EXPECT_FALSE(res);  // cancelled by the receiver
  EXPECT_TRUE(worker_.WaitCancelled());
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));  // not the 4 s the whole script takes
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(router_->service().inflight(), 0);
}

constexpr char kKey[] = "sk-test-key-0001";

std::shared_ptr<ApiKeyGate> Keys(ApiKeyLimits limits) {
  return std::make_shared<ApiKeyGate>(*BearerKeys::Create({kKey, "sk-test-key-0002"}), limits);
}

TEST_F(OpenAiApiTest, EveryRouteRefusesACallerWithoutAValidKey) {
  RouterOptions options = Options();
  options.api_keys = Keys({});
  Start(options);
  const std::string body = R"({"prompt": "Once", "max_tokens": 2})";
  for (const std::string& authorization :
       {std::string(), std::string("Bearer sk-test-key-0003"), std::string("sk-test-key-0001"),
        std::string("Basic c2stdGVzdA==")}) {
    httplib::Headers headers;
    if (!authorization.empty()) headers.emplace("Authorization", authorization);
    for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
      auto res = client_->Post(path, headers, body, "application/json");
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 401) << path << " with '" << authorization << "'";
      EXPECT_EQ(res->get_header_value("WWW-Authenticate"), "Bearer");
      const Json error = Json::parse(res->body)["error"];
      EXPECT_EQ(error["code"], "invalid_api_key");
      EXPECT_EQ(error["type"], "invalid_request_error");
      EXPECT_THAT(res->body, ::testing::Not(HasSubstr("sk-test-key-0001")));
    }
    for (const char* path : {"/v1/models", "/v1/models/stories260K"}) {
      auto res = client_->Get(path, headers);
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 401) << path << " with '" << authorization << "'";
    }
  }
  EXPECT_TRUE(worker_.requests().empty());  // no refused call reached a worker

  client_->set_bearer_token_auth(kKey);
  auto res = Post("/v1/completions", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  client_->set_bearer_token_auth("sk-test-key-0002");  // every key is accepted
  res = Post("/v1/chat/completions",
             R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

TEST_F(OpenAiApiTest, GrpcGenerateTakesTheKeyAsMetadata) {
  RouterOptions options = Options();
  options.api_keys = Keys({});
  Start(options);
  const GenerateRequest request = TextRequest("Once", 2);
  absl::StatusOr<std::unique_ptr<Client>> anonymous = Client::Create(router_->address());
  ASSERT_TRUE(anonymous.ok());
  EXPECT_EQ((*anonymous)->Generate(request).status().code(), absl::StatusCode::kUnauthenticated);
  absl::StatusOr<std::unique_ptr<Client>> wrong =
      Client::Create(router_->address(), {.api_key = "sk-test-key-0009", .tls = {}});
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ((*wrong)->Generate(request).status().code(), absl::StatusCode::kUnauthenticated);
  absl::StatusOr<std::unique_ptr<Client>> keyed =
      Client::Create(router_->address(), {.api_key = kKey, .tls = {}});
  ASSERT_TRUE(keyed.ok());
  absl::StatusOr<GenerateResult> result = (*keyed)->Generate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->text, "He");
}

TEST_F(OpenAiApiTest, AKeyOverItsStreamsIs429AndTheStreamReturnsAtTheEnd) {
  worker_.hang_after_ = 1;
  RouterOptions options = Options();
  options.api_keys = Keys({.max_streams = 1});
  Start(options);
  client_->set_bearer_token_auth(kKey);
  std::atomic<bool> hang_up{false};
  std::thread hanging = HangingStream(hang_up, std::string("Bearer ") + kKey);  // the key's stream
  auto res = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429) << res->body;
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_THAT(res->body, HasSubstr("in flight"));
  client_->set_bearer_token_auth("sk-test-key-0002");  // another key has its own streams
  worker_.hang_after_ = -1;
  res = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  hang_up = true;
  hanging.join();
  ASSERT_TRUE(worker_.WaitCancelled());
  // The hung-up stream gave its slot back once the router finished with it.
  client_->set_bearer_token_auth(kKey);
  const absl::Time give_up = absl::Now() + kWait;
  int status = 0;
  while (absl::Now() < give_up) {
    res = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})");
    ASSERT_TRUE(res);
    status = res->status;
    if (status != 429) break;
    absl::SleepFor(absl::Milliseconds(10));  // the router sees the cancellation asynchronously
  }
  EXPECT_EQ(status, 200);
}

TEST_F(OpenAiApiTest, AKeyOverItsTokensPerMinuteIs429UntilRepaid) {
  RouterOptions options = Options();
  options.api_keys = Keys({.tokens_per_minute = 6});
  Start(options);
  client_->set_bearer_token_auth(kKey);
  // 5 prompt tokens (BOS O n c e) + 5 generated = 10: 4 over a minute's 6 tokens.
  auto res = Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 5})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  res = Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 5})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429) << res->body;
  EXPECT_EQ(res->get_header_value("Retry-After"), "40");  // 4 tokens at 6 a minute
  EXPECT_THAT(res->body, HasSubstr("tokens per minute"));
}

}  // namespace
}  // namespace pdserve
