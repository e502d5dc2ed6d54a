// config.json and tokenizer_config.json of Hugging Face checkpoints of the families in
// model_family.h: parsing into a ModelConfig plus the SwiftKV fields of Snowflake's
// LlamaSwiftKVConfig (rejecting the variants the engine does not implement: other model types
// and activations, biases a family does not have, RoPE scaling other than Llama 3.1's "llama3",
// a head_dim other than hidden_size / num_attention_heads) and writing them as transformers does.
// Stateless functions; thread-safe.
#ifndef PDSERVE_CORE_FORMATS_HF_CONFIG_H_
#define PDSERVE_CORE_FORMATS_HF_CONFIG_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/base/json_fields.h"
#include "core/model/model_config.h"
#include "core/tensor/dtype.h"
#include "core/tokenizer/vocabulary.h"

namespace pdserve {

// The SwiftKV fields of a "llama_swiftkv" config.json (research/algorithms.md §1.1).
struct HfSwiftKvConfig {
  bool enabled = false;  // "swiftkv" (default false): run with the *_swiftkv tensors
  int layer = 0;         // "num_key_value_layers" l; absent, null or 0: num_hidden_layers
  int group = 1;         // "key_value_group_size" G; absent, null or 0: 1
};

struct HfConfig {
  ModelConfig model;  // split-half RoPE pairing, as Hugging Face checkpoints store q/k rows
  std::optional<HfSwiftKvConfig> swiftkv;  // model_type "llama_swiftkv" only
};

// `json` is the content of config.json at `path` (named in errors). model_type is a family's
// (FamilyTraits::hf_model_type) or "llama_swiftkv"; for the latter, InvalidArgument unless 0 ≤ l ≤
// num_hidden_layers, G ≥ 1 and (num_hidden_layers − l) % G == 0. The defaults (0 meaning "unset")
// follow LlamaSwiftKVConfig, whose `num_key_value_layers or num_hidden_layers` reads 0 as
// num_hidden_layers.
absl::StatusOr<HfConfig> ParseHfConfig(const Json& json, const std::string& path);

// config.json for c's family (LlamaForCausalLM, Qwen2ForCausalLM, ...) with matrices stored in
// `dtype`; with `swiftkv` (Llama only), for a LlamaSwiftKVForCausalLM (model_type "llama_swiftkv"
// and the three SwiftKV fields).
nlohmann::ordered_json HfConfigJson(const ModelConfig& c, const Vocabulary& vocab, DType dtype,
                                    const std::optional<HfSwiftKvConfig>& swiftkv = std::nullopt);

// tokenizer_config.json for the LlamaTokenizer of `vocab`.
nlohmann::ordered_json HfTokenizerConfigJson(const ModelConfig& c, const Vocabulary& vocab);

}  // namespace pdserve

#endif  // PDSERVE_CORE_FORMATS_HF_CONFIG_H_
