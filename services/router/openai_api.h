// The router's OpenAI-compatible HTTP API (docs/openai-api.md): POST /v1/completions,
// POST /v1/chat/completions and GET /v1/models[/{id}], installed on the router's HttpServer. Each
// request becomes one pdserve.v1.Router/Generate call on `router` (the router's own service,
// reached in-process); streaming responses are server-sent events fed from the gRPC stream as it
// arrives, and a client that goes away cancels the call.
//
// The routes also answer 405 for other methods on these paths, and the server's error handler
// (which InstallOpenAiRoutes sets) gives every empty error response, such as 404 for an unknown
// path or 413 for an oversized body, an OpenAI-shaped JSON body.
//
// Ownership: the installed handlers share the options (channel and stub) among themselves; the
// metrics registry, when set, must outlive the server. Thread-safe: httplib runs each request on
// one of its threads.
#ifndef PDSERVE_SERVICES_ROUTER_OPENAI_API_H_
#define PDSERVE_SERVICES_ROUTER_OPENAI_API_H_

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "core/chat/chat_template.h"
#include "core/metrics/metrics_registry.h"
#include "services/router/api_key_gate.h"

namespace pdserve {

struct OpenAiApiOptions {
  std::shared_ptr<grpc::Channel> router;  // the router's own gRPC service (in-process channel)
  std::string model_id;                   // what /v1/models lists and requests must name (or omit)
  int max_context = 0;                    // for /v1/models and validation messages
  // Registers pdserve_http_requests_total{path,code} and
  // pdserve_http_request_duration_seconds{path} (histogram) when set.
  MetricsRegistry* metrics = nullptr;
  absl::Duration default_timeout = absl::Seconds(600);  // each request's deadline
  // The model's chat template for /v1/chat/completions (see OpenAiLimits): nullptr for the plain
  // one, or the reason the model's own cannot be used.
  std::shared_ptr<const ChatTemplate> chat_template;
  absl::Status chat_template_error;
  // Who may call: every /v1 route answers 401 to a request whose Authorization header bears no
  // key; the generation routes forward the header to Router/Generate, which applies the key's
  // limits. Null = anyone.
  std::shared_ptr<const ApiKeyGate> api_keys;
};

// Adds POST /v1/completions, POST /v1/chat/completions, GET /v1/models (+ /v1/models/{id}) to
// `server`. Call once per server, before it listens.
void InstallOpenAiRoutes(httplib::Server& server, const OpenAiApiOptions& options);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_OPENAI_API_H_
