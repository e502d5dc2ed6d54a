// ModelWeights: the tensors of a Llama-family model in one canonical layout, whatever the file
// format. Every matrix is [out_features, in_features] with rows contiguous (y = W·x), as in
// llama2.c, GGUF and Hugging Face files. Q/K rows follow config.rope_pairing: loaders keep them
// as the file stores them and the engine rotates with the matching pairing.
//
// Tensors share ownership of their bytes (often a memory-mapped file). Immutable after loading;
// safe to read from many threads.
#ifndef PDSERVE_CORE_MODEL_MODEL_WEIGHTS_H_
#define PDSERVE_CORE_MODEL_MODEL_WEIGHTS_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "core/model/model_config.h"
#include "core/model/swiftkv_weights.h"
#include "core/tensor/tensor.h"

namespace pdserve {

struct LayerWeights {
  Tensor attn_norm;  // [dim]
  Tensor wq;         // [dim, dim]
  Tensor wk;         // [kv_dim, dim]
  Tensor wv;         // [kv_dim, dim]
  Tensor wo;         // [dim, dim]
  Tensor ffn_norm;   // [dim]
  Tensor w1;         // [hidden, dim]  gate
  Tensor w2;         // [dim, hidden]  down
  Tensor w3;         // [hidden, dim]  up
  // Present only when the family has them (FamilyTraits), f32 like the norms; empty otherwise.
  Tensor bq, bk, bv;      // [dim], [kv_dim], [kv_dim]: q/k/v projection biases (qkv_bias)
  Tensor q_norm, k_norm;  // [head_dim]: RMSNorm weights of every q / k head (qk_norm)
};

struct ModelWeights {
  ModelConfig config;
  Tensor token_embedding;  // [vocab, dim]
  std::vector<LayerWeights> layers;
  Tensor final_norm;                      // [dim]
  Tensor classifier;                      // [vocab, dim]; shares token_embedding's bytes when tied
  std::optional<SwiftKvWeights> swiftkv;  // SwiftKV checkpoints (or rewired models) only
};

// InvalidArgument naming the first tensor whose shape disagrees with `weights.config`, that is
// missing, or that the family does not have (a bias on a Llama layer). Loaders call this before
// returning.
absl::Status ValidateWeights(const ModelWeights& weights);

// Converts a layer's norms and biases (the vectors; absent ones stay absent) to f32, as every
// engine and writer holds them.
void VectorsToF32(LayerWeights& layer);

// Converts every matrix to `dtype` (norms and biases stay f32); shares tensors already in `dtype`.
ModelWeights ConvertWeights(const ModelWeights& weights, DType dtype);

// Permutes the q/k rows of every head (and the q/k biases and head norms alike) between the
// adjacent and split-half RoPE pairings and sets config.rope_pairing to `target`. Row r' = 2i + j
// of the adjacent layout holds row j·d/2 + i of the split-half layout (Hugging Face's convert
// script). Returns `weights` unchanged when already there.
ModelWeights WithRopePairing(const ModelWeights& weights, RopePairing target);

// A fingerprint of the weights as loaded: the config, and each tensor's dtype, shape and bytes
// (whole for tensors up to 4 KiB, else 16 evenly spaced 256-byte samples and the last 256). Two
// loads of one file give the same value; another model, a fine-tune or another dtype gives another
// (sampling reads ~1 MiB of a 1B model, so it is fast at startup). Fnv1a64: it tells models apart,
// it is no defence against someone crafting weights to collide. The prefix cache's identity.
uint64_t WeightsFingerprint(const ModelWeights& weights);

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_MODEL_WEIGHTS_H_
