// Deterministic random-weight models for tests and benchmarks: the named llama2.c TinyStories
// shapes, seeded weights, and a synthetic SentencePiece-style vocabulary of any size.
#ifndef PDSERVE_CORE_MODEL_RANDOM_MODEL_H_
#define PDSERVE_CORE_MODEL_RANDOM_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/model_weights.h"
#include "core/tokenizer/vocabulary.h"

namespace pdserve {

// "stories260K", "stories15M", "stories42M", "stories110M" (vocab 32000 except 260K's 512),
// "llama3.2-1B" (dim 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256, rope base
// 500000, context 4096), "qwen2.5-0.5B" (Qwen2: dim 896, 24 layers, 14 heads, 2 KV heads, FFN
// 4864, vocab 151936, rope base 1e6, context 4096), "qwen3-1.7B" (Qwen3: dim 2048, 28 layers,
// 16 heads, 8 KV heads, FFN 6144, vocab 151936, rope base 1e6, context 4096) and "qwen3-0.6B"
// (Qwen3: dim 1024, 28 layers, 16 heads of 128, 8 KV heads, FFN 3072, as 1.7B otherwise);
// InvalidArgument lists the known names otherwise.
absl::StatusOr<ModelConfig> ShapeByName(const std::string& name);

// f32 weights drawn uniformly from ±1/√fan_in (norms ≈ 1; the family's biases ±0.5, head norms
// 1 ± 0.5), identical for equal (config, seed).
// Requires config.Validate().ok().
ModelWeights MakeRandomModel(const ModelConfig& config, uint64_t seed);

// <unk>, <s>, </s>, the 256 byte tokens, then distinct printable pieces up to `size` tokens
// (size ≥ 259), with decreasing scores.
Vocabulary SyntheticVocabulary(int size);

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_RANDOM_MODEL_H_
