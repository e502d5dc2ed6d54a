#include "tools/loadgen/http_backend.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "nlohmann/json.hpp"

namespace pdserve::loadgen {
namespace {

// Incremental SSE reader: feeds bytes, hands each event's data payload to the sink.
class SseReader {
 public:
  template <typename Sink>
  void Feed(const char* data, size_t size, Sink&& sink) {
    buffer_.append(data, size);
    for (;;) {
      size_t end = buffer_.find("\n\n");
      size_t skip = 2;
      const size_t crlf = buffer_.find("\r\n\r\n");
      if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) {
        end = crlf;
        skip = 4;
      }
      if (end == std::string::npos) return;
      const std::string event = buffer_.substr(0, end);
      buffer_.erase(0, end + skip);
      std::string payload;
      size_t start = 0;
      while (start <= event.size()) {
        size_t nl = event.find('\n', start);
        if (nl == std::string::npos) nl = event.size();
        std::string line = event.substr(start, nl - start);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (absl::StartsWith(line, "data:")) {
          std::string value = line.substr(5);
          if (!value.empty() && value.front() == ' ') value.erase(0, 1);
          if (!payload.empty()) payload += '\n';
          payload += value;
        }
        start = nl + 1;
      }
      if (!payload.empty()) sink(payload);
    }
  }

 private:
  std::string buffer_;
};

std::string ErrorMessage(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return j["error"]["message"].get<std::string>();
  }
  return body.substr(0, 200);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpBackend>> HttpBackend::Create(const std::string& address,
                                                                 const std::string& model,
                                                                 const std::string& api_key,
                                                                 const std::string& tls_ca) {
  std::string rest = address;
  std::string scheme = "http";
  if (absl::StartsWith(rest, "http://")) rest = rest.substr(7);
  if (absl::StartsWith(rest, "https://")) {
    rest = rest.substr(8);
    scheme = "https";
    if (tls_ca.empty()) {
      return absl::InvalidArgumentError(
          "an https --url needs --tls-ca, the CA the server's certificate verifies under");
    }
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  int port = 0;
  if (rest.find('/') != std::string::npos || colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--url must be HOST:PORT, http://HOST:PORT or https://HOST:PORT, got '", address, "'"));
  }
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::unique_ptr<HttpBackend>(new HttpBackend(scheme, host, port, model, api_key, tls_ca));
}

std::unique_ptr<httplib::Client> HttpBackend::Connect() const {
  const bool ipv6 = host_.find(':') != std::string::npos;
  auto client = std::make_unique<httplib::Client>(
      absl::StrCat(scheme_, "://", ipv6 ? "[" : "", host_, ipv6 ? "]" : "", ":", port_));
  if (scheme_ == "https") {
    client->set_ca_cert_path(tls_ca_.c_str());
    client->enable_server_certificate_verification(true);
  }
  if (!api_key_.empty()) client->set_bearer_token_auth(api_key_.c_str());
  client->set_tcp_nodelay(true);  // the request goes out whole, now
  return client;
}

std::string HttpBackend::Describe() const {
  return absl::StrCat(scheme_, " ", host_, ":", port_, " (model \"", model_, "\")");
}

absl::Status HttpBackend::Probe() {
  const std::unique_ptr<httplib::Client> connection = Connect();
  httplib::Client& client = *connection;
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  httplib::Result result = client.Get("/v1/models");
  if (result) {
    if (!model_.empty()) return absl::OkStatus();
    const nlohmann::json j = nlohmann::json::parse(result->body, nullptr, false);
    if (result->status == 200 && j.is_object() && j.contains("data") && j["data"].is_array() &&
        !j["data"].empty() && j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
      model_ = j["data"][0]["id"].get<std::string>();
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(scheme_, "://", host_, ":", port_,
                                                      "/v1/models lists no model (HTTP ",
                                                      result->status, "); give --api-model"));
  }
  return absl::UnavailableError(absl::StrCat("router unreachable at ", scheme_, "://", host_, ":",
                                             port_, ": ", httplib::to_string(result.error())));
}

BackendResult HttpBackend::Send(const BackendRequest& request, Cancellation& cancellation,
                                const std::function<void()>& on_token) {
  const absl::Time deadline = absl::Now() + absl::Seconds(request.timeout_s);
  for (int retry = 0;; ++retry) {
    BackendRequest attempt = request;
    attempt.timeout_s = std::max(0.001, absl::ToDoubleSeconds(deadline - absl::Now()));
    std::optional<absl::Duration> hint;
    BackendResult result = SendOnce(attempt, cancellation, on_token, &hint);
    result.retries = retry;
    if (result.code != "HTTP 429" || result.cancelled) return result;
    const std::optional<absl::Duration> wait = NextRetryWait(request.retry, retry, hint, deadline);
    if (!wait.has_value()) return result;
    absl::Notification stop;
    cancellation.SetHook([&stop] { stop.Notify(); });
    const bool cancelled = stop.WaitForNotificationWithTimeout(*wait);
    cancellation.ClearHook();
    if (cancelled) {
      result.cancelled = true;
      return result;
    }
  }
}

BackendResult HttpBackend::SendOnce(const BackendRequest& request, Cancellation& cancellation,
                                    const std::function<void()>& on_token,
                                    std::optional<absl::Duration>* retry_after) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::microseconds(static_cast<int64_t>(request.timeout_s * 1e6));
  const nlohmann::json body = {{"model", model_},
                               {"prompt", *request.prompt},
                               {"max_tokens", request.max_tokens},
                               {"stream", true},
                               {"ignore_eos", true},
                               {"temperature", 0},
                               {"stream_options", {{"include_usage", true}}}};
  const std::unique_ptr<httplib::Client> connection = Connect();
  httplib::Client& client = *connection;
  client.set_connection_timeout(10);
  const time_t read_seconds = static_cast<time_t>(request.timeout_s) + 1;
  client.set_read_timeout(read_seconds);
  client.set_write_timeout(read_seconds);

  BackendResult result;
  int status = 0;
  std::string error_body;
  SseReader reader;
  bool done = false, timed_out = false;
  int chunks = 0, usage_tokens = -1, cached_tokens = -1;
  auto on_event = [&](const std::string& payload) {
    if (payload == "[DONE]") {
      done = true;
      return;
    }
    const nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
    if (!j.is_object()) return;
    if (j.contains("error") && result.code == "OK") {
      result.code = "STREAM_ERROR";
      result.message = ErrorMessage(payload);
      return;
    }
    if (auto c = j.find("choices"); c != j.end() && c->is_array() && !c->empty()) {
      ++chunks;
      const nlohmann::json& choice = c->front();
      if (auto t = choice.find("text");
          t != choice.end() && t->is_string() && !t->get_ref<const std::string&>().empty()) {
        on_token();
      }
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      if (auto n = u->find("completion_tokens"); n != u->end() && n->is_number_integer()) {
        usage_tokens = n->get<int>();
      }
      if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object()) {
        if (auto n = d->find("cached_tokens"); n != d->end() && n->is_number_integer()) {
          cached_tokens = n->get<int>();
        }
      }
    }
    // llama-server: "timings": {"cache_n": prompt tokens reused, ...} on the last chunk.
    if (auto t = j.find("timings"); t != j.end() && t->is_object() && cached_tokens < 0) {
      if (auto n = t->find("cache_n"); n != t->end() && n->is_number_integer()) {
        cached_tokens = n->get<int>();
      }
    }
  };

  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    int64_t seconds = 0;  // Retry-After as delta-seconds (an HTTP-date is not honoured)
    if (absl::SimpleAtoi(response.get_header_value("Retry-After"), &seconds) && seconds >= 0) {
      *retry_after = absl::Seconds(seconds);
    }
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (Clock::now() > deadline) {
      timed_out = true;
      return false;
    }
    if (status != 200) {
      error_body.append(data, size);
      return error_body.size() < (1 << 20);
    }
    reader.Feed(data, size, on_event);
    return !cancellation.cancelled();
  };
  cancellation.SetHook([&client] { client.stop(); });
  httplib::Result response = client.send(req);
  cancellation.ClearHook();
  result.cancelled = cancellation.cancelled();
  result.output_tokens = usage_tokens >= 0 ? usage_tokens : chunks;
  result.cached_tokens = cached_tokens;
  if (timed_out) {
    result.code = "DEADLINE_EXCEEDED";
    result.message = absl::StrCat("no end of stream within ", request.timeout_s, " s");
  } else if (status != 0 && status != 200) {
    result.code = absl::StrCat("HTTP ", status);
    result.message = ErrorMessage(error_body);
  } else if (!response && !done) {
    result.code = status == 0 ? "CONNECTION" : "INCOMPLETE_STREAM";
    result.message = absl::StrCat(scheme_, "://", host_, ":", port_,
                                  "/v1/completions: ", httplib::to_string(response.error()));
  } else if (result.code == "OK" && !done) {
    result.code = "INCOMPLETE_STREAM";
    result.message = "the stream ended without data: [DONE]";
  }
  return result;
}

}  // namespace pdserve::loadgen
