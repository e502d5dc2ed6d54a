// Test-only: the small random model, prompts, calibrations and engines that the KV technique
// tests (techniques_test.cc, retention_test.cc) run.
#ifndef PDSERVE_CORE_COMPRESS_TECHNIQUES_TESTING_H_
#define PDSERVE_CORE_COMPRESS_TECHNIQUES_TESTING_H_

#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/compress/calibrator.h"
#include "core/compress/profile.h"
#include "core/engine/llama_engine.h"
#include "core/model/random_model.h"
#include "gtest/gtest.h"

namespace pdserve::techniques_testing {

inline ModelConfig Config() {
  ModelConfig c;
  c.dim = 48;
  c.hidden_dim = 96;
  c.n_layers = 4;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.vocab_size = 200;
  c.max_seq_len = 128;
  c.tied_embeddings = false;
  return c;
}

inline const ModelWeights& Model() {
  static const ModelWeights* weights = new ModelWeights(MakeRandomModel(Config(), 7));
  return *weights;
}

inline std::vector<int32_t> Tokens(int n, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 1 + (i * 37 + salt * 101) % (Config().vocab_size - 1);
  return t;
}

// A calibration (SwiftKV recovery for (layer, group) and ZACK bases for that model, ρ = 0), made
// once per (layer, group).
inline const Calibration& TestCalibration(int layer, int group) {
  static std::map<std::pair<int, int>, Calibration>* cache =
      new std::map<std::pair<int, int>, Calibration>;
  auto [it, inserted] = cache->try_emplace({layer, group});
  if (inserted) {
    std::vector<std::vector<int32_t>> sequences;
    for (int s = 0; s < 6; ++s) sequences.push_back(Tokens(96, s + 10));
    CalibrateOptions options;
    options.swiftkv_layer = layer;
    options.across_kv = group;
    options.zack = true;
    options.zack_rho = 0.0;
    options.num_threads = 1;
    absl::StatusOr<Calibration> calibration = Calibrate(Model(), sequences, options, "test");
    EXPECT_TRUE(calibration.ok()) << calibration.status();
    it->second = *calibration;
  }
  return it->second;
}

inline std::unique_ptr<LlamaEngine> Engine(const CompressionProfile& profile,
                                           const Calibration* calibration = nullptr,
                                           int max_batch_tokens = 128) {
  absl::StatusOr<PreparedModel> prepared = PrepareModel(Model(), profile, calibration);
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  EngineOptions o;
  o.num_threads = 2;
  o.max_batch_tokens = max_batch_tokens;
  o.max_sequences = 2;
  o.kv_page_size = 8;
  o.compression = prepared->compression;
  absl::StatusOr<std::unique_ptr<LlamaEngine>> engine = LlamaEngine::Create(prepared->weights, o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(*engine);
}

// Logits of a prompt's last token (or of every token) in chunks of `chunk` tokens (0 = one; the
// last marked ForwardChunk::retain), then of `decode` teacher-forced decode steps on fixed tokens;
// all rows concatenated.
inline std::vector<float> RunPrompt(LlamaEngine& engine, const std::vector<int32_t>& prompt,
                                    int decode, bool all_logits = false, int chunk = 0) {
  const int sequence = *engine.AddSequence();
  std::vector<float> out;
  auto forward = [&](std::span<const int32_t> tokens, bool all, bool retain) {
    ForwardChunk c{sequence, tokens, all};
    c.retain = retain;
    absl::StatusOr<std::span<const float>> logits = engine.Forward({&c, 1});
    EXPECT_TRUE(logits.ok()) << logits.status();
    return *logits;
  };
  const int step = chunk > 0 ? chunk : static_cast<int>(prompt.size());
  std::span<const float> last;
  for (size_t begin = 0; begin < prompt.size(); begin += step) {
    const size_t n = std::min<size_t>(step, prompt.size() - begin);
    last = forward(std::span(prompt).subspan(begin, n), all_logits, begin + n == prompt.size());
    if (all_logits) out.insert(out.end(), last.begin(), last.end());
  }
  if (!all_logits) out.insert(out.end(), last.begin(), last.end());
  const std::vector<int32_t> next = Tokens(decode, 99);
  for (int i = 0; i < decode; ++i) {
    std::span<const float> logits = forward(std::span(next).subspan(i, 1), false, false);
    out.insert(out.end(), logits.begin(), logits.end());
  }
  EXPECT_TRUE(engine.RemoveSequence(sequence).ok());
  return out;
}

// Every technique at once (SwiftKV l=2 with AcrossKV G=2 and recovery, ZACK ρ = 0.05, FP8
// per-token, KCache N = 8).
inline CompressionProfile Everything() {
  CompressionProfile p;
  p.swiftkv_layer = 2;
  p.across_kv = 2;
  p.swiftkv_recovery = true;
  p.zack = true;
  p.zack_rho = 0.05;
  p.fp8 = KvScaleMode::kPerTokenHead;
  p.kcache = {.top_n = 8, .full_layers = 1, .sink = 2, .recent = 4};
  return p;
}

}  // namespace pdserve::techniques_testing

#endif  // PDSERVE_CORE_COMPRESS_TECHNIQUES_TESTING_H_
