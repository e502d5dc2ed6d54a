// loadgen HTTP backend: the router's OpenAI-compatible endpoint, POST /v1/completions with
//   {"model": M, "prompt": [token ids], "max_tokens": n, "stream": true, "ignore_eos": true,
//    "temperature": 0, "stream_options": {"include_usage": true}}
// read as Server-Sent Events ("data: {json}\n\n" … "data: [DONE]"). A token is a chunk whose
// choices[0].text is non-empty; the output length is usage.completion_tokens (else the number of
// chunks with choices). Errors: HTTP status + {"error": {"message", "type", "code"}} → code
// "HTTP <status>"; no connection → "CONNECTION"; an error event inside the stream →
// "STREAM_ERROR"; a stream that ends without [DONE] → "INCOMPLETE_STREAM". A 429 is retried as
// BackendRequest::retry says, honouring Retry-After (delta-seconds).
//
// Uses cpp-httplib, one client (one connection) per request. Thread-safe.
#ifndef PDSERVE_TOOLS_LOADGEN_HTTP_BACKEND_H_
#define PDSERVE_TOOLS_LOADGEN_HTTP_BACKEND_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "tools/loadgen/backend.h"

namespace httplib {
class Client;
}  // namespace httplib

namespace pdserve::loadgen {

class HttpBackend : public Backend {
 public:
  // `address` is "host:port" or "http://host:port[/]"; InvalidArgument naming --url otherwise.
  // `model` is the requests' "model" field; empty = the first one /v1/models lists (Probe).
  // "https://host:port" speaks HTTPS, verifying the server under `tls_ca` (a PEM file; required
  // for https). `api_key`, when not empty, is sent as "Authorization: Bearer <api_key>".
  static absl::StatusOr<std::unique_ptr<HttpBackend>> Create(const std::string& address,
                                                             const std::string& model,
                                                             const std::string& api_key = "",
                                                             const std::string& tls_ca = "");

  std::string Describe() const override;
  // GET /v1/models; any HTTP answer counts as reachable. With an empty `model`, takes the first
  // model listed (FailedPrecondition when none is). Call before Send.
  absl::Status Probe() override;
  BackendResult Send(const BackendRequest& request, Cancellation& cancellation,
                     const std::function<void()>& on_token) override;

 private:
  HttpBackend(std::string scheme, std::string host, int port, std::string model,
              std::string api_key, std::string tls_ca)
      : scheme_(std::move(scheme)),
        host_(std::move(host)),
        port_(port),
        model_(std::move(model)),
        api_key_(std::move(api_key)),
        tls_ca_(std::move(tls_ca)) {}
  // A client of the server, with the API key.
  std::unique_ptr<httplib::Client> Connect() const;
  // One request, no retry; `*retry_after` receives a Retry-After header's wait.
  BackendResult SendOnce(const BackendRequest& request, Cancellation& cancellation,
                         const std::function<void()>& on_token,
                         std::optional<absl::Duration>* retry_after);
  std::string scheme_;  // "http" or "https"
  std::string host_;
  int port_;
  std::string model_;
  std::string api_key_;
  std::string tls_ca_;
};

}  // namespace pdserve::loadgen

#endif  // PDSERVE_TOOLS_LOADGEN_HTTP_BACKEND_H_
