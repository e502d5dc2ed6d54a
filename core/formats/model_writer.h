// WriteModel: writes weights and vocabulary in any supported format — a llama2.c checkpoint (plus
// tokenizer.bin beside it), a GGUF file, or a Hugging Face directory (safetensors, optionally
// sharded). Used by `pdserve make-model` and `pdserve convert`.
#ifndef PDSERVE_CORE_FORMATS_MODEL_WRITER_H_
#define PDSERVE_CORE_FORMATS_MODEL_WRITER_H_

#include <string>

#include "absl/status/status.h"
#include "core/formats/model_loader.h"
#include "core/model/model_weights.h"
#include "core/tokenizer/vocabulary.h"

namespace pdserve {

struct WriteOptions {
  ModelFormat format = ModelFormat::kGguf;
  DType dtype = DType::kF32;  // llama2.c is always f32
  int num_shards = 1;         // Hugging Face only
};

// Parses "gguf", "safetensors"/"hf" or "llama2c"; InvalidArgument names the accepted values.
absl::StatusOr<ModelFormat> ParseModelFormat(const std::string& name);

// `path` is a file for llama2.c and GGUF, a directory (created) for Hugging Face. SwiftKV weights
// (weights.swiftkv with layer < n_layers) only fit Hugging Face: InvalidArgument for the others.
absl::Status WriteModel(const std::string& path, const ModelWeights& weights,
                        const Vocabulary& vocab, const WriteOptions& options);

}  // namespace pdserve

#endif  // PDSERVE_CORE_FORMATS_MODEL_WRITER_H_
