// pdserve generate: prints the prompt, then the generated text as tokens arrive (stdout), and the
// speed (stderr).
#include <cstdio>

#include "absl/flags/flag.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/engine/create_engine.h"
#include "core/engine/generator.h"
#include "core/tokenizer/text_stream.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"
#include "tools/profile_flags.h"

namespace pdserve::cli {
namespace {

void Print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

absl::Status RunGenerate() {
  PDSERVE_ASSIGN_OR_RETURN(EngineOptions options, EngineOptionsFromFlags());
  PDSERVE_ASSIGN_OR_RETURN(CompressionProfile profile, ProfileFromFlags());
  GenerationParams params;
  params.sampling.temperature = absl::GetFlag(FLAGS_temperature);
  params.sampling.top_p = absl::GetFlag(FLAGS_top_p);
  params.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  params.sampling.seed = absl::GetFlag(FLAGS_seed);
  params.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  PDSERVE_RETURN_IF_ERROR(params.sampling.Validate());
  PDSERVE_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFromFlags());
  ApplyAutoWeights(model.weights, options);
  const Tokenizer& tokenizer = *model.tokenizer;
  const std::vector<int> ids = tokenizer.Encode(absl::GetFlag(FLAGS_prompt), /*add_bos=*/true);
  const std::vector<int32_t> prompt(ids.begin(), ids.end());

  params.stop_ids = tokenizer.end_of_generation_ids();
  // Context for this request only (Generate reports a request beyond the model's own limit).
  const int64_t wanted = static_cast<int64_t>(prompt.size()) + std::max(params.max_tokens, 1);
  options.max_context =
      static_cast<int>(std::min<int64_t>(model.weights.config.max_seq_len, wanted));
  options.max_batch_tokens = std::min(512, options.max_context);
  PDSERVE_ASSIGN_OR_RETURN(PreparedModel prepared, PrepareModelFromFlags(model.weights, profile));
  options.compression = prepared.compression;
  PDSERVE_ASSIGN_OR_RETURN(auto engine, CreateEngine(prepared.weights, options));

  // The prompt is echoed with the first generated token, so that a request that fails
  // validation prints nothing on stdout.
  TextStream stream(tokenizer, -1);
  bool echoed = false;
  auto on_token = [&](int32_t id) {
    if (!echoed) {
      for (int32_t prompt_id : prompt) Print(stream.Push(prompt_id));
      echoed = true;
    }
    Print(stream.Push(id));
  };
  PDSERVE_ASSIGN_OR_RETURN(GenerationResult result, Generate(*engine, prompt, params, on_token));
  Print(stream.Flush() + "\n");
  GetLogger("cli")->info(
      "prompt {} tokens in {:.1f} ms ({:.1f} tok/s); generated {} tokens in {:.1f} ms "
      "({:.1f} tok/s)",
      prompt.size(), result.prefill_seconds * 1e3, prompt.size() / result.prefill_seconds,
      result.tokens.size(), result.decode_seconds * 1e3,
      result.tokens.size() > 1 ? (result.tokens.size() - 1) / result.decode_seconds : 0.0);
  return absl::OkStatus();
}

}  // namespace pdserve::cli
