// pdserve tokenize: the token ids of a text, one line per input (as llama-tokenize prints them),
// from a model's tokenizer or a tokenizer file alone; or a conversation rendered with the
// model's chat template (--chat).
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/chat/chat_template.h"
#include "core/formats/model_loader.h"
#include "nlohmann/json.hpp"
#include "tools/cli_flags.h"
#include "tools/commands.h"

ABSL_FLAG(std::string, file, "", "tokenize: a file whose whole content is one input");
ABSL_FLAG(std::string, json_inputs, "",
          "tokenize: a JSON file holding an array of strings, one input each");
ABSL_FLAG(bool, no_bos, false, "tokenize: do not add the model's BOS token");
ABSL_FLAG(std::string, chat, "",
          "tokenize: a JSON conversation ([{\"role\": ..., \"content\": ...}, ...]) to render "
          "with the model's chat template, or a list of them (then one JSON string per line)");

namespace pdserve::cli {
namespace {

absl::StatusOr<std::vector<std::string>> Inputs() {
  const std::string file = absl::GetFlag(FLAGS_file), json = absl::GetFlag(FLAGS_json_inputs);
  const bool has_prompt = !absl::GetFlag(FLAGS_prompt).empty();
  if (has_prompt + !file.empty() + !json.empty() != 1) {
    return absl::InvalidArgumentError(
        "tokenize needs exactly one of --prompt, --file, --json-inputs");
  }
  if (has_prompt) return std::vector<std::string>{absl::GetFlag(FLAGS_prompt)};
  if (!file.empty()) {
    PDSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(file, "--file"));
    return std::vector<std::string>{std::move(text)};
  }
  PDSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(json, "--json-inputs"));
  const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  std::vector<std::string> inputs;
  if (parsed.is_array()) {
    for (const nlohmann::json& item : parsed) {
      if (!item.is_string()) break;
      inputs.push_back(item.get<std::string>());
    }
  }
  if (!parsed.is_array() || inputs.size() != parsed.size()) {
    return absl::InvalidArgumentError(absl::StrCat("'", json, "' is not a JSON array of strings"));
  }
  return inputs;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromFlags() {
  const std::string tokenizer = absl::GetFlag(FLAGS_tokenizer);
  if (absl::GetFlag(FLAGS_model).empty()) {
    if (tokenizer.empty())
      return absl::InvalidArgumentError("tokenize needs --model or --tokenizer");
    return LoadTokenizerFile(tokenizer, /*expected_vocab_size=*/0);
  }
  PDSERVE_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFromFlags());
  return std::move(model.tokenizer);
}

absl::StatusOr<std::vector<ChatMessage>> Conversation(const nlohmann::json& json) {
  std::vector<ChatMessage> messages;
  for (const nlohmann::json& m : json) {
    if (!m.is_object() || !m.value("role", nlohmann::json()).is_string() ||
        !m.value("content", nlohmann::json()).is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chat message ", m.dump(), " is not {\"role\": string, \"content\": string}"));
    }
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

// --chat: the rendered prompt of one conversation, or a JSON string per line for a list.
absl::Status RenderChat(const Tokenizer& tokenizer) {
  const std::string path = absl::GetFlag(FLAGS_chat);
  PDSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "--chat"));
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_array() || json.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a JSON conversation"));
  }
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ChatTemplate> chat,
                           ChatTemplate::ForTokenizer(tokenizer));
  if (chat == nullptr) return absl::InvalidArgumentError("the model has no chat template");
  const bool many = json[0].is_array();
  for (const nlohmann::json& conversation : many ? json : nlohmann::json::array({json})) {
    PDSERVE_ASSIGN_OR_RETURN(std::vector<ChatMessage> messages, Conversation(conversation));
    PDSERVE_ASSIGN_OR_RETURN(std::string prompt,
                             chat->Render(messages, /*add_generation_prompt=*/true));
    const std::string line = many ? nlohmann::json(prompt).dump() + "\n" : prompt;
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTokenize() {
  if (!absl::GetFlag(FLAGS_chat).empty()) {
    PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, TokenizerFromFlags());
    return RenderChat(*tokenizer);
  }
  PDSERVE_ASSIGN_OR_RETURN(std::vector<std::string> inputs, Inputs());
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, TokenizerFromFlags());
  for (const std::string& input : inputs) {
    const std::vector<int> ids = tokenizer->Encode(input, !absl::GetFlag(FLAGS_no_bos));
    std::printf("%s\n", absl::StrJoin(ids, " ").c_str());
  }
  return absl::OkStatus();
}

}  // namespace pdserve::cli
