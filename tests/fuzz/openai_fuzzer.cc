// libFuzzer target for the OpenAI-compatible request parser: each input is a request body given to
// ParseOpenAiRequest for /v1/completions, for /v1/chat/completions with the plain chat template,
// with a model's chat template (Jinja) and with a template that failed to load. Beyond ASan and
// UBSan it checks that an error is a 4xx/5xx with a message that serializes, and that an accepted
// request is within the limits: a non-empty prompt, max_tokens in [1, context], sampling in range,
// at most four non-empty stop strings of the caller's. Built and run by tests/fuzz/fuzz.sh; seeds
// in corpus/openai.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "core/chat/chat_template.h"
#include "services/router/openai_protocol.h"
#include "services/router/plain_chat_template.h"
#include "tests/fuzz/fuzz_support.h"

namespace pdserve::fuzz {
namespace {

constexpr int kContext = 64;

// Llama 3.1's chat template, as its tokenizer_config.json has it.
constexpr char kLlama3Template[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

void CheckRequest(const OpenAiRequest& request, OpenAiEndpoint endpoint, bool plain_chat) {
  const v1::GenerateRequest& generate = request.generate;
  Check(request.endpoint == endpoint, "the request is of its endpoint");
  if (generate.has_token_ids()) {
    Check(endpoint == OpenAiEndpoint::kCompletions && generate.token_ids().ids_size() > 0,
          "a prompt of token ids is a non-empty completion prompt");
    for (int id : generate.token_ids().ids()) Check(id >= 0, "prompt token ids are >= 0");
  } else {
    Check(!generate.text().empty(), "a text prompt is not empty");
  }
  Check(generate.max_tokens() >= 1 && generate.max_tokens() <= kContext,
        "max_tokens is in [1, context]");
  const v1::SamplingParams& sampling = generate.sampling();
  Check(sampling.temperature() >= 0.0f && sampling.temperature() <= 2.0f,
        "temperature is in [0, 2]");
  Check(sampling.top_p() >= 0.0f && sampling.top_p() <= 1.0f, "top_p is in [0, 1]");
  Check(sampling.top_k() >= 0, "top_k is >= 0");
  const int extra_stop = plain_chat ? 1 : 0;
  Check(generate.stop().stop_strings_size() <= kMaxOpenAiStopStrings + extra_stop,
        "at most four stop strings of the request's");
  Check(!plain_chat || generate.stop().stop_strings(0) == kPlainChatStopString,
        "a plain chat prompt stops at the next user turn");
  for (const std::string& stop : generate.stop().stop_strings()) {
    Check(!stop.empty(), "stop strings are not empty");
  }
  Check(request.stream || !request.include_usage, "include_usage only when streaming");
}

void CheckError(const OpenAiError& error) {
  Check(error.http_status >= 400 && error.http_status < 600, "an error is a 4xx or 5xx");
  Check(!error.message.empty(), "an error has a message");
  DumpJson(ErrorBody(error));
}

void FuzzOne(std::string_view body) {
  static const ChatTemplate* const chat_template =
      new ChatTemplate(*ChatTemplate::Create(kLlama3Template, "<|begin_of_text|>", "<|eot_id|>"));
  OpenAiLimits plain;
  plain.model_id = "pdserve-model";
  plain.max_context = kContext;
  OpenAiLimits templated = plain;
  templated.chat_template = chat_template;
  OpenAiLimits broken = plain;
  broken.chat_template_error = absl::InvalidArgumentError("the chat template cannot be used");
  const struct {
    OpenAiEndpoint endpoint;
    const OpenAiLimits* limits;
  } cases[] = {{OpenAiEndpoint::kCompletions, &plain},
               {OpenAiEndpoint::kChatCompletions, &plain},
               {OpenAiEndpoint::kChatCompletions, &templated},
               {OpenAiEndpoint::kChatCompletions, &broken}};
  for (const auto& c : cases) {
    OpenAiRequest request;
    if (std::optional<OpenAiError> error =
            ParseOpenAiRequest(c.endpoint, body, *c.limits, &request)) {
      CheckError(*error);
      continue;
    }
    Check(c.limits != &broken, "a chat request needs a usable template");
    CheckRequest(request, c.endpoint,
                 c.endpoint == OpenAiEndpoint::kChatCompletions && c.limits == &plain);
  }
}

}  // namespace
}  // namespace pdserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pdserve::fuzz::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
