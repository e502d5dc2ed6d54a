// ModelConfig: the family and hyperparameters of a model, as read from any supported format.
// A plain value type; Validate() rejects impossible shapes before anything is allocated.
#ifndef PDSERVE_CORE_MODEL_MODEL_CONFIG_H_
#define PDSERVE_CORE_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/model/model_family.h"
#include "core/tensor/rope_pairing.h"
#include "kernels/rope.h"

namespace pdserve {

struct ModelConfig {
  ModelFamily family = ModelFamily::kLlama;  // which extra tensors a layer has (model_family.h)
  int dim = 0;                               // model width
  int hidden_dim = 0;                        // SwiGLU inner width
  int n_layers = 0;
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
  // Per-head width when it is not dim / n_heads (Qwen3-0.6B: 128 with dim 1024 and 16 heads,
  // Hugging Face "head_dim", GGUF attention.key_length); 0 = dim / n_heads.
  int explicit_head_dim = 0;
  int vocab_size = 0;
  int max_seq_len = 0;  // longest context the model supports
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopePairing rope_pairing = RopePairing::kAdjacent;
  // Llama 3.1 frequency scaling (Hugging Face rope_type "llama3"); factor 0 = none. GGUF and
  // llama2.c files cannot express it and always load with none.
  kernels::RopeScaling rope_scaling;
  bool tied_embeddings = true;  // classifier shares the token embedding

  int head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : n_heads > 0 ? dim / n_heads : 0;
  }
  int q_dim() const { return n_heads * head_dim(); }  // width of the queries and attention output
  // Sets the head dim as files state it: explicit only where it is not dim / n_heads, so that
  // equal configs compare equal whichever way they were read. 0 = dim / n_heads.
  void SetHeadDim(int width) {
    explicit_head_dim = width != 0 && int64_t{width} * n_heads != dim ? width : 0;
  }
  int kv_dim() const { return n_kv_heads * head_dim(); }
  const FamilyTraits& traits() const { return Traits(family); }

  // Number of parameters (classifier counted once when tied).
  int64_t NumParameters() const;

  // InvalidArgument when any field is non-positive or implausibly large, dim is not divisible by
  // n_heads (without explicit_head_dim), explicit_head_dim is negative or above 1024, n_heads is
  // not divisible by n_kv_heads, the head dim is odd (RoPE needs pairs), or rope_scaling is
  // set (factor ≠ 0) without factor ≥ 1, 0 < low_freq_factor < high_freq_factor and
  // original_max_positions ≥ 1.
  absl::Status Validate() const;

  // "llama: dim 64, hidden 172, 5 layers, 8 heads (4 kv), vocab 512, ctx 512, rope adjacent", with
  // "8 heads of 128 (4 kv)" for an explicit head dim and ", llama3 rope scaling ×8 (low 1, high
  // 4, original ctx 8192)" appended when scaled.
  std::string Describe() const;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_MODEL_CONFIG_H_
