#include "services/router/openai_protocol.h"

#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "services/router/plain_chat_template.h"

namespace pdserve {
namespace {

using MaybeError = std::optional<OpenAiError>;

#define PDSERVE_OPENAI_RETURN_IF_ERROR(expr) \
  do {                                       \
    MaybeError _error = (expr);              \
    if (_error.has_value()) return _error;   \
  } while (false)

const char* TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

OpenAiError WrongType(const std::string& param, const char* expected, const Json& value) {
  return InvalidRequest(absl::StrCat(param, " must be ", expected, ", not ", TypeName(value)),
                        param);
}

// The field `key` of `body` unless absent or null.
const Json* Field(const Json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// An integer (an integral float such as 16.0 is accepted) in [min, max].
MaybeError IntValue(const Json& value, const std::string& param, int64_t min, int64_t max,
                    int64_t* out) {
  int64_t v = 0;
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    v = value.get<int64_t>();
  } else if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    v = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
            ? std::numeric_limits<int64_t>::max()
            : static_cast<int64_t>(u);
  } else if (value.is_number_float()) {
    const double d = value.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) return WrongType(param, "an integer", value);
    v = d >= 9.2e18
            ? std::numeric_limits<int64_t>::max()
            : (d <= -9.2e18 ? std::numeric_limits<int64_t>::min() : static_cast<int64_t>(d));
  } else {
    return WrongType(param, "an integer", value);
  }
  if (v < min || v > max) {
    return InvalidRequest(
        absl::StrCat(param, " = ", value.dump(), " must be in [", min, ", ", max, "]"), param);
  }
  *out = v;
  return std::nullopt;
}

MaybeError NumberValue(const Json& value, const std::string& param, double min, double max,
                       double* out) {
  if (!value.is_number()) return WrongType(param, "a number", value);
  const double v = value.get<double>();
  if (!std::isfinite(v) || v < min || v > max) {
    return InvalidRequest(
        absl::StrCat(param, " = ", value.dump(), " must be in [", min, ", ", max, "]"), param);
  }
  *out = v;
  return std::nullopt;
}

MaybeError BoolField(const Json& body, const char* key, bool* out) {
  const Json* value = Field(body, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) return WrongType(key, "a boolean", *value);
  *out = value->get<bool>();
  return std::nullopt;
}

// A parameter pdserve does not implement: accepted only at its default (absent, null, or one of
// the values `is_default` accepts).
MaybeError Unsupported(const Json& body, const char* key, bool (*is_default)(const Json&)) {
  const Json* value = Field(body, key);
  if (value == nullptr || is_default(*value)) return std::nullopt;
  return InvalidRequest(absl::StrCat(key, " is not supported by pdserve (only its default)"), key);
}

bool IsFalse(const Json& v) { return v.is_boolean() && !v.get<bool>(); }
bool IsZero(const Json& v) { return v.is_number() && v.get<double>() == 0.0; }
bool IsOne(const Json& v) { return v.is_number() && v.get<double>() == 1.0; }
bool IsEmpty(const Json& v) {
  return (v.is_string() || v.is_array() || v.is_object()) && v.empty();
}
bool IsFalseOrZero(const Json& v) { return IsFalse(v) || IsZero(v); }
bool IsTextFormat(const Json& v) {
  return v.is_object() && v.contains("type") && v["type"] == "text";
}

MaybeError ParseModel(const Json& body, const OpenAiLimits& limits) {
  const Json* model = Field(body, "model");
  if (model == nullptr) return std::nullopt;
  if (!model->is_string()) return WrongType("model", "a string", *model);
  const std::string& name = model->get_ref<const std::string&>();
  if (name == limits.model_id) return std::nullopt;
  OpenAiError error =
      InvalidRequest(absl::StrCat("The model '", name, "' does not exist; this server serves '",
                                  limits.model_id, "'"),
                     "model");
  error.http_status = 404;
  error.code = "model_not_found";
  return error;
}

// Token ids of a prompt array, each in int32 range (the router checks the vocabulary).
MaybeError TokenIds(const Json& array, const std::string& param, v1::GenerateRequest* out) {
  v1::TokenIds* ids = out->mutable_token_ids();
  for (size_t i = 0; i < array.size(); ++i) {
    int64_t id = 0;
    PDSERVE_OPENAI_RETURN_IF_ERROR(IntValue(array[i], absl::StrCat(param, "[", i, "]"), 0,
                                            std::numeric_limits<int32_t>::max(), &id));
    ids->add_ids(static_cast<int32_t>(id));
  }
  if (ids->ids().empty()) return InvalidRequest("prompt is empty", "prompt");
  return std::nullopt;
}

MaybeError ParsePrompt(const Json& body, v1::GenerateRequest* out) {
  const Json* prompt = Field(body, "prompt");
  if (prompt == nullptr) return InvalidRequest("prompt is required", "prompt");
  if (prompt->is_string()) {
    if (prompt->get_ref<const std::string&>().empty()) {
      return InvalidRequest("prompt is empty", "prompt");
    }
    out->set_text(prompt->get<std::string>());
    return std::nullopt;
  }
  if (!prompt->is_array()) {
    return WrongType("prompt", "a string or an array of token ids", *prompt);
  }
  if (prompt->empty()) return InvalidRequest("prompt is empty", "prompt");
  const Json& first = (*prompt)[0];
  if (first.is_number()) return TokenIds(*prompt, "prompt", out);
  if (prompt->size() > 1) {
    return InvalidRequest("batched prompts are not supported: send one prompt per request",
                          "prompt");
  }
  if (first.is_string()) {
    if (first.get_ref<const std::string&>().empty()) {
      return InvalidRequest("prompt is empty", "prompt");
    }
    out->set_text(first.get<std::string>());
    return std::nullopt;
  }
  if (first.is_array()) return TokenIds(first, "prompt[0]", out);
  return WrongType("prompt[0]", "a string or an array of token ids", first);
}

MaybeError ParseContent(const Json& message, const std::string& param, bool allow_null,
                        std::string* out) {
  auto it = message.find("content");
  if (it == message.end() || it->is_null()) {
    if (allow_null) return std::nullopt;
    return InvalidRequest(absl::StrCat(param, " is required"), param);
  }
  if (it->is_string()) {
    *out = it->get<std::string>();
    return std::nullopt;
  }
  if (!it->is_array()) return WrongType(param, "a string or an array of content parts", *it);
  for (size_t j = 0; j < it->size(); ++j) {
    const Json& part = (*it)[j];
    const std::string part_param = absl::StrCat(param, "[", j, "]");
    if (!part.is_object()) return WrongType(part_param, "an object", part);
    const Json* type = Field(part, "type");
    if (type == nullptr || !type->is_string()) {
      return InvalidRequest(absl::StrCat(part_param, ".type must be a string"),
                            part_param + ".type");
    }
    if (*type != "text") {
      return InvalidRequest(absl::StrCat(part_param, ".type '", type->get<std::string>(),
                                         "' is not supported (only text)"),
                            part_param + ".type");
    }
    const Json* text = Field(part, "text");
    if (text == nullptr || !text->is_string()) {
      return InvalidRequest(absl::StrCat(part_param, ".text must be a string"),
                            part_param + ".text");
    }
    *out += text->get_ref<const std::string&>();
  }
  return std::nullopt;
}

MaybeError ParseMessages(const Json& body, const OpenAiLimits& limits, v1::GenerateRequest* out) {
  const Json* messages = Field(body, "messages");
  if (messages == nullptr) return InvalidRequest("messages is required", "messages");
  if (!messages->is_array()) return WrongType("messages", "an array", *messages);
  if (messages->empty()) return InvalidRequest("messages must not be empty", "messages");
  std::vector<ChatMessage> chat;
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    const std::string param = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return WrongType(param, "an object", m);
    const Json* role = Field(m, "role");
    if (role == nullptr || !role->is_string()) {
      return InvalidRequest(absl::StrCat(param, ".role must be a string"), param + ".role");
    }
    ChatMessage message;
    if (*role == "system" || *role == "developer") {
      message.role = "system";
    } else if (*role == "user" || *role == "assistant") {
      message.role = role->get<std::string>();
    } else {
      return InvalidRequest(absl::StrCat(param, ".role '", role->get<std::string>(),
                                         "' is not supported (system, user or assistant)"),
                            param + ".role");
    }
    PDSERVE_OPENAI_RETURN_IF_ERROR(
        ParseContent(m, param + ".content", message.role == "assistant", &message.content));
    chat.push_back(std::move(message));
  }
  if (!limits.chat_template_error.ok()) {
    OpenAiError error;
    error.http_status = 500;
    error.type = "server_error";
    error.message = std::string(limits.chat_template_error.message());
    return error;
  }
  if (limits.chat_template == nullptr) {
    out->set_text(RenderPlainChatPrompt(chat));
    out->mutable_stop()->add_stop_strings(kPlainChatStopString);
    return std::nullopt;
  }
  absl::StatusOr<std::string> prompt =
      limits.chat_template->Render(chat, /*add_generation_prompt=*/true);
  if (!prompt.ok()) return InvalidRequest(std::string(prompt.status().message()), "messages");
  out->set_text(*std::move(prompt));
  out->set_text_has_special_tokens(true);
  return std::nullopt;
}

MaybeError ParseStop(const Json& body, v1::StopConditions* stop) {
  const Json* value = Field(body, "stop");
  if (value == nullptr) return std::nullopt;
  std::vector<const Json*> strings;
  if (value->is_string()) {
    strings.push_back(value);
  } else if (value->is_array()) {
    if (value->size() > kMaxOpenAiStopStrings) {
      return InvalidRequest(absl::StrCat("stop has ", value->size(), " sequences; at most ",
                                         kMaxOpenAiStopStrings, " are allowed"),
                            "stop");
    }
    for (const Json& s : *value) strings.push_back(&s);
  } else {
    return WrongType("stop", "a string or an array of strings", *value);
  }
  for (size_t i = 0; i < strings.size(); ++i) {
    const Json& s = *strings[i];
    const std::string param = value->is_array() ? absl::StrCat("stop[", i, "]") : "stop";
    if (!s.is_string()) return WrongType(param, "a string", s);
    if (s.get_ref<const std::string&>().empty()) {
      return InvalidRequest(absl::StrCat(param, " is empty"), "stop");
    }
    stop->add_stop_strings(s.get<std::string>());
  }
  return std::nullopt;
}

MaybeError ParseMaxTokens(const Json& body, const OpenAiLimits& limits, OpenAiRequest* out) {
  const int64_t max = limits.max_context > 0 ? limits.max_context : 1 << 30;
  const char* key = "max_tokens";
  const Json* value = Field(body, key);
  if (out->endpoint == OpenAiEndpoint::kChatCompletions && value == nullptr) {
    key = "max_completion_tokens";
    value = Field(body, key);
  }
  if (value == nullptr) {
    if (out->endpoint == OpenAiEndpoint::kCompletions) {
      out->generate.set_max_tokens(kDefaultCompletionMaxTokens);
    } else {
      out->max_tokens_is_default = true;
      out->generate.set_max_tokens(static_cast<int32_t>(std::max<int64_t>(max - 1, 1)));
    }
    return std::nullopt;
  }
  int64_t max_tokens = 0;
  PDSERVE_OPENAI_RETURN_IF_ERROR(IntValue(*value, key, 1, max, &max_tokens));
  out->generate.set_max_tokens(static_cast<int32_t>(max_tokens));
  return std::nullopt;
}

MaybeError ParseSampling(const Json& body, v1::GenerateRequest* out) {
  v1::SamplingParams* sampling = out->mutable_sampling();
  double temperature = 1.0;  // OpenAI's default
  if (const Json* v = Field(body, "temperature")) {
    PDSERVE_OPENAI_RETURN_IF_ERROR(NumberValue(*v, "temperature", 0.0, 2.0, &temperature));
  }
  sampling->set_temperature(static_cast<float>(temperature));
  if (const Json* v = Field(body, "top_p")) {
    double top_p = 1.0;
    PDSERVE_OPENAI_RETURN_IF_ERROR(NumberValue(*v, "top_p", 0.0, 1.0, &top_p));
    if (top_p <= 0.0) return InvalidRequest("top_p = 0 must be in (0, 1]", "top_p");
    sampling->set_top_p(static_cast<float>(top_p));
  }
  if (const Json* v = Field(body, "top_k")) {  // vLLM's extension; -1 and 0 mean off
    int64_t top_k = 0;
    PDSERVE_OPENAI_RETURN_IF_ERROR(
        IntValue(*v, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k));
    sampling->set_top_k(static_cast<int32_t>(std::max<int64_t>(top_k, 0)));
  }
  if (const Json* v = Field(body, "seed")) {
    int64_t seed = 0;
    PDSERVE_OPENAI_RETURN_IF_ERROR(IntValue(*v, "seed", std::numeric_limits<int64_t>::min(),
                                            std::numeric_limits<int64_t>::max(), &seed));
    sampling->set_seed(static_cast<uint64_t>(seed));
  } else {
    // No seed: a different random stream per request, as OpenAI samples.
    thread_local std::mt19937_64 random(std::random_device{}());
    sampling->set_seed(random());
  }
  return std::nullopt;
}

// Parameters pdserve accepts only at their defaults.
MaybeError CheckUnsupported(const Json& body, OpenAiEndpoint endpoint) {
  PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "n", IsOne));
  PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "frequency_penalty", IsZero));
  PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "presence_penalty", IsZero));
  PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "logit_bias", IsEmpty));
  PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "logprobs", IsFalseOrZero));
  if (endpoint == OpenAiEndpoint::kCompletions) {
    PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "echo", IsFalse));
    PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "best_of", IsOne));
    PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "suffix", IsEmpty));
  } else {
    PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "top_logprobs", IsZero));
    PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "tools", IsEmpty));
    PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "functions", IsEmpty));
    PDSERVE_OPENAI_RETURN_IF_ERROR(Unsupported(body, "response_format", IsTextFormat));
  }
  return std::nullopt;
}

MaybeError ParseStreaming(const Json& body, OpenAiRequest* out) {
  PDSERVE_OPENAI_RETURN_IF_ERROR(BoolField(body, "stream", &out->stream));
  const Json* options = Field(body, "stream_options");
  if (options == nullptr) return std::nullopt;
  if (!out->stream) {
    return InvalidRequest("stream_options is only allowed when stream is true", "stream_options");
  }
  if (!options->is_object()) return WrongType("stream_options", "an object", *options);
  if (const Json* v = Field(*options, "include_usage")) {
    if (!v->is_boolean()) return WrongType("stream_options.include_usage", "a boolean", *v);
    out->include_usage = v->get<bool>();
  }
  return std::nullopt;
}

}  // namespace

OpenAiError InvalidRequest(std::string message, std::string param) {
  OpenAiError error;
  error.message = std::move(message);
  error.param = std::move(param);
  return error;
}

Json ErrorBody(const OpenAiError& error) {
  Json inner = Json::object();
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param.empty() ? Json(nullptr) : Json(error.param);
  inner["code"] = error.code.empty() ? Json(nullptr) : Json(error.code);
  Json body = Json::object();
  body["error"] = std::move(inner);
  return body;
}

OpenAiError ErrorFromRouter(int grpc_code, const std::string& message, OpenAiEndpoint endpoint) {
  OpenAiError error;
  error.message = message;
  switch (grpc_code) {
    case 3: {  // INVALID_ARGUMENT: the router's validation names the field first.
      error.http_status = 400;
      if (absl::StartsWith(message, "max_tokens")) {
        error.param = "max_tokens";
      } else if (absl::StrContains(message, "prompt")) {
        error.param = endpoint == OpenAiEndpoint::kCompletions ? "prompt" : "messages";
      } else if (absl::StrContains(message, "temperature")) {
        error.param = "temperature";
      } else if (absl::StrContains(message, "top_p")) {
        error.param = "top_p";
      } else if (absl::StrContains(message, "top_k")) {
        error.param = "top_k";
      } else if (absl::StrContains(message, "stop")) {
        error.param = "stop";
      }
      break;
    }
    case 16:  // UNAUTHENTICATED
      error.http_status = 401;
      error.code = "invalid_api_key";
      break;
    case 8:  // RESOURCE_EXHAUSTED
      error.http_status = 429;
      error.type = "rate_limit_error";
      error.code = "overloaded";
      break;
    case 14:  // UNAVAILABLE
      error.http_status = 503;
      error.type = "service_unavailable";
      error.code = "unavailable";
      break;
    case 4:  // DEADLINE_EXCEEDED
      error.http_status = 504;
      error.type = "timeout";
      error.code = "deadline_exceeded";
      break;
    case 1:  // CANCELLED
      error.http_status = 499;
      error.type = "cancelled";
      error.code = "cancelled";
      break;
    default:
      error.http_status = 500;
      error.type = "server_error";
      error.code = "internal_error";
      break;
  }
  return error;
}

std::optional<OpenAiError> ParseOpenAiRequest(OpenAiEndpoint endpoint, std::string_view body,
                                              const OpenAiLimits& limits, OpenAiRequest* out) {
  *out = OpenAiRequest{};
  out->endpoint = endpoint;
  Json json = Json::parse(body, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return InvalidRequest(
        "the request body is not valid JSON (or not UTF-8); expected a JSON object");
  }
  if (!json.is_object()) {
    return InvalidRequest(
        absl::StrCat("the request body must be a JSON object, not ", TypeName(json)));
  }
  PDSERVE_OPENAI_RETURN_IF_ERROR(ParseModel(json, limits));
  if (endpoint == OpenAiEndpoint::kCompletions) {
    PDSERVE_OPENAI_RETURN_IF_ERROR(ParsePrompt(json, &out->generate));
  } else {
    PDSERVE_OPENAI_RETURN_IF_ERROR(ParseMessages(json, limits, &out->generate));
  }
  PDSERVE_OPENAI_RETURN_IF_ERROR(CheckUnsupported(json, endpoint));
  PDSERVE_OPENAI_RETURN_IF_ERROR(ParseMaxTokens(json, limits, out));
  PDSERVE_OPENAI_RETURN_IF_ERROR(ParseSampling(json, &out->generate));
  PDSERVE_OPENAI_RETURN_IF_ERROR(ParseStop(json, out->generate.mutable_stop()));
  bool ignore_eos = false;  // vLLM's extension
  PDSERVE_OPENAI_RETURN_IF_ERROR(BoolField(json, "ignore_eos", &ignore_eos));
  out->generate.mutable_stop()->set_ignore_eos(ignore_eos);
  PDSERVE_OPENAI_RETURN_IF_ERROR(ParseStreaming(json, out));
  return std::nullopt;
}

const char* FinishReasonName(v1::FinishReason reason) {
  return reason == v1::FINISH_REASON_LENGTH ? "length" : "stop";
}

ResponseIdentity NewResponseIdentity(OpenAiEndpoint endpoint, const std::string& model) {
  thread_local std::mt19937_64 random(std::random_device{}());
  ResponseIdentity identity;
  identity.id = absl::StrFormat("%s-%016x%08x",
                                endpoint == OpenAiEndpoint::kCompletions ? "cmpl" : "chatcmpl",
                                random(), static_cast<uint32_t>(random()));
  identity.created = absl::ToUnixSeconds(absl::Now());
  identity.model = model;
  return identity;
}

namespace {

Json Envelope(OpenAiEndpoint endpoint, const ResponseIdentity& identity, bool chunk) {
  Json out = Json::object();
  out["id"] = identity.id;
  if (endpoint == OpenAiEndpoint::kCompletions) {
    out["object"] = "text_completion";
  } else {
    out["object"] = chunk ? "chat.completion.chunk" : "chat.completion";
  }
  out["created"] = identity.created;
  out["model"] = identity.model;
  return out;
}

}  // namespace

Json UsageJson(const v1::GenerateResponse::Final& final) {
  Json usage = Json::object();
  usage["prompt_tokens"] = final.prompt_tokens();
  usage["completion_tokens"] = final.completion_tokens();
  usage["total_tokens"] = final.prompt_tokens() + final.completion_tokens();
  // OpenAI's field for prompt tokens served from a cache.
  usage["prompt_tokens_details"] = {{"cached_tokens", final.timings().cached_prompt_tokens()}};
  return usage;
}

Json CompletionResponse(OpenAiEndpoint endpoint, const ResponseIdentity& identity,
                        const std::string& text, const v1::GenerateResponse::Final& final) {
  Json out = Envelope(endpoint, identity, /*chunk=*/false);
  Json choice = Json::object();
  choice["index"] = 0;
  if (endpoint == OpenAiEndpoint::kCompletions) {
    choice["text"] = text;
  } else {
    choice["message"] = Json{{"role", "assistant"}, {"content", text}};
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = FinishReasonName(final.finish_reason());
  out["choices"] = Json::array({std::move(choice)});
  out["usage"] = UsageJson(final);
  return out;
}

Json StreamChunk(OpenAiEndpoint endpoint, const ResponseIdentity& identity, const std::string& text,
                 const char* finish_reason, bool first) {
  Json out = Envelope(endpoint, identity, /*chunk=*/true);
  Json choice = Json::object();
  choice["index"] = 0;
  if (endpoint == OpenAiEndpoint::kCompletions) {
    choice["text"] = text;
  } else {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason == nullptr)) delta["content"] = text;
    choice["delta"] = std::move(delta);
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason == nullptr ? Json(nullptr) : Json(finish_reason);
  out["choices"] = Json::array({std::move(choice)});
  return out;
}

Json UsageChunk(OpenAiEndpoint endpoint, const ResponseIdentity& identity,
                const v1::GenerateResponse::Final& final) {
  Json out = Envelope(endpoint, identity, /*chunk=*/true);
  out["choices"] = Json::array();
  out["usage"] = UsageJson(final);
  return out;
}

std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

std::string SseEvent(const Json& value) { return absl::StrCat("data: ", DumpJson(value), "\n\n"); }

}  // namespace pdserve
