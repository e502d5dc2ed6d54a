// LoadModel: one entry point for every model format. `path` is a llama2.c checkpoint, a GGUF file
// (detected by its magic) or a Hugging Face directory (config.json + safetensors). The tokenizer
// comes from `tokenizer_path` when given (a llama2.c tokenizer.bin, or a SentencePiece .model),
// else from the model: GGUF's embedded vocabulary, the directory's tokenizer.model, or for llama2.c
// a tokenizer.bin / tok<vocab>.bin beside the checkpoint.
#ifndef PDSERVE_CORE_MODEL_MODEL_LOADER_H_
#define PDSERVE_CORE_MODEL_MODEL_LOADER_H_

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

// Errors name the file and what is wrong with it; the tokenizer's vocabulary size must equal the
// model's.
absl::StatusOr<LoadedModel> LoadModel(const std::string& path,
                                      const std::string& tokenizer_path = "");

// Loads only the weights of any format (no tokenizer needed).
absl::StatusOr<ModelWeights> LoadModelWeights(const std::string& path);

// Loads a tokenizer file: SentencePiece when it ends in ".model", else llama2.c tokenizer.bin.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFile(const std::string& path,
                                                             int expected_vocab_size);

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_MODEL_LOADER_H_
