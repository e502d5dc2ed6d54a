// pdserve tokenize: the token ids of a text, one line per input (as llama-tokenize prints them),
// from a model's tokenizer or a tokenizer file alone.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/model/model_loader.h"
#include "nlohmann/json.hpp"
#include "tools/cli_flags.h"
#include "tools/commands.h"

ABSL_FLAG(std::string, file, "", "tokenize: a file whose whole content is one input");
ABSL_FLAG(std::string, json_inputs, "",
          "tokenize: a JSON file holding an array of strings, one input each");
ABSL_FLAG(bool, no_bos, false, "tokenize: do not add the model's BOS token");

namespace pdserve::cli {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::vector<std::string>> Inputs() {
  const std::string file = absl::GetFlag(FLAGS_file), json = absl::GetFlag(FLAGS_json_inputs);
  const bool has_prompt = !absl::GetFlag(FLAGS_prompt).empty();
  if (has_prompt + !file.empty() + !json.empty() != 1) {
    return absl::InvalidArgumentError(
        "tokenize needs exactly one of --prompt, --file, --json-inputs");
  }
  if (has_prompt) return std::vector<std::string>{absl::GetFlag(FLAGS_prompt)};
  if (!file.empty()) {
    PDSERVE_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(file));
    return std::vector<std::string>{std::move(text)};
  }
  PDSERVE_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(json));
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

}  // namespace

absl::Status RunTokenize() {
  PDSERVE_ASSIGN_OR_RETURN(std::vector<std::string> inputs, Inputs());
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, TokenizerFromFlags());
  for (const std::string& input : inputs) {
    const std::vector<int> ids = tokenizer->Encode(input, !absl::GetFlag(FLAGS_no_bos));
    std::printf("%s\n", absl::StrJoin(ids, " ").c_str());
  }
  return absl::OkStatus();
}

}  // namespace pdserve::cli
