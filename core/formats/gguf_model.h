// Loader and writer of models in GGUF, following llama.cpp's "llama", "qwen2" and "qwen3"
// architectures (FamilyTraits::gguf_architecture): the config in <arch>.* metadata, the
// vocabulary in tokenizer.ggml.* (gguf_vocabulary.h), and tensors named token_embd, output_norm,
// output (absent when tied) and blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
// ffn_gate, ffn_down, ffn_up}.weight, plus blk.N.attn_{q,k,v}.bias (qwen2) and
// blk.N.attn_{q,k}_norm.weight (qwen3). Q/K rows use the family's GGUF RoPE pairing (adjacent
// for llama, split-half for qwen2/qwen3, as llama.cpp's converter leaves them). Loaded weights are
// memory-mapped, not copied, and keep the file's dtypes (F32, F16, BF16 or ggml's block formats).
// Functions are thread-compatible: no shared state.
#ifndef PDSERVE_CORE_FORMATS_GGUF_MODEL_H_
#define PDSERVE_CORE_FORMATS_GGUF_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/model_weights.h"
#include "core/tensor/dtype.h"
#include "core/tokenizer/vocabulary.h"

namespace pdserve {

struct GgufModel {
  ModelWeights weights;  // config.rope_pairing is the family's gguf_rope_pairing
  Vocabulary vocabulary;
};

// Loads a GGUF of a supported architecture. NotFound when the file is missing; InvalidArgument
// naming `path` for a malformed file (see GgufFile::Open), another architecture or tokenizer model,
// a missing or ill-typed required key (named), a tensor that is missing, unexpected or of the wrong
// shape (named), or a vocabulary whose size disagrees with token_embd.weight. Optional keys default
// as in llama.cpp: rms epsilon 1e-5, rope base 10000, kv heads = heads, special ids 1/2/0.
absl::StatusOr<GgufModel> LoadGgufModel(const std::string& path);

// Writes a llama.cpp-loadable GGUF v3 of the family's architecture (Mistral as "llama", as
// llama.cpp converts it): matrices (embedding and classifier included) in `dtype`, norms and
// biases always F32, q/k rows in the family's GGUF pairing. general.name is
// the file name without extension; Llama 3.1 RoPE scaling goes into rope_freqs.weight, as
// llama.cpp stores it. InvalidArgument when `weights` or `vocab` fail validation or their
// vocabulary sizes differ; Internal on I/O errors.
absl::Status WriteGgufModel(const std::string& path, const ModelWeights& weights,
                            const Vocabulary& vocab, DType dtype);

// WriteGgufModel for weights whose matrices already have the types to store, each its own (f32,
// f16, bf16 or ggml blocks, e.g. from QuantizeWeights; norms are written as given), with
// general.file_type = `file_type` (a llama_ftype). Errors as WriteGgufModel's.
absl::Status WriteTypedGgufModel(const std::string& path, const ModelWeights& weights,
                                 const Vocabulary& vocab, uint32_t file_type);

}  // namespace pdserve

#endif  // PDSERVE_CORE_FORMATS_GGUF_MODEL_H_
