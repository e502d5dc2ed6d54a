// libFuzzer target for the Jinja chat template engine: each input is a template source given to
// ChatTemplate::Create (jinja::Template::Parse) and, when it parses, rendered for two fixed
// conversations with and without the generation prompt, under the default render limits
// (jinja_limits.h). Beyond ASan and UBSan (and libFuzzer's -timeout and -rss_limit_mb, which catch
// a render the limits fail to stop) it checks that every refusal, a limit exceeded included, is an
// InvalidArgument. Built and run by tests/fuzz/fuzz.sh; seeds in corpus/jinja.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/chat/chat_template.h"
#include "tests/fuzz/fuzz_support.h"

namespace pdserve::fuzz {
namespace {

void FuzzOne(std::string_view source) {
  static const std::vector<std::vector<ChatMessage>> kConversations = {
      {{"user", "Hello!"}},
      {{"system", "  Be brief.\n"},
       {"user", "2 + 2 = ? \xf0\x9f\xa6\x99"},
       {"assistant", "<think>\nfour\n</think>\n\n4"},
       {"user", "And <|im_start|> {{ x }}?"}}};
  const absl::StatusOr<ChatTemplate> chat_template =
      ChatTemplate::Create(std::string(source), "<s>", "</s>");
  if (!chat_template.ok()) {
    CheckRefusal(chat_template.status());
    return;
  }
  for (const std::vector<ChatMessage>& conversation : kConversations) {
    for (bool add_generation_prompt : {false, true}) {
      const absl::StatusOr<std::string> prompt =
          chat_template->Render(conversation, add_generation_prompt);
      if (!prompt.ok()) CheckRefusal(prompt.status());
    }
  }
}

}  // namespace
}  // namespace pdserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pdserve::fuzz::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
