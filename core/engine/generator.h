// Generate: runs one prompt through an Engine and samples tokens until a stop token or
// max_tokens, reporting each token as it is produced. Prefill is chunked by the engine's
// max_batch_tokens. The sequence is released on every exit path.
#ifndef PDSERVE_CORE_ENGINE_GENERATOR_H_
#define PDSERVE_CORE_ENGINE_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/engine/engine.h"
#include "core/engine/sampler.h"

namespace pdserve {

struct GenerationParams {
  SamplingParams sampling;
  int max_tokens = 64;
  std::vector<int32_t> stop_ids;  // stop after any of these tokens (EOS; BOS as llama2.c does)
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated, the stop token included when one ended the run
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Calls on_token(id) after each sampled token. InvalidArgument for an empty prompt, bad sampling
// values, max_tokens < 1, or a prompt + max_tokens beyond the engine's context.
absl::StatusOr<GenerationResult> Generate(Engine& engine, std::span<const int32_t> prompt,
                                          const GenerationParams& params,
                                          const std::function<void(int32_t)>& on_token);

// How a prompt of n ≥ 1 tokens is cut into Forward chunks on `engine`: sizes in order, each at
// most max_batch_tokens. With token retention the last chunk holds at least the observation
// window (or the whole prompt), taken from the chunk before it, since the prompt's last
// retention.window queries score its tokens.
std::vector<int> PromptChunkSizes(const Engine& engine, int n);

// Runs `tokens` into `sequence` in the chunks PromptChunkSizes says, the last marked as the
// prompt's end (ForwardChunk::retain), and returns the logits of the last token (valid until the
// engine's next Forward).
absl::StatusOr<std::span<const float>> Prefill(Engine& engine, int sequence,
                                               std::span<const int32_t> tokens);

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_GENERATOR_H_
