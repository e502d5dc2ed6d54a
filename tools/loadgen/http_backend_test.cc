// The HTTP backend against an in-test cpp-httplib server that speaks OpenAI-shaped SSE.
#include "tools/loadgen/http_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pdserve::loadgen {
namespace {

using ::testing::HasSubstr;

BackendRequest Req(const std::vector<int>* prompt, int max_tokens, double timeout_s) {
  BackendRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.timeout_s = timeout_s;
  return r;
}

class FakeOpenAiServer {
 public:
  FakeOpenAiServer() {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object": "list", "data": [{"id": "tiny", "object": "model"}]})",
                      "application/json");
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const nlohmann::json body = nlohmann::json::parse(req.body);
      last_body_ = body;
      ++posts_;
      if (refusals_ > 0) {
        --refusals_;
        res.status = 429;
        res.set_header("Retry-After", "0");
        res.set_content(R"({"error": {"message": "overloaded", "type": "rate_limit_error"}})",
                        "application/json");
        return;
      }
      const int n = body.at("max_tokens").get<int>();
      if (n > 50) {
        res.status = 400;
        res.set_content(
            R"({"error": {"message": "max_tokens too large", "type": "invalid_request_error", "code": 400}})",
            "application/json");
        return;
      }
      const int prompt = static_cast<int>(body.at("prompt").size());
      const CacheReport cache = cache_report_;
      res.set_chunked_content_provider("text/event-stream", [n, prompt, cache](
                                                                size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& data) {
          const std::string event = absl::StrCat("data: ", data, "\n\n");
          sink.write(event.data(), event.size());
        };
        for (int i = 0; i < n; ++i) {
          // The second chunk carries no text (held back), as a detokenizer may do.
          const std::string text = i == 1 ? "" : absl::StrCat(" t", i);
          send(nlohmann::json{{"id", "cmpl-1"},
                              {"object", "text_completion"},
                              {"choices", {{{"index", 0}, {"text", text}}}}}
                   .dump());
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        nlohmann::json last{
            {"id", "cmpl-1"},
            {"choices", nlohmann::json::array()},
            {"usage",
             {{"prompt_tokens", prompt}, {"completion_tokens", n}, {"total_tokens", prompt + n}}}};
        if (cache == CacheReport::kUsage) {
          last["usage"]["prompt_tokens_details"] = {{"cached_tokens", prompt / 2}};
        } else if (cache == CacheReport::kLlamaServerTimings) {
          last["timings"] = {{"cache_n", prompt - 1}, {"prompt_n", 1}};
        }
        send(last.dump());
        send("[DONE]");
        sink.done();
        return true;
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeOpenAiServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  // The next `n` completions are refused with 429 and Retry-After: 0.
  void Refuse(int n) { refusals_ = n; }
  // How the final chunk reports prompt tokens reused from a prefix cache.
  enum class CacheReport { kNone, kUsage, kLlamaServerTimings };
  void ReportCache(CacheReport how) { cache_report_ = how; }
  int posts() const { return posts_; }
  const nlohmann::json& last_body() const { return last_body_; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  nlohmann::json last_body_;
  std::atomic<int> refusals_{0};
  std::atomic<int> posts_{0};
  std::atomic<CacheReport> cache_report_{CacheReport::kNone};
};

TEST(HttpBackend, StreamsTokensFromSse) {
  FakeOpenAiServer server;
  absl::StatusOr<std::unique_ptr<HttpBackend>> backend =
      HttpBackend::Create(absl::StrCat("http://127.0.0.1:", server.port(), "/"), "m1");
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_TRUE((*backend)->Probe().ok());
  const std::vector<int> prompt = {5, 6, 7, 8};
  Cancellation cancellation;
  int tokens = 0;
  const BackendResult result =
      (*backend)->Send(Req(&prompt, 6, 10), cancellation, [&] { ++tokens; });
  EXPECT_EQ(result.code, "OK") << result.message;
  EXPECT_EQ(result.output_tokens, 6);   // from usage
  EXPECT_EQ(tokens, 5);                 // the empty-text chunk is not a token
  EXPECT_EQ(result.cached_tokens, -1);  // not reported
  const nlohmann::json& body = server.last_body();
  EXPECT_EQ(body["model"], "m1");
  EXPECT_EQ(body["prompt"], nlohmann::json(prompt));
  EXPECT_EQ(body["max_tokens"], 6);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
}

// Prompt tokens from the server's prefix cache: OpenAI's usage.prompt_tokens_details.cached_tokens
// (pdserve), or llama-server's timings.cache_n.
TEST(HttpBackend, CachedPromptTokensFromUsageOrLlamaServerTimings) {
  FakeOpenAiServer server;
  absl::StatusOr<std::unique_ptr<HttpBackend>> backend =
      HttpBackend::Create(absl::StrCat("127.0.0.1:", server.port()), "m1");
  ASSERT_TRUE(backend.ok()) << backend.status();
  const std::vector<int> prompt = {5, 6, 7, 8, 9, 10};
  Cancellation cancellation;
  server.ReportCache(FakeOpenAiServer::CacheReport::kUsage);
  EXPECT_EQ((*backend)->Send(Req(&prompt, 3, 10), cancellation, [] {}).cached_tokens, 3);
  server.ReportCache(FakeOpenAiServer::CacheReport::kLlamaServerTimings);
  EXPECT_EQ((*backend)->Send(Req(&prompt, 3, 10), cancellation, [] {}).cached_tokens, 5);
}

TEST(HttpBackend, ProbeTakesTheServedModelWhenNoneIsGiven) {
  FakeOpenAiServer server;
  auto backend = HttpBackend::Create(absl::StrCat("127.0.0.1:", server.port()), "");
  ASSERT_TRUE(backend.ok());
  ASSERT_TRUE((*backend)->Probe().ok());
  const std::vector<int> prompt = {5};
  Cancellation cancellation;
  EXPECT_EQ((*backend)->Send(Req(&prompt, 2, 10), cancellation, [] {}).code, "OK");
  EXPECT_EQ(server.last_body()["model"], "tiny");
}

TEST(HttpBackend, HttpErrorsCarryStatusAndMessage) {
  FakeOpenAiServer server;
  auto backend = HttpBackend::Create(absl::StrCat("127.0.0.1:", server.port()), "m");
  ASSERT_TRUE(backend.ok());
  const std::vector<int> prompt = {5};
  Cancellation cancellation;
  const BackendResult result = (*backend)->Send(Req(&prompt, 99, 10), cancellation, [] {});
  EXPECT_EQ(result.code, "HTTP 400");
  EXPECT_EQ(result.message, "max_tokens too large");
}

TEST(HttpBackend, A429IsRetriedHonouringRetryAfter) {
  FakeOpenAiServer server;
  auto backend = HttpBackend::Create(absl::StrCat("127.0.0.1:", server.port()), "m");
  ASSERT_TRUE(backend.ok());
  const std::vector<int> prompt = {5};
  Cancellation cancellation;
  server.Refuse(2);
  BackendResult result = (*backend)->Send(Req(&prompt, 3, 10), cancellation, [] {});
  EXPECT_EQ(result.code, "OK") << result.message;
  EXPECT_EQ(result.retries, 2);
  EXPECT_EQ(server.posts(), 3);

  server.Refuse(5);
  BackendRequest few = Req(&prompt, 3, 10);
  few.retry.max_retries = 1;
  result = (*backend)->Send(few, cancellation, [] {});
  EXPECT_EQ(result.code, "HTTP 429");
  EXPECT_EQ(result.message, "overloaded");
  EXPECT_EQ(result.retries, 1);
}

TEST(HttpBackend, UnreachableServer) {
  int port = 0;
  {
    FakeOpenAiServer server;  // a port that was just free, now closed
    port = server.port();
  }
  auto backend = HttpBackend::Create(absl::StrCat("127.0.0.1:", port), "m");
  ASSERT_TRUE(backend.ok());
  const absl::Status probe = (*backend)->Probe();
  EXPECT_EQ(probe.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(probe.message()), HasSubstr("router unreachable at http://127.0.0.1:"));
  const std::vector<int> prompt = {5};
  Cancellation cancellation;
  EXPECT_EQ((*backend)->Send(Req(&prompt, 2, 5), cancellation, [] {}).code, "CONNECTION");
}

TEST(HttpBackend, RejectsBadAddresses) {
  for (const char* bad : {"", "localhost", "https://h:1", "h:0", "h:99999", "h:1/v1"}) {
    absl::StatusOr<std::unique_ptr<HttpBackend>> backend = HttpBackend::Create(bad, "m");
    ASSERT_FALSE(backend.ok()) << bad;
    EXPECT_THAT(std::string(backend.status().message()), HasSubstr("--url")) << bad;
  }
}

}  // namespace
}  // namespace pdserve::loadgen
