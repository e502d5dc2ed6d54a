// Reader and writer of llama2.c's legacy checkpoint format (run.c): a header of 7 int32 (dim,
// hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; vocab_size < 0 means an untied
// classifier), then fp32 tensors: token embedding, attention norms, wq, wk, wv, wo, ffn norms, w1,
// w2, w3, final norm, two RoPE tables [seq_len, head_dim/2], and the classifier when untied.
// Weights are memory-mapped, not copied. RoPE pairing is adjacent.
#ifndef PDSERVE_CORE_FORMATS_LLAMA2C_CHECKPOINT_H_
#define PDSERVE_CORE_FORMATS_LLAMA2C_CHECKPOINT_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/model/model_weights.h"

namespace pdserve {

// InvalidArgument (naming `path`) for a short header, impossible shapes, or a size that disagrees
// with the header; NotFound when the file is missing.
absl::StatusOr<ModelWeights> LoadLlama2cCheckpoint(const std::string& path);

// Writes `weights` as fp32 in the legacy format (adjacent RoPE pairing; converts as needed).
// InvalidArgument when config.rope_scaling is set: the format has no field for it.
absl::Status WriteLlama2cCheckpoint(const std::string& path, const ModelWeights& weights);

}  // namespace pdserve

#endif  // PDSERVE_CORE_FORMATS_LLAMA2C_CHECKPOINT_H_
