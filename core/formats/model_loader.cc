#include "core/formats/model_loader.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/formats/gguf_file.h"
#include "core/formats/gguf_model.h"
#include "core/formats/gguf_vocabulary.h"
#include "core/formats/hf_model.h"
#include "core/formats/llama2c_checkpoint.h"
#include "core/tokenizer/create_tokenizer.h"
#include "core/tokenizer/hf_tokenizer_json.h"
#include "core/tokenizer/llama2c_tokenizer.h"
#include "core/tokenizer/sentencepiece_tokenizer.h"

namespace pdserve {
namespace {

namespace fs = std::filesystem;

// The tokenizer.bin that llama2.c keeps beside a checkpoint, if any.
std::string FindLlama2cTokenizer(const std::string& model_path, int vocab_size) {
  const fs::path dir = fs::path(model_path).parent_path();
  for (const std::string& name :
       {std::string("tokenizer.bin"), absl::StrCat("tok", vocab_size, ".bin")}) {
    std::error_code ec;
    if (fs::is_regular_file(dir / name, ec)) return (dir / name).string();
  }
  return "";
}

absl::Status CheckVocabSize(const Tokenizer& tokenizer, const ModelConfig& config,
                            const std::string& source) {
  // A model's embedding may have more rows than its tokenizer has tokens (Qwen pads to 151936).
  if (tokenizer.vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer ", source, " has ", tokenizer.vocab_size(),
                     " tokens but the model's vocabulary has only ", config.vocab_size));
  }
  return absl::OkStatus();
}

}  // namespace

const char* ModelFormatName(ModelFormat format) {
  switch (format) {
    case ModelFormat::kLlama2c:
      return "llama2.c";
    case ModelFormat::kGguf:
      return "gguf";
    case ModelFormat::kHuggingFace:
      return "huggingface";
  }
  return "unknown";
}

absl::StatusOr<ModelFormat> DetectModelFormat(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat("model path '", path, "' does not exist"));
  }
  if (fs::is_directory(path, ec)) {
    if (!fs::is_regular_file(fs::path(path) / "config.json", ec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path, "' is a directory without config.json (not a Hugging Face model)"));
    }
    return ModelFormat::kHuggingFace;
  }
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, sizeof(magic));
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return ModelFormat::kGguf;
  return ModelFormat::kLlama2c;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFile(const std::string& path,
                                                             int expected_vocab_size) {
  if (absl::EndsWith(path, ".model")) {
    PDSERVE_ASSIGN_OR_RETURN(
        std::string chat_template,
        ReadHfChatTemplate((fs::path(path).parent_path() / "tokenizer_config.json").string()));
    return LoadSentencePieceTokenizer(path, std::move(chat_template));
  }
  if (absl::EndsWith(path, ".json")) {
    PDSERVE_ASSIGN_OR_RETURN(Vocabulary vocab, ReadHfTokenizerJson(path));
    return CreateTokenizer(std::move(vocab));
  }
  if (absl::EndsWith(path, ".gguf")) {
    PDSERVE_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
    PDSERVE_ASSIGN_OR_RETURN(Vocabulary vocab, ReadGgufVocabulary(file));
    return CreateTokenizer(std::move(vocab));
  }
  return LoadLlama2cTokenizer(path, expected_vocab_size);
}

absl::StatusOr<ModelWeights> LoadModelWeights(const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(ModelFormat format, DetectModelFormat(path));
  switch (format) {
    case ModelFormat::kLlama2c:
      return LoadLlama2cCheckpoint(path);
    case ModelFormat::kGguf: {
      PDSERVE_ASSIGN_OR_RETURN(GgufModel gguf, LoadGgufModel(path));
      return std::move(gguf.weights);
    }
    case ModelFormat::kHuggingFace: {
      PDSERVE_ASSIGN_OR_RETURN(HfModel hf, LoadHfModel(path));
      return std::move(hf.weights);
    }
  }
  return absl::InternalError("unhandled model format");
}

absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const std::string& tokenizer_path) {
  LoadedModel model;
  PDSERVE_ASSIGN_OR_RETURN(model.format, DetectModelFormat(path));
  std::string vocabulary_source = tokenizer_path;
  switch (model.format) {
    case ModelFormat::kLlama2c: {
      PDSERVE_ASSIGN_OR_RETURN(model.weights, LoadLlama2cCheckpoint(path));
      if (vocabulary_source.empty()) {
        vocabulary_source = FindLlama2cTokenizer(path, model.weights.config.vocab_size);
      }
      if (vocabulary_source.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", path,
            "' is a llama2.c checkpoint, which holds no vocabulary, and no tokenizer.bin",
            " or tok", model.weights.config.vocab_size, ".bin lies beside it: pass --tokenizer"));
      }
      break;
    }
    case ModelFormat::kGguf: {
      PDSERVE_ASSIGN_OR_RETURN(GgufModel gguf, LoadGgufModel(path));
      model.weights = std::move(gguf.weights);
      if (vocabulary_source.empty()) {
        PDSERVE_ASSIGN_OR_RETURN(model.tokenizer, CreateTokenizer(std::move(gguf.vocabulary)));
        vocabulary_source = path;
      }
      break;
    }
    case ModelFormat::kHuggingFace: {
      PDSERVE_ASSIGN_OR_RETURN(HfModel hf, LoadHfModel(path));
      model.weights = std::move(hf.weights);
      if (vocabulary_source.empty()) vocabulary_source = hf.tokenizer_model_path;
      if (vocabulary_source.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", path, "' has no tokenizer.model or tokenizer.json: pass --tokenizer"));
      }
      break;
    }
  }
  if (model.tokenizer == nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(model.tokenizer,
                             LoadTokenizerFile(vocabulary_source, model.weights.config.vocab_size));
  }
  PDSERVE_RETURN_IF_ERROR(
      CheckVocabSize(*model.tokenizer, model.weights.config, vocabulary_source));
  return model;
}

}  // namespace pdserve
