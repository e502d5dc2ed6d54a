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

absl::StatusOr<std::span<const float>> Prefill(Engine& engine, int sequence,
                                               std::span<const int32_t> tokens) {
  std::span<const float> logits;
  const size_t chunk_size = engine.options().max_batch_tokens;
  for (size_t begin = 0; begin < tokens.size(); begin += chunk_size) {
    ForwardChunk chunk{sequence,
                       tokens.subspan(begin, std::min(chunk_size, tokens.size() - begin))};
    chunk.retain = begin + chunk_size >= tokens.size();  // the prompt's last chunk
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
