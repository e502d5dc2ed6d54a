// config.json and tokenizer_config.json of Hugging Face Llama checkpoints: parsing into a
// ModelConfig (rejecting the LlamaConfig variants the engine does not implement: other model
// types and activations, biases, RoPE scaling) and writing them as transformers does.
#ifndef PDSERVE_CORE_MODEL_HF_CONFIG_H_
#define PDSERVE_CORE_MODEL_HF_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/model/json_fields.h"
#include "core/model/model_config.h"
#include "core/model/vocabulary.h"
#include "core/tensor/dtype.h"

namespace pdserve {

// `json` is the content of config.json at `path` (named in errors). The result has the split-half
// RoPE pairing of Hugging Face checkpoints.
absl::StatusOr<ModelConfig> ParseHfConfig(const Json& json, const std::string& path);

// config.json for a LlamaForCausalLM with matrices stored in `dtype`.
nlohmann::ordered_json HfConfigJson(const ModelConfig& c, const Vocabulary& vocab, DType dtype);

// tokenizer_config.json for the LlamaTokenizer of `vocab`.
nlohmann::ordered_json HfTokenizerConfigJson(const ModelConfig& c, const Vocabulary& vocab);

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_HF_CONFIG_H_
