// LoadModel: one entry point for every model format. `path` is a llama2.c checkpoint, a GGUF file
// (detected by its magic) or a Hugging Face directory (config.json + safetensors). The tokenizer
// comes from `tokenizer_path` when given (see LoadTokenizerFile), else from the model: GGUF's
// embedded vocabulary, the directory's tokenizer.model or else tokenizer.json, or for llama2.c a
// tokenizer.bin / tok<vocab>.bin beside the checkpoint.
#ifndef PDSERVE_CORE_FORMATS_MODEL_LOADER_H_
#define PDSERVE_CORE_FORMATS_MODEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/model_weights.h"
#include "core/tokenizer/tokenizer.h"

namespace pdserve {

enum class ModelFormat { kLlama2c, kGguf, kHuggingFace };

const char* ModelFormatName(ModelFormat format);

// Detects the format of `path` without loading it; InvalidArgument / NotFound when it is none.
absl::StatusOr<ModelFormat> DetectModelFormat(const std::string& path);

struct LoadedModel {
  ModelFormat format = ModelFormat::kLlama2c;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Errors name the file and what is wrong with it; the tokenizer may not have more tokens than the
// model's embedding has rows (it may have fewer: Qwen pads its embedding).
absl::StatusOr<LoadedModel> LoadModel(const std::string& path,
                                      const std::string& tokenizer_path = "");

// Loads only the weights of any format (no tokenizer needed).
absl::StatusOr<ModelWeights> LoadModelWeights(const std::string& path);

// Loads a tokenizer file by its name: a SentencePiece ".model", a Hugging Face tokenizer ".json"
// (tokenizer_config.json beside it names the special tokens), a ".gguf" file's vocabulary, else
// a llama2.c tokenizer.bin of `expected_vocab_size` tokens.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFile(const std::string& path,
                                                             int expected_vocab_size);

}  // namespace pdserve

#endif  // PDSERVE_CORE_FORMATS_MODEL_LOADER_H_
