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

// "stories260K", "stories15M", "stories42M", "stories110M" (vocab 32000 except 260K's 512) and
// "llama3.2-1B" (dim 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256, rope base
// 500000, context 4096); InvalidArgument lists the known names otherwise.
absl::StatusOr<ModelConfig> ShapeByName(const std::string& name);

// f32 weights drawn uniformly from ±1/√fan_in (norms ≈ 1), identical for equal (config, seed).
// Requires config.Validate().ok().
ModelWeights MakeRandomModel(const ModelConfig& config, uint64_t seed);

// <unk>, <s>, </s>, the 256 byte tokens, then distinct printable pieces up to `size` tokens
// (size ≥ 259), with decreasing scores.
Vocabulary SyntheticVocabulary(int size);

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_RANDOM_MODEL_H_
