#include "core/chat/chat_template.h"

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace pdserve {

absl::StatusOr<ChatTemplate> ChatTemplate::Create(const std::string& source, std::string bos_token,
                                                  std::string eos_token) {
  absl::StatusOr<jinja::Template> t = jinja::Template::Parse(source);
  if (!t.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model's chat template cannot be used: ", t.status().message()));
  }
  return ChatTemplate(std::move(*t), std::move(bos_token), std::move(eos_token));
}

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::ForTokenizer(
    const Tokenizer& tokenizer) {
  if (tokenizer.chat_template().empty()) return nullptr;
  const Vocabulary vocab = tokenizer.ExportVocabulary();
  const auto text = [&](int id) {
    return id >= 0 && id < vocab.size() ? vocab.pieces[id] : std::string();
  };
  PDSERVE_ASSIGN_OR_RETURN(
      ChatTemplate t, Create(tokenizer.chat_template(), text(vocab.bos_id), text(vocab.eos_id)));
  return std::make_unique<ChatTemplate>(std::move(t));
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt,
                                                 const jinja::RenderLimits& limits) const {
  jinja::Array list;
  for (const ChatMessage& m : messages) {
    jinja::Object message;
    message.Set("role", jinja::Value(m.role));
    message.Set("content", jinja::Value(m.content));
    list.push_back(jinja::Value(std::move(message)));
  }
  jinja::Object context;
  context.Set("messages", jinja::Value(std::move(list)));
  context.Set("add_generation_prompt", jinja::Value(add_generation_prompt));
  context.Set("bos_token", jinja::Value(bos_token_));
  context.Set("eos_token", jinja::Value(eos_token_));
  absl::StatusOr<std::string> prompt = template_.Render(context, limits);
  if (!prompt.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model's chat template: ", prompt.status().message()));
  }
  return prompt;
}

}  // namespace pdserve
