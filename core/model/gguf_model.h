// Loader and writer of Llama models in GGUF, following llama.cpp's "llama" architecture: the
// config in llama.* metadata, a SentencePiece-style vocabulary in tokenizer.ggml.* ("llama"
// tokenizer model), and tensors named token_embd, output_norm, output (absent when tied) and
// blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_down, ffn_up}.
// Q/K rows use the adjacent RoPE pairing. Loaded weights are memory-mapped, not copied, and keep
// the file's dtypes (F32, F16, BF16 or ggml's block formats). Functions are thread-compatible: no
// shared state.
#ifndef PDSERVE_CORE_MODEL_GGUF_MODEL_H_
#define PDSERVE_CORE_MODEL_GGUF_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/model_weights.h"
#include "core/tensor/dtype.h"
#include "core/tokenizer/vocabulary.h"

namespace pdserve {

struct GgufModel {
  ModelWeights weights;  // config.rope_pairing is kAdjacent
  Vocabulary vocabulary;
};

// Loads a "llama" GGUF. NotFound when the file is missing; InvalidArgument naming `path` for a
// malformed file (see GgufFile::Open), another architecture or tokenizer model, a missing or
// ill-typed required key (named), a tensor that is missing, unexpected or of the wrong shape
// (named), or a vocabulary whose size disagrees with token_embd.weight. Optional keys default as
// in llama.cpp: rms epsilon 1e-5, rope base 10000, kv heads = heads, special ids 1/2/0.
absl::StatusOr<GgufModel> LoadGgufModel(const std::string& path);

// Writes a llama.cpp-loadable "llama" GGUF v3: matrices (embedding and classifier included) in
// `dtype`, 1-D norms always F32, q/k rows permuted to the adjacent RoPE pairing. general.name is
// the file name without extension. InvalidArgument when `weights` or `vocab` fail validation,
// their vocabulary sizes differ, or config.rope_scaling is set (not written: LoadGgufModel refuses
// scaled files); Internal on I/O errors.
absl::Status WriteGgufModel(const std::string& path, const ModelWeights& weights,
                            const Vocabulary& vocab, DType dtype);

// WriteGgufModel for weights whose matrices already have the types to store, each its own (f32,
// f16, bf16 or ggml blocks, e.g. from QuantizeWeights; norms are written as given), with
// general.file_type = `file_type` (a llama_ftype). Errors as WriteGgufModel's.
absl::Status WriteTypedGgufModel(const std::string& path, const ModelWeights& weights,
                                 const Vocabulary& vocab, uint32_t file_type);

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_GGUF_MODEL_H_
