// LlamaEngine against LlamaReference (the specification) and against itself under batching,
// chunking and every weight format.
#include "core/engine/llama_engine.h"

#include <cmath>
#include <filesystem>
#include <thread>

#include "core/engine/llama_reference.h"
#include "core/engine/logits_testing.h"
#include "core/formats/model_loader.h"
#include "core/formats/model_writer.h"
#include "core/model/random_model.h"
#include "gtest/gtest.h"
#include "kernels/cpu_features.h"
#include "tests/support/scratch_dir.h"

namespace pdserve {
namespace {

namespace fs = std::filesystem;

const std::string kShared = PDSERVE_SHARED_DIR;

ModelWeights Stories260K() {
  auto model = LoadModel(kShared + "/models/stories260K/stories260K.bin",
                         kShared + "/models/stories260K/tok512.bin");
  EXPECT_TRUE(model.ok()) << model.status();
  return model->weights;
}

ModelConfig SmallGqaConfig() {
  ModelConfig c;
  c.dim = 48;
  c.hidden_dim = 100;
  c.n_layers = 3;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.vocab_size = 300;
  c.max_seq_len = 96;
  c.tied_embeddings = false;
  return c;
}

std::vector<int32_t> Tokens(int n, int vocab, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 3 + (i * 37 + salt * 101) % (vocab - 3);
  return t;
}

std::unique_ptr<LlamaEngine> MakeEngine(const ModelWeights& w, int threads, DType dtype,
                                        int max_batch = 512, int sequences = 4) {
  EngineOptions o;
  o.num_threads = threads;
  o.weight_dtype = dtype;
  o.max_batch_tokens = max_batch;
  o.max_sequences = sequences;
  auto engine = LlamaEngine::Create(w, o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(*engine);
}

// All-position logits of `tokens` run as one prefill.
std::vector<float> PrefillLogits(LlamaEngine& engine, std::span<const int32_t> tokens) {
  int seq = *engine.AddSequence();
  ForwardChunk chunk{seq, tokens, true};
  auto logits = engine.Forward({&chunk, 1});
  EXPECT_TRUE(logits.ok()) << logits.status();
  std::vector<float> out(logits->begin(), logits->end());
  EXPECT_TRUE(engine.RemoveSequence(seq).ok());
  return out;
}

std::vector<float> ReferenceLogits(const ModelWeights& w, std::span<const int32_t> tokens) {
  LlamaReference reference(w);
  std::vector<float> out;
  for (int32_t t : tokens) {
    std::vector<float> logits = reference.Forward(t);
    out.insert(out.end(), logits.begin(), logits.end());
  }
  return out;
}

TEST(LlamaEngineTest, MatchesReferenceOnStories260K) {
  ModelWeights w = Stories260K();
  auto tokens = Tokens(40, w.config.vocab_size);
  std::vector<float> expected = ReferenceLogits(w, tokens);
  for (int threads : {1, 2, 3}) {
    auto engine = MakeEngine(w, threads, DType::kF32);
    EXPECT_LT(MaxRelativeError(PrefillLogits(*engine, tokens), expected), 1e-5) << threads;
  }
}

// Llama 3.1 RoPE scaling reaches both the engine's table and the reference, identically: a context
// past original_max_positions puts some frequencies in each band, and the logits move off the
// unscaled model's.
TEST(LlamaEngineTest, ScaledRopeMatchesReference) {
  ModelConfig c = SmallGqaConfig();
  c.max_seq_len = 64;
  c.rope_scaling = {.factor = 4.0f,
                    .low_freq_factor = 1.0f,
                    .high_freq_factor = 4.0f,
                    .original_max_positions = 16};
  ASSERT_TRUE(c.Validate().ok());
  ModelWeights scaled = MakeRandomModel(c, 13);
  auto tokens = Tokens(c.max_seq_len, c.vocab_size);
  std::vector<float> expected = ReferenceLogits(scaled, tokens);
  for (int threads : {1, 2}) {
    auto engine = MakeEngine(scaled, threads, DType::kF32);
    EXPECT_LT(MaxRelativeError(PrefillLogits(*engine, tokens), expected), 1e-5) << threads;
  }
  // The same weights in split-half pairing (as Hugging Face stores them) rotate alike.
  ModelWeights split = WithRopePairing(scaled, RopePairing::kSplitHalf);
  EXPECT_LT(MaxRelativeError(PrefillLogits(*MakeEngine(split, 2, DType::kF32), tokens), expected),
            1e-5);
  // And the scaling matters: without it the later positions' logits differ.
  ModelWeights plain = scaled;
  plain.config.rope_scaling = {};
  std::vector<float> unscaled = ReferenceLogits(plain, tokens);
  EXPECT_GT(MaxRelativeError(unscaled, expected), 1e-3);
}

// Hugging Face config.json holds the scaling as the rule, GGUF as llama.cpp's per-pair divisors;
// llama2.c refuses rather than drop it; both copies run like the original.
TEST(LlamaEngineTest, ScaledRopeIsWrittenAsHuggingFaceAndGguf) {
  ModelConfig c = SmallGqaConfig();
  c.rope_scaling = {.factor = 4.0f,
                    .low_freq_factor = 1.0f,
                    .high_freq_factor = 4.0f,
                    .original_max_positions = 16};
  ModelWeights w = MakeRandomModel(c, 17);
  const ScratchDir scratch("llama_engine_test_scaled");
  const fs::path& dir = scratch.path();
  const Vocabulary vocab = SyntheticVocabulary(c.vocab_size);
  absl::Status s = WriteModel((dir / "m").string(), w, vocab, {ModelFormat::kLlama2c});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("RoPE scaling"), std::string::npos) << s;
  ASSERT_TRUE(WriteModel((dir / "hf").string(), w, vocab, {ModelFormat::kHuggingFace}).ok());
  ASSERT_TRUE(WriteModel((dir / "m.gguf").string(), w, vocab, {ModelFormat::kGguf}).ok());
  auto tokens = Tokens(40, c.vocab_size);
  const std::vector<float> want = PrefillLogits(*MakeEngine(w, 2, DType::kF32), tokens);
  for (const char* name : {"hf", "m.gguf"}) {
    auto loaded = LoadModel((dir / name).string());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE(loaded->weights.config.rope_scaling.enabled()) << name;
    EXPECT_LT(
        MaxRelativeError(PrefillLogits(*MakeEngine(loaded->weights, 2, DType::kF32), tokens), want),
        1e-5)
        << name;
  }
}

TEST(LlamaEngineTest, SixteenBitWeightsMatchReferenceOnTheSameRoundedWeights) {
  ModelWeights w = MakeRandomModel(SmallGqaConfig(), 3);
  auto tokens = Tokens(20, w.config.vocab_size);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<float> expected = ReferenceLogits(ConvertWeights(w, dtype), tokens);
    auto engine = MakeEngine(w, 2, dtype);
    EXPECT_LT(MaxRelativeError(PrefillLogits(*engine, tokens), expected), 1e-5) << DTypeName(dtype);
    // And close to the f32 model within the dtype's rounding.
    double tolerance = dtype == DType::kF16 ? 1e-2 : 5e-2;
    EXPECT_LT(MaxRelativeError(PrefillLogits(*engine, tokens), ReferenceLogits(w, tokens)),
              tolerance);
  }
}

// A prompt long enough for the GEMM's bf16 dot product (kernels/cpu_features.h: Bf16DotActive, on
// AMD Zen 4/5; elsewhere the same prompt takes the exact path): activations rounded to bf16 keep
// the logits within bf16's rounding of the reference on the same weights and of the f32 model.
TEST(LlamaEngineTest, LongBf16PrefillStaysWithinBf16Rounding) {
  ModelWeights w = MakeRandomModel(SmallGqaConfig(), 4);
  auto tokens = Tokens(90, w.config.vocab_size);
  auto engine = MakeEngine(w, 2, DType::kBF16);
  const std::vector<float> got = PrefillLogits(*engine, tokens);
  const double same_weights = kernels::Bf16DotActive() ? 1e-2 : 1e-5;
  EXPECT_LT(MaxRelativeError(got, ReferenceLogits(ConvertWeights(w, DType::kBF16), tokens)),
            same_weights);
  EXPECT_LT(MaxRelativeError(got, ReferenceLogits(w, tokens)), 5e-2);
}

TEST(LlamaEngineTest, PrefillThenDecodeEqualsOneShotPrefill) {
  ModelWeights w = MakeRandomModel(SmallGqaConfig(), 5);
  auto engine = MakeEngine(w, 2, DType::kF32);
  auto tokens = Tokens(30, w.config.vocab_size);
  std::vector<float> one_shot = PrefillLogits(*engine, tokens);
  const int vocab = w.config.vocab_size;
  // Chunks of 7 (prefill chunks of several tokens) then one-token decode steps (n + m).
  int seq = *engine->AddSequence();
  std::vector<float> stepwise;
  for (size_t begin = 0; begin < tokens.size();) {
    size_t n = begin < 21 ? 7 : 1;
    ForwardChunk chunk{seq, std::span(tokens).subspan(begin, n), true};
    auto logits = engine->Forward({&chunk, 1});
    ASSERT_TRUE(logits.ok()) << logits.status();
    stepwise.insert(stepwise.end(), logits->begin(), logits->end());
    begin += n;
  }
  ASSERT_EQ(stepwise.size(), one_shot.size());
  EXPECT_LT(MaxRelativeError(stepwise, one_shot), 1e-5);
  EXPECT_EQ(engine->SequenceLength(seq), 30);
  EXPECT_EQ(stepwise.size(), 30u * vocab);
}

TEST(LlamaEngineTest, BatchedSequencesEqualSeparateRuns) {
  ModelWeights w = MakeRandomModel(SmallGqaConfig(), 9);
  auto engine = MakeEngine(w, 2, DType::kF32);
  auto a = Tokens(17, w.config.vocab_size, 1), b = Tokens(5, w.config.vocab_size, 2);
  std::vector<float> alone_a = PrefillLogits(*engine, a), alone_b = PrefillLogits(*engine, b);
  int sa = *engine->AddSequence(), sb = *engine->AddSequence();
  ForwardChunk chunks[] = {{sa, a, true}, {sb, b, true}};
  auto logits = engine->Forward(chunks);
  ASSERT_TRUE(logits.ok());
  const size_t split = alone_a.size();
  EXPECT_LT(MaxRelativeError(logits->subspan(0, split), alone_a), 1e-5);
  EXPECT_LT(MaxRelativeError(logits->subspan(split), alone_b), 1e-5);
  // A decode step for both at once (GEMV batch of 2) equals one at a time.
  int32_t next_a = 7, next_b = 8;
  ForwardChunk decode[] = {{sa, {&next_a, 1}}, {sb, {&next_b, 1}}};
  auto batched = engine->Forward(decode);
  ASSERT_TRUE(batched.ok());
  std::vector<float> both(batched->begin(), batched->end());
  std::vector<int32_t> a_plus(a), b_plus(b);
  a_plus.push_back(next_a);
  b_plus.push_back(next_b);
  const int vocab = w.config.vocab_size;
  std::vector<float> ref_a = PrefillLogits(*engine, a_plus), ref_b = PrefillLogits(*engine, b_plus);
  EXPECT_LT(MaxRelativeError(std::span(both).subspan(0, vocab),
                             std::span(ref_a).subspan(ref_a.size() - vocab)),
            1e-5);
  EXPECT_LT(MaxRelativeError(std::span(both).subspan(vocab),
                             std::span(ref_b).subspan(ref_b.size() - vocab)),
            1e-5);
}

// Decode rows past the first 1024 tokens, where decode attention splits a row's tokens into
// chunks and merges them (kernels/cpu/decode_chunks.h; the workspace holds their partials): a
// 9-token chunk whose rows straddle the boundary, then single-token steps batched with a short
// sequence, against the reference token by token.
TEST(LlamaEngineTest, DecodePastOneAttentionChunkMatchesReference) {
  ModelConfig c = SmallGqaConfig();
  c.max_seq_len = 1100;
  ModelWeights w = MakeRandomModel(c, 13);
  auto engine = MakeEngine(w, 2, DType::kF32, 512, 2);
  const std::vector<int32_t> tokens = Tokens(1030, c.vocab_size, 4);
  const std::vector<float> expected = ReferenceLogits(w, tokens);
  const int vocab = c.vocab_size, sa = *engine->AddSequence(), sb = *engine->AddSequence();
  const std::span<const int32_t> all(tokens);
  for (int at = 0; at < 1018; at += 509) {
    ForwardChunk prefill{sa, all.subspan(at, 509)};
    ASSERT_TRUE(engine->Forward({&prefill, 1}).ok());
  }
  ForwardChunk straddle{sa, all.subspan(1018, 9), true};
  auto rows = engine->Forward({&straddle, 1});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_LT(MaxRelativeError(*rows, std::span(expected).subspan(1018 * vocab, 9 * vocab)), 1e-5);
  const int32_t other[] = {5, 6, 7};
  ForwardChunk short_prefill{sb, other};
  ASSERT_TRUE(engine->Forward({&short_prefill, 1}).ok());
  for (int at = 1027; at < 1030; ++at) {
    ForwardChunk step[] = {{sa, all.subspan(at, 1)}, {sb, std::span(other).subspan(0, 1)}};
    auto logits = engine->Forward(step);
    ASSERT_TRUE(logits.ok()) << logits.status();
    EXPECT_LT(MaxRelativeError(logits->subspan(0, vocab),
                               std::span(expected).subspan(int64_t{at} * vocab, vocab)),
              1e-5)
        << "position " << at;
  }
}

TEST(LlamaEngineTest, SameWeightsInEveryFormatGiveTheSameLogits) {
  ModelWeights w = MakeRandomModel(SmallGqaConfig(), 11);
  const ScratchDir scratch("llama_engine_test_formats");
  const fs::path& dir = scratch.path();
  const Vocabulary vocab = SyntheticVocabulary(w.config.vocab_size);
  ASSERT_TRUE(WriteModel((dir / "m.bin").string(), w, vocab, {ModelFormat::kLlama2c}).ok());
  ASSERT_TRUE(WriteModel((dir / "m.gguf").string(), w, vocab, {ModelFormat::kGguf}).ok());
  ASSERT_TRUE(
      WriteModel((dir / "hf").string(), w, vocab, {ModelFormat::kHuggingFace, DType::kF32, 3})
          .ok());
  auto tokens = Tokens(25, w.config.vocab_size);
  auto engine = MakeEngine(w, 2, DType::kF32);
  std::vector<float> expected = PrefillLogits(*engine, tokens);
  for (const std::string name : {"m.bin", "m.gguf", "hf"}) {
    auto loaded = LoadModel((dir / name).string());
    ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.status();
    auto format_engine = MakeEngine(loaded->weights, 2, DType::kF32);
    std::vector<float> got = PrefillLogits(*format_engine, tokens);
    if (name == "hf") {
      // Split-half RoPE on permuted rows: the same math, summed in another order.
      EXPECT_EQ(loaded->weights.config.rope_pairing, RopePairing::kSplitHalf);
      EXPECT_LT(MaxRelativeError(got, expected), 1e-5);
    } else {
      EXPECT_EQ(got, expected) << name;
    }
  }
}

TEST(LlamaEngineTest, RejectsBadBatchesWithoutChangingState) {
  ModelWeights w = MakeRandomModel(SmallGqaConfig(), 1);
  auto engine = MakeEngine(w, 1, DType::kF32, /*max_batch=*/16, /*sequences=*/2);
  int seq = *engine->AddSequence();
  std::vector<int32_t> ok_tokens = Tokens(4, w.config.vocab_size);
  std::vector<int32_t> bad_token = {5, w.config.vocab_size};
  std::vector<int32_t> too_many = Tokens(17, w.config.vocab_size);
  auto code = [&](std::vector<ForwardChunk> chunks) {
    return engine->Forward(chunks).status().code();
  };
  EXPECT_EQ(code({{seq, bad_token}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{seq, too_many}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{seq + 1, ok_tokens}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{seq, {}}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{seq, ok_tokens}, {seq, ok_tokens}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->SequenceLength(seq), 0);
  EXPECT_TRUE(engine->Forward(std::vector<ForwardChunk>{{seq, ok_tokens}}).ok());
  EXPECT_EQ(engine->SequenceLength(seq), 4);
  EXPECT_EQ(engine->AddSequence().status().code(), absl::StatusCode::kOk);
  EXPECT_EQ(engine->AddSequence().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(engine->RemoveSequence(7).code(), absl::StatusCode::kNotFound);
}

// Regression: a batch whose second chunk found no pages kept the pages reserved for the first.
TEST(LlamaEngineTest, FailedReservationGivesBackEveryPage) {
  ModelWeights w = MakeRandomModel(SmallGqaConfig(), 1);
  EngineOptions o;
  o.max_sequences = 2;
  o.kv_page_size = 16;
  o.kv_pages = 2;
  auto engine = *LlamaEngine::Create(w, o);
  int a = *engine->AddSequence(), b = *engine->AddSequence();
  auto t17 = Tokens(17, w.config.vocab_size);
  int32_t one = 5;
  std::vector<ForwardChunk> both = {{a, t17}, {b, {&one, 1}}};
  EXPECT_EQ(engine->Forward(both).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(engine->SequenceLength(a), 0);
  EXPECT_TRUE(engine->Forward(std::vector<ForwardChunk>{{b, {&one, 1}}}).ok());
  EXPECT_TRUE(engine->Forward(std::vector<ForwardChunk>{{a, {&one, 1}}}).ok());
}

TEST(LlamaEngineTest, RefusesBuffersLargerThanMemoryUpFront) {
  EngineOptions o;
  o.max_context = 1 << 28;  // workspaces and KV far beyond any machine here
  auto engine = LlamaEngine::Create(MakeRandomModel(SmallGqaConfig(), 1), o);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(std::string(engine.status().message()).find("GB"), std::string::npos);
}

TEST(LlamaEngineTest, AutomaticThreadsUseOneThreadForTinyModels) {
  EngineOptions o;
  o.num_threads = 0;
  auto tiny = LlamaEngine::Create(Stories260K(), o);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ((*tiny)->options().num_threads, 1);
  ModelConfig wide = SmallGqaConfig();
  wide.dim = 512;
  wide.n_heads = 8;
  wide.n_kv_heads = 8;
  wide.hidden_dim = 1376;
  auto large = LlamaEngine::Create(MakeRandomModel(wide, 1), o);
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ((*large)->options().num_threads, static_cast<int>(std::thread::hardware_concurrency()));
  o.num_threads = -1;
  EXPECT_EQ(LlamaEngine::Create(Stories260K(), o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LlamaEngineTest, ContextLimitAndKvExhaustion) {
  ModelWeights w = MakeRandomModel(SmallGqaConfig(), 1);
  EngineOptions o;
  o.max_context = 20;
  o.max_sequences = 2;
  o.kv_page_size = 4;
  o.kv_pages = 6;  // 24 tokens in all
  auto engine = *LlamaEngine::Create(w, o);
  int a = *engine->AddSequence(), b = *engine->AddSequence();
  auto t20 = Tokens(20, w.config.vocab_size), t8 = Tokens(8, w.config.vocab_size);
  int32_t one = 5;
  ASSERT_TRUE(engine->Forward(std::vector<ForwardChunk>{{a, t20}}).ok());
  EXPECT_EQ(engine->Forward(std::vector<ForwardChunk>{{a, {&one, 1}}}).status().code(),
            absl::StatusCode::kInvalidArgument);  // beyond max_context
  EXPECT_EQ(engine->Forward(std::vector<ForwardChunk>{{b, t8}}).status().code(),
            absl::StatusCode::kResourceExhausted);  // 5 + 2 pages > 6
  EXPECT_EQ(engine->SequenceLength(b), 0);
  ASSERT_TRUE(engine->RemoveSequence(a).ok());
  EXPECT_TRUE(engine->Forward(std::vector<ForwardChunk>{{b, t8}}).ok());
}

}  // namespace
}  // namespace pdserve
