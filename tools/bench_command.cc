// pdserve bench: prefill and decode throughput of the engine, llama-bench style. Prefill runs one
// prompt of --prompt-tokens random tokens as a single batch (pp); decode generates --gen-tokens
// tokens one at a time (tg) for --batch sequences together, each holding --decode-context tokens
// first (untimed: one prefill, copied into every other sequence's own pages on the CPU engine), one
// Forward over every sequence per step as the decode worker's continuous batching runs it. One
// warm-up, then --repetitions timed runs; medians reported, with the bytes one decode step reads
// (weights, K and V apart) and the bandwidth they come to. Last stdout line: JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/compress/flops.h"
#include "core/engine/create_engine.h"
#include "core/engine/generator.h"
#include "core/engine/kv_transfer.h"
#include "core/engine/sampler.h"
#include "core/formats/model_loader.h"
#include "kernels/cpu_features.h"
#include "nlohmann/json.hpp"
#include "tools/cli_flags.h"
#include "tools/commands.h"
#include "tools/profile_flags.h"

ABSL_FLAG(int, decode_context, 0,
          "bench: tokens prefilled (untimed) before the timed decode steps");
ABSL_FLAG(int, batch, 1, "bench: sequences decoding together, each after --decode-context tokens");

namespace pdserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::StatusOr<double> TimePrefill(Engine& engine, std::span<const int32_t> prompt) {
  PDSERVE_ASSIGN_OR_RETURN(int sequence, engine.AddSequence());
  auto start = Clock::now();
  absl::StatusOr<std::span<const float>> logits = Prefill(engine, sequence, prompt);
  double seconds = Seconds(start);
  PDSERVE_RETURN_IF_ERROR(engine.RemoveSequence(sequence));
  PDSERVE_RETURN_IF_ERROR(logits.status());
  return seconds;
}

// A sequence holding `context` (empty or not), untimed: the first prefilled, the rest copies of
// the first (CopySequence: the same cache, one prefill for the whole batch) where CheckCopyable
// allows, else prefilled too.
absl::StatusOr<int> ContextSequence(Engine& engine, std::span<const int32_t> context,
                                    const std::vector<int>& earlier) {
  if (!earlier.empty() && !context.empty() && CheckCopyable(engine, earlier.front()).ok()) {
    return CopySequence(engine, earlier.front());
  }
  PDSERVE_ASSIGN_OR_RETURN(const int sequence, engine.AddSequence());
  if (context.empty()) return sequence;
  absl::StatusOr<std::span<const float>> logits = Prefill(engine, sequence, context);
  if (!logits.ok()) {
    (void)engine.RemoveSequence(sequence);
    return logits.status();
  }
  return sequence;
}

// Decodes `tokens` greedy steps of `batch` sequences together, one Forward over all of them per
// step, each sequence holding `context` first (ContextSequence, untimed).
absl::StatusOr<double> TimeDecode(Engine& engine, std::span<const int32_t> context, int tokens,
                                  int32_t first, int batch) {
  std::vector<int> sequences;
  auto remove_all = [&] {
    for (int s : sequences) (void)engine.RemoveSequence(s);
  };
  for (int b = 0; b < batch; ++b) {
    absl::StatusOr<int> sequence = ContextSequence(engine, context, sequences);
    if (!sequence.ok()) {
      remove_all();
      return sequence.status();
    }
    sequences.push_back(*sequence);
  }
  const int vocab = engine.config().vocab_size;
  std::vector<int32_t> next(batch, first);
  std::vector<ForwardChunk> chunks(batch);
  auto start = Clock::now();
  for (int i = 0; i < tokens; ++i) {
    for (int b = 0; b < batch; ++b) chunks[b] = ForwardChunk{sequences[b], {&next[b], 1}};
    absl::StatusOr<std::span<const float>> logits = engine.Forward(chunks);
    if (!logits.ok()) {
      remove_all();
      return logits.status();
    }
    for (int b = 0; b < batch; ++b) next[b] = ArgMax(logits->subspan(size_t(b) * vocab, vocab));
  }
  double seconds = Seconds(start);
  remove_all();
  return seconds;
}

// K and V bytes one decode step reads for one sequence at `context` tokens: each layer reads its
// cache layer's K over the whole context, and its V too, except where KCache selects the sink,
// the recent window and the top-N tokens (V of the rest stays unread in the value tier).
struct StepKvBytes {
  double k = 0, v = 0;
};
StepKvBytes DecodeKvBytes(const KvPlan& plan, const KCacheOptions& kcache, int context) {
  StepKvBytes bytes;
  for (const LayerPlan& layer : plan.layers) {
    const CachePlan& cache = plan.caches[static_cast<size_t>(layer.cache)];
    const KvLayerLayout& l = cache.layout;
    const double k_per_token = static_cast<double>(l.k.bytes()) / l.k.page_size();
    const double v_per_token = static_cast<double>(l.v.bytes()) / l.v.page_size();
    const int v_tokens =
        cache.kcache ? std::min(context, kcache.sink + kcache.recent + kcache.top_n) : context;
    bytes.k += k_per_token * context;
    bytes.v += v_per_token * v_tokens;
  }
  return bytes;
}

// Weight bytes one decode step streams, with plain matrices run as `dtype` and quantized ones
// as stored (WeightFormat).
double DecodeWeightBytes(const ModelWeights& w, DType dtype) {
  double bytes = 0.0;
  for (const Tensor* t : StreamedMatrices(w)) {
    bytes += IsQuantized(t->dtype) ? static_cast<double>(t->NumBytes())
                                   : static_cast<double>(t->NumElements()) * DTypeSize(dtype);
  }
  return bytes;
}

}  // namespace

absl::Status RunBench() {
  const int prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  const int gen_tokens = absl::GetFlag(FLAGS_gen_tokens);
  const int repetitions = absl::GetFlag(FLAGS_repetitions);
  if (prompt_tokens < 1 || gen_tokens < 1 || repetitions < 1) {
    return absl::InvalidArgumentError(
        "--prompt-tokens, --gen-tokens and --repetitions must be ≥ 1");
  }
  PDSERVE_ASSIGN_OR_RETURN(EngineOptions options, EngineOptionsFromFlags());
  PDSERVE_ASSIGN_OR_RETURN(CompressionProfile profile, ProfileFromFlags());
  const std::string path = absl::GetFlag(FLAGS_model);
  if (path.empty()) return absl::InvalidArgumentError("--model is required");
  PDSERVE_ASSIGN_OR_RETURN(ModelWeights weights, LoadModelWeights(path));
  ApplyAutoWeights(weights, options);
  const ModelConfig& c = weights.config;
  const int decode_context = absl::GetFlag(FLAGS_decode_context);
  if (decode_context < 0 || decode_context > prompt_tokens) {
    return absl::InvalidArgumentError("--decode-context must be in [0, --prompt-tokens]");
  }
  const int batch = absl::GetFlag(FLAGS_batch);
  if (batch < 1 || batch > 4096) return absl::InvalidArgumentError("--batch must be in [1, 4096]");
  options.max_batch_tokens = std::max(prompt_tokens, batch);
  options.max_sequences = std::max(options.max_sequences, batch + 1);
  options.max_context = std::max(prompt_tokens, decode_context + gen_tokens + 1);
  PDSERVE_ASSIGN_OR_RETURN(PreparedModel prepared, PrepareModelFromFlags(weights, profile));
  options.compression = prepared.compression;
  PDSERVE_ASSIGN_OR_RETURN(auto engine, CreateEngine(prepared.weights, options));
  auto log = GetLogger("bench");
  const std::string weights_label = WeightsLabel(prepared.weights, options.weight_dtype);
  log->info("{}: {}", c.Describe(), DescribeEngine(prepared.weights, *engine));

  // Prompt ids cycle through the vocabulary past the usual unk/bos/eos.
  const int64_t first_id = c.vocab_size > 3 ? 3 : 0;
  std::vector<int32_t> prompt(prompt_tokens);
  for (int64_t i = 0; i < prompt_tokens; ++i) {
    prompt[i] = static_cast<int32_t>(first_id + (i * 7919) % (c.vocab_size - first_id));
  }
  std::vector<double> prefill, decode;
  for (int rep = 0; rep <= repetitions; ++rep) {
    PDSERVE_ASSIGN_OR_RETURN(double p, TimePrefill(*engine, prompt));
    PDSERVE_ASSIGN_OR_RETURN(double d, TimeDecode(*engine, std::span(prompt).first(decode_context),
                                                  gen_tokens, prompt[0], batch));
    log->info("{} {}: pp{} {:.1f} tok/s, tg{} x{} {:.1f} tok/s", rep == 0 ? "warm-up" : "run", rep,
              prompt_tokens, prompt_tokens / p, gen_tokens, batch, double(gen_tokens) * batch / d);
    if (rep == 0) continue;
    prefill.push_back(prompt_tokens / p);
    decode.push_back(double(gen_tokens) * batch / d);
  }
  const double pp = Median(prefill), tg = Median(decode);
  // Bytes of one step at the middle of the timed decode (context + gen_tokens / 2 per sequence).
  const double weight_bytes = DecodeWeightBytes(prepared.weights, options.weight_dtype);
  const StepKvBytes kv =
      DecodeKvBytes(engine->plan(), options.compression.kcache, decode_context + gen_tokens / 2);
  const double steps_per_s = tg / batch;
  nlohmann::json report = {
      {"model", path},
      {"threads", engine->options().num_threads},
      {"weights", weights_label},
      {"simd", kernels::SimdLevelName(kernels::ActiveSimdLevel())},
      {"bf16_dot", kernels::Bf16DotActive()},
      {"amx", kernels::AmxActive()},  // prompts of bf16 (with bf16_dot) and quantized weights
      {"prompt_tokens", prompt_tokens},
      {"gen_tokens", gen_tokens},
      {"decode_context", decode_context},
      {"batch", batch},
      {"kv_profile", profile.Describe()},
      {"repetitions", repetitions},
      {"prefill_tokens_per_s", pp},
      {"decode_tokens_per_s", tg},
      {"decode_step_ms", 1e3 / steps_per_s},
      {"decode_step_bytes", {{"weights", weight_bytes}, {"k", kv.k * batch}, {"v", kv.v * batch}}},
      {"decode_gb_per_s", (weight_bytes + (kv.k + kv.v) * batch) * steps_per_s / 1e9},
      {"prefill_gflops", PrefillFlops(c, engine->plan(), prompt_tokens) * pp / prompt_tokens / 1e9},
      {"decode_weight_gb_per_s", weight_bytes * steps_per_s / 1e9}};
  std::printf("%s\n", report.dump().c_str());
  return absl::OkStatus();
}

}  // namespace pdserve::cli
