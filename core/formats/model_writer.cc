#include "core/formats/model_writer.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/formats/gguf_model.h"
#include "core/formats/hf_model.h"
#include "core/formats/llama2c_checkpoint.h"
#include "core/tokenizer/llama2c_tokenizer.h"

namespace pdserve {

absl::StatusOr<ModelFormat> ParseModelFormat(const std::string& name) {
  if (name == "gguf") return ModelFormat::kGguf;
  if (name == "safetensors" || name == "hf") return ModelFormat::kHuggingFace;
  if (name == "llama2c") return ModelFormat::kLlama2c;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown format '", name, "' (expected gguf, safetensors or llama2c)"));
}

absl::Status WriteModel(const std::string& path, const ModelWeights& weights,
                        const Vocabulary& vocab, const WriteOptions& options) {
  // The GGUF and Hugging Face writers validate weights and vocabulary themselves.
  const bool swiftkv =
      weights.swiftkv.has_value() && weights.swiftkv->layer < weights.config.n_layers;
  if (swiftkv && options.format != ModelFormat::kHuggingFace) {
    return absl::InvalidArgumentError(
        "SwiftKV weights can only be written as a Hugging Face checkpoint (llama_swiftkv); GGUF "
        "and llama2.c have no place for them");
  }
  if (swiftkv && weights.config.family != ModelFamily::kLlama) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SwiftKV checkpoints (llama_swiftkv) hold Llama models only, not ",
        weights.config.traits().name, "; serve this model with --swiftkv-layer instead"));
  }
  switch (options.format) {
    case ModelFormat::kGguf:
      return WriteGgufModel(path, weights, vocab, options.dtype);
    case ModelFormat::kHuggingFace: {
      HfWriteOptions hf;
      hf.dtype = options.dtype;
      hf.num_shards = options.num_shards;
      return WriteHfModel(path, weights, vocab, hf);
    }
    case ModelFormat::kLlama2c: {
      if (options.dtype != DType::kF32) {
        return absl::InvalidArgumentError("llama2.c checkpoints are f32 only");
      }
      PDSERVE_RETURN_IF_ERROR(ValidateWeights(weights));
      PDSERVE_RETURN_IF_ERROR(vocab.Validate());
      if (vocab.size() != weights.config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "vocabulary has ", vocab.size(), " tokens, the model ", weights.config.vocab_size));
      }
      PDSERVE_RETURN_IF_ERROR(WriteLlama2cCheckpoint(path, weights));
      const std::filesystem::path tokenizer =
          std::filesystem::path(path).parent_path() / "tokenizer.bin";
      return WriteLlama2cTokenizer(tokenizer.string(), vocab);
    }
  }
  return absl::InternalError("unhandled model format");
}

}  // namespace pdserve
