#include "core/engine/generator.h"

#include <algorithm>
#include <chrono>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace pdserve {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<int> PromptChunkSizes(const Engine& engine, int n) {
  const int limit = engine.options().max_batch_tokens;
  const RetentionOptions& retention = engine.options().compression.retention;
  std::vector<int> sizes(n / limit, limit);
  if (n % limit != 0) sizes.push_back(n % limit);
  const int last = std::min({retention.retains_prompts() ? retention.window : 1, n, limit});
  if (sizes.size() > 1 && sizes.back() < last) {
    sizes[sizes.size() - 2] -= last - sizes.back();
    sizes.back() = last;
  }
  return sizes;
}

absl::StatusOr<std::span<const float>> Prefill(Engine& engine, int sequence,
                                               std::span<const int32_t> tokens) {
  std::span<const float> logits;
  const std::vector<int> sizes = PromptChunkSizes(engine, static_cast<int>(tokens.size()));
  for (size_t c = 0, begin = 0; c < sizes.size(); begin += sizes[c], ++c) {
    ForwardChunk chunk{sequence, tokens.subspan(begin, sizes[c])};
    chunk.retain = c + 1 == sizes.size();  // the prompt's last chunk
    PDSERVE_ASSIGN_OR_RETURN(logits, engine.Forward({&chunk, 1}));
  }
  return logits;
}

absl::StatusOr<GenerationResult> Generate(Engine& engine, std::span<const int32_t> prompt,
                                          const GenerationParams& params,
                                          const std::function<void(int32_t)>& on_token) {
  PDSERVE_RETURN_IF_ERROR(params.sampling.Validate());
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
  if (params.max_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max tokens ", params.max_tokens, " < 1"));
  }
  if (static_cast<int64_t>(prompt.size()) + params.max_tokens > engine.max_context()) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt (", prompt.size(), " tokens) + max tokens (", params.max_tokens,
                     ") exceed the context of ", engine.max_context(), " tokens"));
  }
  PDSERVE_ASSIGN_OR_RETURN(int sequence, engine.AddSequence());
  absl::Cleanup release = [&] { (void)engine.RemoveSequence(sequence); };

  GenerationResult result;
  Sampler sampler(params.sampling);
  auto start = std::chrono::steady_clock::now();
  PDSERVE_ASSIGN_OR_RETURN(std::span<const float> logits, Prefill(engine, sequence, prompt));
  result.prefill_seconds = SecondsSince(start);
  start = std::chrono::steady_clock::now();
  while (true) {
    const int32_t token = sampler.Sample(logits);
    result.tokens.push_back(token);
    on_token(token);
    const bool stop =
        std::find(params.stop_ids.begin(), params.stop_ids.end(), token) != params.stop_ids.end();
    if (stop || static_cast<int>(result.tokens.size()) >= params.max_tokens) {
      break;
    }
    ForwardChunk chunk{sequence, {&result.tokens.back(), 1}};
    PDSERVE_ASSIGN_OR_RETURN(logits, engine.Forward({&chunk, 1}));
  }
  result.decode_seconds = SecondsSince(start);
  return result;
}

}  // namespace pdserve
