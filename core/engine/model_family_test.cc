// Every family (model_family.h) through the engine, the reference, both file formats and ZACK's
// folding: the fast engine equals the reference, the family's extra tensors change what it
// computes (and their identity settings give the plain Llama layer back), and files keep them.
#include "core/model/model_family.h"

#include <cmath>
#include <filesystem>

#include "core/engine/llama_engine.h"
#include "core/engine/llama_reference.h"
#include "core/engine/logits_testing.h"
#include "core/formats/model_loader.h"
#include "core/formats/model_writer.h"
#include "core/model/random_model.h"
#include "core/model/swiftkv_weights.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace pdserve {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// head_dim 0: dim / heads (8).
ModelConfig SmallConfig(ModelFamily family, int head_dim = 0) {
  ModelConfig c;
  c.family = family;
  c.dim = 48;
  c.hidden_dim = 100;
  c.n_layers = 3;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.vocab_size = 300;
  c.max_seq_len = 64;
  c.tied_embeddings = family == ModelFamily::kQwen2;  // both kinds get covered
  c.rope_theta = family == ModelFamily::kLlama ? 10000.0f : 1000000.0f;
  c.SetHeadDim(head_dim);
  return c;
}

std::vector<int32_t> Tokens(int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 3 + (i * 37 + 11) % (vocab - 3);
  return t;
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

std::unique_ptr<LlamaEngine> MakeEngine(const ModelWeights& w, int threads,
                                        KvCompression compression = {}) {
  EngineOptions o;
  o.num_threads = threads;
  o.max_batch_tokens = 128;
  o.max_sequences = 2;
  o.compression = std::move(compression);
  auto engine = LlamaEngine::Create(w, o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

// All-position logits: the first `prefill` tokens as one chunk, then one decode step per token
// (with all_logits false, the chunk's last position only, then the decode steps').
std::vector<float> EngineLogits(LlamaEngine& engine, std::span<const int32_t> tokens,
                                size_t prefill, bool all_logits = true) {
  const int seq = *engine.AddSequence();
  std::vector<float> out;
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t n = begin == 0 ? prefill : 1;
    ForwardChunk chunk{seq, tokens.subspan(begin, n), all_logits};
    auto logits = engine.Forward({&chunk, 1});
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) break;
    out.insert(out.end(), logits->begin(), logits->end());
    begin += n;
  }
  EXPECT_TRUE(engine.RemoveSequence(seq).ok());
  return out;
}

// A family, and heads whose width is not dim / heads (Qwen3-0.6B's 16 × 128 on 1024) when
// head_dim ≠ 0: wider (6 × 16 on 48) and narrower (6 × 4).
struct FamilyCase {
  ModelFamily family;
  int head_dim = 0;
  ModelConfig config() const { return SmallConfig(family, head_dim); }
};

void PrintTo(const FamilyCase& c, std::ostream* os) {
  *os << Traits(c.family).name << ", head dim " << c.config().head_dim();
}

class FamilyTest : public ::testing::TestWithParam<FamilyCase> {
 protected:
  ModelFamily family() const { return GetParam().family; }
};

INSTANTIATE_TEST_SUITE_P(
    Families, FamilyTest,
    ::testing::Values(FamilyCase{ModelFamily::kLlama}, FamilyCase{ModelFamily::kMistral},
                      FamilyCase{ModelFamily::kQwen2}, FamilyCase{ModelFamily::kQwen3},
                      FamilyCase{ModelFamily::kQwen3, 16}, FamilyCase{ModelFamily::kLlama, 4}),
    [](const auto& info) {
      const std::string name = Traits(info.param.family).name;
      const int d = info.param.head_dim;
      return d == 0 ? name : name + "_heads_of_" + std::to_string(d);
    });

TEST_P(FamilyTest, EngineMatchesReferenceInBothPairings) {
  const ModelWeights w = MakeRandomModel(GetParam().config(), 21);
  ASSERT_TRUE(ValidateWeights(w).ok()) << ValidateWeights(w);
  const auto tokens = Tokens(40, w.config.vocab_size);
  const std::vector<float> expected = ReferenceLogits(w, tokens);
  for (int threads : {1, 2}) {
    auto engine = MakeEngine(w, threads);
    ASSERT_NE(engine, nullptr);
    EXPECT_LT(MaxRelativeError(EngineLogits(*engine, tokens, 30), expected), 1e-5) << threads;
  }
  // Split-half rows (Hugging Face's) with their biases and head norms permuted alike.
  const ModelWeights split = WithRopePairing(w, RopePairing::kSplitHalf);
  EXPECT_LT(MaxRelativeError(ReferenceLogits(split, tokens), expected), 1e-5);
  EXPECT_LT(MaxRelativeError(EngineLogits(*MakeEngine(split, 2), tokens, 40), expected), 1e-5);
}

// GGUF (Mistral as llama.cpp's "llama") and safetensors keep the family and its tensors.
TEST_P(FamilyTest, FilesKeepTheFamily) {
  const ModelWeights w = MakeRandomModel(GetParam().config(), 23);
  const ScratchDir scratch("model_family_test");
  const fs::path& dir = scratch.path();
  const Vocabulary vocab = SyntheticVocabulary(w.config.vocab_size);
  const auto tokens = Tokens(20, w.config.vocab_size);
  const std::vector<float> expected = ReferenceLogits(w, tokens);
  for (auto [name, format] :
       {std::pair{"m.gguf", ModelFormat::kGguf}, std::pair{"hf", ModelFormat::kHuggingFace}}) {
    ASSERT_TRUE(WriteModel((dir / name).string(), w, vocab, {format}).ok()) << name;
    auto loaded = LoadModel((dir / name).string());
    ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.status();
    const ModelFamily want = format == ModelFormat::kGguf && family() == ModelFamily::kMistral
                                 ? ModelFamily::kLlama
                                 : family();
    EXPECT_EQ(loaded->weights.config.family, want) << name;
    EXPECT_EQ(loaded->weights.config.head_dim(), w.config.head_dim()) << name;
    EXPECT_EQ(loaded->weights.config.tied_embeddings, w.config.tied_embeddings) << name;
    EXPECT_LT(MaxRelativeError(EngineLogits(*MakeEngine(loaded->weights, 1), tokens, 20), expected),
              1e-5)
        << name;
  }
}

// Full-rank ZACK bases that mix a head's dimensions (a signed permutation) fold the V bias with
// wv and leave the model's output unchanged.
TEST_P(FamilyTest, FullRankZackReproducesThePlainModel) {
  const ModelWeights w = MakeRandomModel(GetParam().config(), 25);
  const ModelConfig& c = w.config;
  const int d = c.head_dim();
  auto zack = std::make_shared<ZackBases>();
  for (int layer = 0; layer < c.n_layers; ++layer) {
    std::vector<ZackHeadBasis>& heads = zack->heads.emplace_back();
    for (int g = 0; g < c.n_kv_heads; ++g) {
      ZackHeadBasis head;
      head.qk_rank = head.vo_rank = d;
      head.qk_basis.assign(static_cast<size_t>(d) * d, 0.0f);
      head.vo_basis.assign(static_cast<size_t>(d) * d, 0.0f);
      for (int i = 0; i < d; ++i) {
        const float sign = (i + g + layer) % 3 == 0 ? -1.0f : 1.0f;
        head.qk_basis[i * d + (i * 5 + g) % d] = sign;
        head.vo_basis[i * d + (i * 7 + layer) % d] = -sign;
      }
      heads.push_back(std::move(head));
    }
  }
  const auto tokens = Tokens(24, c.vocab_size);
  const std::vector<float> expected = EngineLogits(*MakeEngine(w, 1), tokens, 16);
  KvCompression compression;
  compression.zack = zack;
  auto engine = MakeEngine(w, 1, compression);
  ASSERT_NE(engine, nullptr);
  EXPECT_LT(MaxRelativeError(EngineLogits(*engine, tokens, 16), expected), 1e-5);
}

// A model of the family differs from the Llama model with the same other weights: the extras are
// run. Their identity settings (zero biases) give the Llama model back.
TEST(FamilyExtrasTest, BiasesAndHeadNormsChangeTheOutputAndZeroBiasesDoNot) {
  const auto tokens = Tokens(16, 300);
  for (ModelFamily family : {ModelFamily::kQwen2, ModelFamily::kQwen3}) {
    const ModelWeights w = MakeRandomModel(SmallConfig(family), 27);
    ModelWeights llama = w;
    llama.config.family = ModelFamily::kLlama;
    for (LayerWeights& layer : llama.layers)
      layer.bq = layer.bk = layer.bv = layer.q_norm = layer.k_norm = Tensor{};
    const std::vector<float> plain = ReferenceLogits(llama, tokens);
    EXPECT_GT(MaxRelativeError(ReferenceLogits(w, tokens), plain), 1e-2) << Traits(family).name;
    EXPECT_GT(MaxRelativeError(EngineLogits(*MakeEngine(w, 1), tokens, 16), plain), 1e-2);
    if (family != ModelFamily::kQwen2) continue;
    ModelWeights zero = w;
    for (LayerWeights& layer : zero.layers) {
      for (Tensor* b : {&layer.bq, &layer.bk, &layer.bv}) {
        *b = MakeF32Tensor(std::vector<float>(b->rows(), 0.0f), b->shape);
      }
    }
    EXPECT_LT(MaxRelativeError(ReferenceLogits(zero, tokens), plain), 1e-6);
    EXPECT_LT(MaxRelativeError(EngineLogits(*MakeEngine(zero, 1), tokens, 16), plain), 1e-5);
  }
}

TEST(FamilyExtrasTest, ValidateWeightsNamesMissingAndForeignTensors) {
  ModelWeights qwen2 = MakeRandomModel(SmallConfig(ModelFamily::kQwen2), 1);
  qwen2.layers[1].bk = Tensor{};
  EXPECT_THAT(ValidateWeights(qwen2).message(), HasSubstr("layers.1.bk is missing"));
  ModelWeights qwen3 = MakeRandomModel(SmallConfig(ModelFamily::kQwen3), 1);
  qwen3.layers[0].k_norm = MakeF32Tensor(std::vector<float>(4, 1.0f), {4});
  EXPECT_THAT(ValidateWeights(qwen3).message(), HasSubstr("layers.0.k_norm has shape [4]"));
  ModelWeights llama = MakeRandomModel(SmallConfig(ModelFamily::kLlama), 1);
  llama.layers[2].bq = qwen2.layers[2].bq;
  EXPECT_THAT(ValidateWeights(llama).message(),
              HasSubstr("layers.2.bq is present but llama layers have none"));
}

// SwiftKV carries the extras: at l = L − 1 with groups of one the leader's K/V come from its own
// input, as without SwiftKV, so the model is unchanged; deeper, the skip path (later layers on the
// logit rows only) equals the dense SwiftKV pass, with and without AcrossKV.
TEST_P(FamilyTest, SwiftKvCarriesTheFamilysBiasesAndNorms) {
  const ModelWeights w = MakeRandomModel(GetParam().config(), 29);
  const int layers = w.config.n_layers;
  const auto tokens = Tokens(30, w.config.vocab_size);
  auto with_swiftkv = [&](int layer, int group) {
    ModelWeights out = w;
    auto swiftkv = RewireSwiftKv(w, layer, group);
    EXPECT_TRUE(swiftkv.ok()) << swiftkv.status();
    out.swiftkv = *swiftkv;
    return out;
  };
  const std::vector<float> plain = EngineLogits(*MakeEngine(w, 2), tokens, 20);
  const std::vector<float> last =
      EngineLogits(*MakeEngine(with_swiftkv(layers - 1, 1), 2), tokens, 20);
  EXPECT_LT(MaxRelativeError(last, plain), 1e-5);
  const size_t vocab = w.config.vocab_size;
  for (int group : {1, 2}) {
    const ModelWeights sw = with_swiftkv(1, group);
    // Skip path: the prompt's later layers run on its last row only.
    const std::vector<float> skip = EngineLogits(*MakeEngine(sw, 2), tokens, 20, false);
    const std::vector<float> dense = EngineLogits(*MakeEngine(sw, 2), tokens, 20);
    const std::vector<float> dense_tail(dense.end() - static_cast<int64_t>(11 * vocab),
                                        dense.end());
    EXPECT_LT(MaxRelativeError(skip, dense_tail), 1e-5) << "G=" << group;
    EXPECT_GT(MaxRelativeError(dense, plain), 1e-3) << "G=" << group;  // SwiftKV changed something
  }
}

// What cannot hold the extras refuses them by name instead of dropping them.
TEST(FamilyExtrasTest, Llama2cAndSwiftKvCheckpointsRefuseThem) {
  for (ModelFamily family : {ModelFamily::kQwen2, ModelFamily::kQwen3}) {
    ModelWeights w = MakeRandomModel(SmallConfig(family), 1);
    const std::string name = Traits(family).name;
    const std::string path = (fs::temp_directory_path() / "pdserve_family.bin").string();
    EXPECT_THAT(WriteModel(path, w, SyntheticVocabulary(300), {ModelFormat::kLlama2c}).message(),
                HasSubstr("llama2.c checkpoints cannot store " + name));
    EXPECT_FALSE(fs::exists(path));
    w.swiftkv = *RewireSwiftKv(w, 1, 1);
    EXPECT_THAT(
        WriteModel(path, w, SyntheticVocabulary(300), {ModelFormat::kHuggingFace}).message(),
        HasSubstr("SwiftKV checkpoints (llama_swiftkv) hold Llama models only, not " + name));
    EXPECT_FALSE(fs::exists(path));
  }
}

TEST(FamilyTraitsTest, NamesMapToFamilies) {
  for (const FamilyTraits& f : AllFamilies()) {
    EXPECT_EQ(&Traits(f.family), &f);
    EXPECT_EQ(FamilyByName(f.name), &f);
    EXPECT_EQ(FamilyByHfModelType(f.hf_model_type), &f);
  }
  EXPECT_EQ(FamilyByGgufArchitecture("llama")->family, ModelFamily::kLlama);
  EXPECT_EQ(FamilyByGgufArchitecture("qwen2")->family, ModelFamily::kQwen2);
  EXPECT_EQ(FamilyByGgufArchitecture("qwen3")->family, ModelFamily::kQwen3);
  EXPECT_EQ(FamilyByGgufArchitecture("gpt2"), nullptr);
  EXPECT_EQ(FamilyByName("falcon"), nullptr);
  EXPECT_EQ(FamilyNames(), "llama, mistral, qwen2, qwen3");
}

}  // namespace
}  // namespace pdserve
