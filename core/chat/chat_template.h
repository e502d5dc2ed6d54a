// ChatTemplate: a model's own chat template (Jinja source from tokenizer_config.json or GGUF's
// tokenizer.chat_template) rendering a conversation into the prompt text, as transformers'
// apply_chat_template(messages, add_generation_prompt=...) does: the template sees `messages`
// (a list of {"role", "content"}), `add_generation_prompt`, `bos_token` and `eos_token` (their
// text), and no tools. The prompt carries the special tokens' text; tokenize it without adding
// BOS. Immutable after Create; Render is thread-safe.
#ifndef PDSERVE_CORE_CHAT_CHAT_TEMPLATE_H_
#define PDSERVE_CORE_CHAT_CHAT_TEMPLATE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/template/jinja_template.h"
#include "core/tokenizer/tokenizer.h"

namespace pdserve {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

class ChatTemplate {
 public:
  // InvalidArgument naming the construct when `source` is not Jinja this engine renders.
  static absl::StatusOr<ChatTemplate> Create(const std::string& source, std::string bos_token,
                                             std::string eos_token);
  // The template `tokenizer` carries, with its BOS and EOS tokens' text; nullptr when it has none.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> ForTokenizer(const Tokenizer& tokenizer);

  // InvalidArgument with the template's message when it refuses the conversation
  // (raise_exception, e.g. roles that do not alternate), fails to render, or goes over `limits`
  // (the message names the limit; jinja_limits.h).
  absl::StatusOr<std::string> Render(
      const std::vector<ChatMessage>& messages, bool add_generation_prompt,
      const jinja::RenderLimits& limits = jinja::RenderLimits()) const;

 private:
  ChatTemplate(jinja::Template t, std::string bos, std::string eos)
      : template_(std::move(t)), bos_token_(std::move(bos)), eos_token_(std::move(eos)) {}

  jinja::Template template_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_CHAT_CHAT_TEMPLATE_H_
