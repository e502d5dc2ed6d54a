// LlamaEngine on a model as users download it: tests/data/tiny-q4_k_m.gguf (llama-quantize's
// Q4_K_M: Q4_K and Q6_K matrices; scripts/make_quant_vectors.sh) against LlamaReference on the
// same weights (which dequantizes them). Prefill runs SGEMM on dequantized tiles — only the
// summation order differs — except where the int8 GEMM runs Q4_K (kernels/cpu/gemm_kernels.h),
// which quantizes the activations as decode does; decode steps run the integer dot products on int8
// activations, whose rounding bounds their error. The matrices stay quantized in the engine (none
// converted).
#include <cmath>
#include <set>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/engine/llama_engine.h"
#include "core/engine/llama_reference.h"
#include "core/formats/model_loader.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm_kernels.h"

namespace pdserve {
namespace {

ModelWeights TinyQ4KM() {
  absl::StatusOr<ModelWeights> w =
      LoadModelWeights(absl::StrCat(PDSERVE_SOURCE_DIR, "/tests/data/tiny-q4_k_m.gguf"));
  EXPECT_TRUE(w.ok()) << w.status();
  return *w;
}

double RelativeError(std::span<const float> got, std::span<const float> want) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    ref += double{want[i]} * want[i];
  }
  return std::sqrt(diff / ref);
}

std::vector<int32_t> Tokens(int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 3 + (i * 7919) % (vocab - 3);
  return t;
}

TEST(QuantizedEngineTest, FileHoldsQ4KAndQ6KMatrices) {
  const ModelWeights w = TinyQ4KM();
  std::set<DType> types;
  for (const LayerWeights& l : w.layers) {
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3})
      types.insert(t->dtype);
  }
  types.insert(w.token_embedding.dtype);
  EXPECT_TRUE(types.count(DType::kQ4_K)) << "Q4_K_M's main format";
  EXPECT_TRUE(types.count(DType::kQ6_K)) << "Q4_K_M keeps some matrices in Q6_K";
}

TEST(QuantizedEngineTest, PrefillAndDecodeMatchTheReference) {
  const ModelWeights w = TinyQ4KM();
  const std::vector<int32_t> tokens = Tokens(24, w.config.vocab_size);
  LlamaReference reference(w);
  std::vector<float> want;
  for (int32_t t : tokens) {
    std::vector<float> logits = reference.Forward(t);
    want.insert(want.end(), logits.begin(), logits.end());
  }
  for (int threads : {1, 2}) {
    EngineOptions o;
    o.num_threads = threads;
    o.max_batch_tokens = 64;
    absl::StatusOr<std::unique_ptr<LlamaEngine>> engine = LlamaEngine::Create(w, o);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_TRUE(IsQuantized((*engine)->plan().layers[0].wo.dtype)) << "read in place";

    const int prefill = *(*engine)->AddSequence();
    ForwardChunk chunk{prefill, tokens, /*all_logits=*/true};
    absl::StatusOr<std::span<const float>> all = (*engine)->Forward({&chunk, 1});
    ASSERT_TRUE(all.ok()) << all.status();
    const bool int8_prefill = kernels::Int8GemmFor(DType::kQ4_K) != nullptr;
    EXPECT_LT(RelativeError(*all, want), int8_prefill ? 2e-2 : 1e-5)
        << "prefill, threads " << threads;

    const int decode = *(*engine)->AddSequence();
    std::vector<float> stepped;
    for (const int32_t& t : tokens) {
      ForwardChunk step{decode, std::span(&t, 1)};
      absl::StatusOr<std::span<const float>> logits = (*engine)->Forward({&step, 1});
      ASSERT_TRUE(logits.ok()) << logits.status();
      stepped.insert(stepped.end(), logits->begin(), logits->end());
    }
    // int8 activations (≤ 0.4% per element) through every projection of the layer.
    EXPECT_LT(RelativeError(stepped, want), 2e-2) << "decode, threads " << threads;
    EXPECT_GT(RelativeError(stepped, want), 0.0) << "decode runs the integer kernels";
  }
}

}  // namespace
}  // namespace pdserve
