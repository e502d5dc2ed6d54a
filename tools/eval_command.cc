// pdserve eval: perplexity with llama.cpp's llama-perplexity protocol. The whole text is tokenized
// once (BOS first); it is cut into floor(n / ctx) chunks of ctx tokens, each chunk's first token is
// replaced by BOS, and the negative log-likelihood of tokens ctx/2+1 .. ctx-1 of each chunk (each
// predicted from all tokens before it in the chunk) is averaged. Last stdout line: JSON.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/cli_flags.h"
#include "tools/commands.h"

namespace pdserve::cli {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read --text file '", path, "'"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// −log softmax(logits)[target], in double.
double NegativeLogLikelihood(std::span<const float> logits, int target) {
  double max_logit = logits[0];
  for (float l : logits) max_logit = std::max<double>(max_logit, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(l - max_logit);
  return std::log(sum) + max_logit - logits[target];
}

}  // namespace

absl::Status RunEval() {
  const int ctx = absl::GetFlag(FLAGS_ctx);
  PDSERVE_ASSIGN_OR_RETURN(EngineOptions options, EngineOptionsFromFlags());
  PDSERVE_ASSIGN_OR_RETURN(std::string text, ReadFile(absl::GetFlag(FLAGS_text)));
  PDSERVE_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFromFlags());
  if (ctx < 4 || ctx > model.weights.config.max_seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ctx ", ctx, " is outside [4, ", model.weights.config.max_seq_len, "]"));
  }
  const std::vector<int> tokens = model.tokenizer->Encode(text, /*add_bos=*/true);
  const int chunks = static_cast<int>(tokens.size() / ctx);
  if (chunks == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the text has ", tokens.size(), " tokens, fewer than one chunk of ", ctx));
  }
  options.max_batch_tokens = ctx;
  options.max_context = ctx;
  PDSERVE_ASSIGN_OR_RETURN(auto engine, LlamaEngine::Create(model.weights, options));
  auto log = GetLogger("eval");
  log->info("{} tokens, {} chunks of {}", tokens.size(), chunks, ctx);

  const int first = ctx / 2;
  const int vocab = model.weights.config.vocab_size;
  double nll = 0;
  int64_t scored = 0;
  auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> chunk(ctx);
  for (int c = 0; c < chunks; ++c) {
    std::copy_n(tokens.begin() + int64_t{c} * ctx, ctx, chunk.begin());
    chunk[0] = model.tokenizer->bos_id();
    PDSERVE_ASSIGN_OR_RETURN(int sequence, engine->AddSequence());
    ForwardChunk forward{sequence, chunk, /*all_logits=*/true};
    absl::StatusOr<std::span<const float>> logits = engine->Forward({&forward, 1});
    PDSERVE_RETURN_IF_ERROR(engine->RemoveSequence(sequence));
    PDSERVE_RETURN_IF_ERROR(logits.status());
    for (int j = first; j < ctx - 1; ++j, ++scored) {
      nll += NegativeLogLikelihood(logits->subspan(int64_t{j} * vocab, vocab), chunk[j + 1]);
    }
    if ((c + 1) % 50 == 0 || c + 1 == chunks) {
      double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      log->info("chunk {}/{}: perplexity so far {:.4f} ({:.0f} tokens/s)", c + 1, chunks,
                std::exp(nll / scored), (c + 1) * static_cast<double>(ctx) / seconds);
    }
  }
  nlohmann::json report = {{"perplexity", std::exp(nll / scored)},
                           {"tokens", scored},
                           {"chunks", chunks},
                           {"ctx", ctx},
                           {"mean_nll", nll / scored}};
  std::printf("%s\n", report.dump().c_str());
  return absl::OkStatus();
}

}  // namespace pdserve::cli
