// ModelFamily: the architectures pdserve runs, as data. Each family is a Llama-style decoder
// (pre-RMSNorm, RoPE, GQA attention, SwiGLU MLP) plus the few differences listed in its
// FamilyTraits; loaders map file-format names to a family through this table, ValidateWeights
// checks the extra tensors it implies, and every engine runs them (docs/engine.md, "Adding a
// family"). Stored in no file: safe to renumber.
#ifndef PDSERVE_CORE_MODEL_MODEL_FAMILY_H_
#define PDSERVE_CORE_MODEL_MODEL_FAMILY_H_

#include <span>
#include <string>
#include <string_view>

#include "core/tensor/rope_pairing.h"

namespace pdserve {

enum class ModelFamily : uint8_t {
  kLlama,    // Llama 2, 3, 3.1/3.2 (RoPE scaling is a config field, not a family)
  kMistral,  // Llama's math; some releases cap attention at a sliding window
  kQwen2,    // Qwen2 and Qwen2.5: biases on the q/k/v projections
  kQwen3,    // Qwen3 dense: RMSNorm over each q and k head before RoPE
};

struct FamilyTraits {
  ModelFamily family;
  const char* name;               // "qwen2": flags, logs, Describe()
  const char* hf_model_type;      // config.json "model_type"
  const char* hf_architecture;    // config.json "architectures"[0]
  const char* gguf_architecture;  // GGUF general.architecture (and its metadata key prefix)
  // How GGUF files of the family order q/k rows: llama.cpp permutes Llama's into adjacent pairs
  // and keeps the others in Hugging Face's split-half order (its "NEOX" RoPE).
  RopePairing gguf_rope_pairing;
  bool qkv_bias;  // q, k and v projections add a bias ([dim], [kv_dim], [kv_dim])
  bool qk_norm;   // q and k heads are RMS-normalized (weights [head_dim]) before RoPE
};

// Every family, in declaration order.
std::span<const FamilyTraits> AllFamilies();
const FamilyTraits& Traits(ModelFamily family);

// The family whose hf_model_type / gguf_architecture / name is `name`; nullptr when none. Mistral
// GGUF files say "llama" (llama.cpp converts them so) and load as Llama.
const FamilyTraits* FamilyByHfModelType(std::string_view model_type);
const FamilyTraits* FamilyByGgufArchitecture(std::string_view architecture);
const FamilyTraits* FamilyByName(std::string_view name);

// "llama, mistral, qwen2, qwen3": for errors that list the choices.
std::string FamilyNames();

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_MODEL_FAMILY_H_
