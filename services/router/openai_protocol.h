// The OpenAI-compatible wire format (docs/openai-api.md): request bodies of /v1/completions and
// /v1/chat/completions parsed and checked into a pdserve.v1.GenerateRequest, response objects,
// stream chunks and OpenAI-shaped errors, and the mapping of the router's gRPC status codes to
// HTTP ones. Pure functions on JSON values, no I/O; thread-safe.
#ifndef PDSERVE_SERVICES_ROUTER_OPENAI_PROTOCOL_H_
#define PDSERVE_SERVICES_ROUTER_OPENAI_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "core/chat/chat_template.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/router.pb.h"

namespace pdserve {

using Json = nlohmann::ordered_json;

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

// An error as OpenAI sends it: HTTP status plus {"error": {message, type, param, code}}.
struct OpenAiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending request field; "" = null
  std::string code;   // a machine-readable code; "" = null
};

OpenAiError InvalidRequest(std::string message, std::string param = "");
// {"error": {...}}
Json ErrorBody(const OpenAiError& error);
// The error for an unsuccessful router call (gRPC code as an int, as grpc::StatusCode):
// INVALID_ARGUMENT → 400 (param guessed from the router's message), UNAUTHENTICATED → 401
// (code invalid_api_key), RESOURCE_EXHAUSTED → 429,
// UNAVAILABLE → 503, DEADLINE_EXCEEDED → 504, CANCELLED → 499, anything else → 500.
OpenAiError ErrorFromRouter(int grpc_code, const std::string& message, OpenAiEndpoint endpoint);

// What the protocol layer checks requests against.
struct OpenAiLimits {
  std::string model_id;  // requests must name it or omit "model"
  int max_context = 0;   // 0 = unknown (then max_tokens is only checked by the router)
  // The model's chat template; nullptr: the plain template (plain_chat_template.h), unless
  // chat_template_error says the model's own cannot be used (chat requests then get a 500
  // naming the construct).
  const ChatTemplate* chat_template = nullptr;
  absl::Status chat_template_error;
};

// OpenAI's limits and defaults.
inline constexpr int kDefaultCompletionMaxTokens = 16;
inline constexpr int kMaxOpenAiStopStrings = 4;

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  v1::GenerateRequest generate;  // prompt, sampling, max_tokens, stop
  // Chat requests without max_tokens: generate as many tokens as fit in the context (the API layer
  // learns the room from the router; `generate.max_tokens` then holds max_context − 1).
  bool max_tokens_is_default = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// Parses and checks `body`. Malformed JSON, a wrong type, a bad value or an unsupported parameter
// set to a non-default value → 400 naming the parameter; a model other than limits.model_id →
// 404 model_not_found. Unknown fields are ignored. Text is not tokenized here: the router checks
// the prompt against the context and answers INVALID_ARGUMENT.
std::optional<OpenAiError> ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body,
                                              const OpenAiLimits& limits, OpenAiRequest* out);

// "stop" or "length" (stop tokens, EOS and stop strings are all "stop", as in OpenAI).
const char* FinishReasonName(v1::FinishReason reason);

// The fields every response and chunk of one request shares.
struct ResponseIdentity {
  std::string id;  // "cmpl-…" or "chatcmpl-…"
  int64_t created = 0;
  std::string model;
};

// A fresh identity: random id with the endpoint's prefix, created = now.
ResponseIdentity NewResponseIdentity(OpenAiEndpoint endpoint, const std::string& model);

Json UsageJson(const v1::GenerateResponse::Final& final);
// The whole non-streaming response (text_completion or chat.completion).
Json CompletionResponse(OpenAiEndpoint endpoint, const ResponseIdentity& identity,
                        const std::string& text, const v1::GenerateResponse::Final& final);
// A stream chunk with one choice: text delta `text`, and `finish_reason` when non-null. Chat
// chunks carry `delta` ({"role": "assistant"} with `first`, {"content": text} when non-empty).
Json StreamChunk(OpenAiEndpoint endpoint, const ResponseIdentity& identity, const std::string& text,
                 const char* finish_reason, bool first);
// The last chunk of a stream with include_usage: no choices, usage set.
Json UsageChunk(OpenAiEndpoint endpoint, const ResponseIdentity& identity,
                const v1::GenerateResponse::Final& final);
// "data: <json>\n\n"
std::string SseEvent(const Json& value);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// Serialized without throwing (invalid UTF-8 is replaced by U+FFFD).
std::string DumpJson(const Json& value);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_OPENAI_PROTOCOL_H_
