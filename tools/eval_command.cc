// pdserve eval: perplexity with llama.cpp's llama-perplexity protocol. The whole text is tokenized
// once (BOS first); it is cut into floor(n / ctx) chunks of ctx tokens, each chunk's first token is
// replaced by BOS, and the negative log-likelihood of tokens ctx/2+1 .. ctx-1 of each chunk (each
// predicted from all tokens before it in the chunk) is averaged. Last stdout line: JSON.
//
// With KV techniques (profile flags) or --compare-to-baseline the same tokens are scored the way a
// server produces them: the first half of each chunk is one prefill, then every later token is a
// teacher-forced decode step (so SwiftKV skips layers and KCache selects, as in serving). The
// comparison runs the plain model in lockstep and adds the mean KL divergence of the next-token
// distributions, top-1 agreement, both perplexities, KV bytes per token against the plain fp16
// cache, the share of prompt tokens token retention kept (and so the prompt's KV bytes per token)
// and the prefill FLOPs ratio for a ctx-token prompt.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/compress/flops.h"
#include "core/engine/create_engine.h"
#include "core/engine/sampler.h"
#include "nlohmann/json.hpp"
#include "tools/cli_flags.h"
#include "tools/commands.h"
#include "tools/profile_flags.h"

ABSL_FLAG(bool, compare_to_baseline, false,
          "eval: score against the plain model (KL, top-1 agreement, KV bytes, FLOPs)");

namespace pdserve::cli {
namespace {

// log Σ exp(logits), in double.
double LogSumExp(std::span<const float> logits) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(l - max_logit);
  return std::log(sum) + max_logit;
}

// −log softmax(logits)[target], in double.
double NegativeLogLikelihood(std::span<const float> logits, int target) {
  return LogSumExp(logits) - logits[target];
}

struct Scores {
  double nll = 0.0, nll_baseline = 0.0, kl = 0.0;
  int64_t scored = 0, agree = 0;
};

// Adds one predicted position: KL(baseline ‖ model) and agreement of the argmaxes.
void Compare(std::span<const float> model, std::span<const float> baseline, int target, Scores& s) {
  auto log_softmax = [](std::span<const float> logits, std::vector<double>& out) {
    const double log_z = LogSumExp(logits);
    out.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_z;
  };
  static thread_local std::vector<double> p, q;
  log_softmax(baseline, p);
  log_softmax(model, q);
  double kl = 0.0;
  for (size_t i = 0; i < p.size(); ++i) kl += std::exp(p[i]) * (p[i] - q[i]);
  s.kl += kl;
  s.nll += -q[target];
  s.nll_baseline += -p[target];
  s.agree += ArgMax(model) == ArgMax(baseline);
  ++s.scored;
}

// One chunk the serving way on `engine`: prefill [0, first], then decode tokens first+1 .. ctx-2
// one at a time; calls on_logits(j, logits predicting token j + 1) for j = first .. ctx-2. Adds
// the tokens the prompt's cache kept (token retention) to *prompt_kept when given.
absl::Status DecodeChunk(Engine& engine, std::span<const int32_t> chunk, int first,
                         const std::function<void(int, std::span<const float>)>& on_logits,
                         int64_t* prompt_kept = nullptr) {
  PDSERVE_ASSIGN_OR_RETURN(int sequence, engine.AddSequence());
  absl::Status status;
  for (int j = first; j < static_cast<int>(chunk.size()) - 1 && status.ok(); ++j) {
    ForwardChunk step = j == first ? ForwardChunk{sequence, chunk.subspan(0, first + 1)}
                                   : ForwardChunk{sequence, chunk.subspan(j, 1)};
    step.retain = j == first;  // the prompt (token retention keeps part of it)
    absl::StatusOr<std::span<const float>> logits = engine.Forward({&step, 1});
    status = logits.status();
    if (status.ok()) on_logits(j, *logits);
    if (j == first && prompt_kept != nullptr) *prompt_kept += engine.SequenceLength(sequence);
  }
  PDSERVE_RETURN_IF_ERROR(engine.RemoveSequence(sequence));
  return status;
}

// The serving-protocol evaluation of `prepared` against the plain model; prints the JSON report.
absl::Status CompareToBaseline(const LoadedModel& model, const PreparedModel& prepared,
                               const CompressionProfile& profile, EngineOptions options,
                               const std::vector<int>& tokens, int ctx) {
  ModelWeights plain = model.weights;  // a SwiftKV checkpoint's base model is the baseline
  plain.swiftkv.reset();
  PDSERVE_ASSIGN_OR_RETURN(auto baseline, CreateEngine(plain, options));
  options.compression = prepared.compression;
  PDSERVE_ASSIGN_OR_RETURN(auto engine, CreateEngine(prepared.weights, options));
  const int chunks = static_cast<int>(tokens.size() / ctx), first = ctx / 2;
  const int vocab = model.weights.config.vocab_size;
  auto log = GetLogger("eval");
  log->info("{} tokens, {} chunks of {}; serving protocol against the plain model", tokens.size(),
            chunks, ctx);
  Scores scores;
  std::vector<float> baseline_logits(static_cast<size_t>(ctx) * vocab);
  std::vector<int32_t> chunk(ctx);
  int64_t decode_steps = 0, prompt_kept = 0;
  for (int c = 0; c < chunks; ++c) {
    std::copy_n(tokens.begin() + int64_t{c} * ctx, ctx, chunk.begin());
    if (model.tokenizer->add_bos()) chunk[0] = model.tokenizer->bos_id();  // as llama-perplexity
    PDSERVE_RETURN_IF_ERROR(DecodeChunk(*baseline, chunk, first, [&](int j, auto logits) {
      std::copy(logits.begin(), logits.end(), baseline_logits.begin() + int64_t{j} * vocab);
    }));
    PDSERVE_RETURN_IF_ERROR(DecodeChunk(
        *engine, chunk, first,
        [&](int j, auto logits) {
          Compare(logits, {baseline_logits.data() + int64_t{j} * vocab, static_cast<size_t>(vocab)},
                  chunk[j + 1], scores);
        },
        &prompt_kept));
    decode_steps += ctx - 2 - first;
    if ((c + 1) % 50 == 0 || c + 1 == chunks) {
      log->info("chunk {}/{}: KL {:.5f}, top-1 agreement {:.4f}", c + 1, chunks,
                scores.kl / scores.scored, static_cast<double>(scores.agree) / scores.scored);
    }
  }
  const double flops = PrefillFlops(model.weights.config, engine->plan(), ctx);
  const double flops_baseline = PrefillFlops(model.weights.config, baseline->plan(), ctx);
  // Token retention keeps this share of each prompt's tokens in the cache.
  const double kept = static_cast<double>(prompt_kept) / (int64_t{chunks} * (first + 1));
  nlohmann::json report = {
      {"profile", profile.Describe()},
      {"kl_mean", scores.kl / scores.scored},
      {"top1_agreement", static_cast<double>(scores.agree) / scores.scored},
      {"perplexity", std::exp(scores.nll / scores.scored)},
      {"perplexity_baseline", std::exp(scores.nll_baseline / scores.scored)},
      {"kv_bytes_per_token", engine->plan().kv_bytes_per_token()},
      {"kv_bytes_per_token_baseline_fp16", Fp16KvBytesPerToken(model.weights.config)},
      {"prompt_tokens_kept", kept},
      {"kv_bytes_per_prompt_token", engine->plan().kv_bytes_per_token() * kept},
      {"prefill_flops_ratio", flops / flops_baseline},
      {"kv_fetched_bytes_per_decode_step",
       decode_steps > 0 ? static_cast<double>(engine->kv_bytes_fetched()) / decode_steps : 0.0},
      {"tokens", scores.scored},
      {"chunks", chunks},
      {"ctx", ctx}};
  std::printf("%s\n", report.dump().c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status RunEval() {
  const int ctx = absl::GetFlag(FLAGS_ctx);
  PDSERVE_ASSIGN_OR_RETURN(EngineOptions options, EngineOptionsFromFlags());
  PDSERVE_ASSIGN_OR_RETURN(CompressionProfile profile, ProfileFromFlags());
  PDSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(absl::GetFlag(FLAGS_text)));
  PDSERVE_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFromFlags());
  ApplyAutoWeights(model.weights, options);
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
  PDSERVE_ASSIGN_OR_RETURN(PreparedModel prepared, PrepareModelFromFlags(model.weights, profile));
  if (absl::GetFlag(FLAGS_compare_to_baseline) || profile.Describe() != "plain") {
    return CompareToBaseline(model, prepared, profile, options, tokens, ctx);
  }
  PDSERVE_ASSIGN_OR_RETURN(auto engine, CreateEngine(model.weights, options));
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
    if (model.tokenizer->add_bos()) chunk[0] = model.tokenizer->bos_id();  // as llama-perplexity
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
