#include "core/model/swiftkv_weights.h"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/formats/model_writer.h"
#include "core/model/model_weights.h"
#include "core/model/random_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

// 4 layers, GQA (4 query heads, 2 KV heads of width 16).
ModelConfig SmallConfig() {
  ModelConfig c;
  c.dim = 64;
  c.hidden_dim = 96;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 32;
  c.max_seq_len = 64;
  return c;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && std::memcmp(a.data, b.data, a.NumBytes()) == 0;
}

void ExpectSameSwiftKv(const SwiftKvWeights& a, const SwiftKvWeights& b) {
  EXPECT_EQ(a.layer, b.layer);
  EXPECT_EQ(a.group, b.group);
  EXPECT_TRUE(SameBytes(a.norm, b.norm));
  ASSERT_EQ(a.wq.size(), b.wq.size());
  ASSERT_EQ(a.wk.size(), b.wk.size());
  ASSERT_EQ(a.wv.size(), b.wv.size());
  for (size_t i = 0; i < a.wq.size(); ++i) EXPECT_TRUE(SameBytes(a.wq[i], b.wq[i])) << "wq " << i;
  for (size_t i = 0; i < a.wk.size(); ++i) {
    EXPECT_TRUE(SameBytes(a.wk[i], b.wk[i])) << "wk " << i;
    EXPECT_TRUE(SameBytes(a.wv[i], b.wv[i])) << "wv " << i;
  }
}

TEST(RewireSwiftKvTest, LastLayerIsTheIdentity) {
  const ModelWeights w = MakeRandomModel(SmallConfig(), 1);
  absl::StatusOr<SwiftKvWeights> s = RewireSwiftKv(w, 4, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->layer, 4);
  EXPECT_EQ(s->group, 1);
  EXPECT_TRUE(s->norm.empty());
  EXPECT_TRUE(s->wq.empty());
  EXPECT_TRUE(s->wk.empty());
  EXPECT_TRUE(s->wv.empty());
  EXPECT_TRUE(ValidateSwiftKv(w.config, *s).ok());
  EXPECT_EQ(s->num_leaders(4), 0);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(s->CacheLayer(j), j);
  // Any group divides zero layers; the identity always reports group 1.
  s = RewireSwiftKv(w, 4, 3);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->group, 1);
}

TEST(RewireSwiftKvTest, GroupOfOneSharesTheProjections) {
  const ModelWeights w = MakeRandomModel(SmallConfig(), 2);
  absl::StatusOr<SwiftKvWeights> s = RewireSwiftKv(w, 1, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->layer, 1);
  EXPECT_EQ(s->group, 1);
  ASSERT_EQ(s->wq.size(), 3u);
  ASSERT_EQ(s->wk.size(), 3u);
  ASSERT_EQ(s->wv.size(), 3u);
  EXPECT_TRUE(SameBytes(s->norm, w.layers[1].attn_norm));
  EXPECT_EQ(s->norm.dtype, DType::kF32);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(s->wq[i].data, w.layers[1 + i].wq.data);
    EXPECT_EQ(s->wk[i].data, w.layers[1 + i].wk.data);
    EXPECT_EQ(s->wv[i].data, w.layers[1 + i].wv.data);
  }
  EXPECT_TRUE(ValidateSwiftKv(w.config, *s).ok());
  EXPECT_EQ(s->CacheLayer(3), 3);
}

// Each leader's K/V projection is the element-wise mean of its group's, in f32, whatever the
// source dtype.
TEST(RewireSwiftKvTest, GroupsAverageTheirProjections) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const ModelWeights w = ConvertWeights(MakeRandomModel(SmallConfig(), 3), dtype);
    absl::StatusOr<SwiftKvWeights> s = RewireSwiftKv(w, 0, 2);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->wq.size(), 4u);
    ASSERT_EQ(s->wk.size(), 2u);
    ASSERT_EQ(s->wv.size(), 2u);
    EXPECT_TRUE(ValidateSwiftKv(w.config, *s).ok());
    EXPECT_EQ(s->wq[3].data, w.layers[3].wq.data);
    for (int leader = 0; leader < 2; ++leader) {
      for (auto [mean, source] : {std::pair{&s->wk[leader], &LayerWeights::wk},
                                  std::pair{&s->wv[leader], &LayerWeights::wv}}) {
        ASSERT_EQ(mean->dtype, DType::kF32);
        ASSERT_EQ(mean->shape, (std::vector<int64_t>{32, 64}));
        const Tensor& a = w.layers[2 * leader].*source;
        const Tensor& b = w.layers[2 * leader + 1].*source;
        bool nonzero = false;
        for (int64_t i = 0; i < mean->NumElements(); ++i) {
          const float expected = (ElementAsFloat(a, i) + ElementAsFloat(b, i)) / 2.0f;
          ASSERT_EQ(mean->as<float>()[i], expected) << "leader " << leader << " element " << i;
          nonzero |= expected != 0.0f;
        }
        EXPECT_TRUE(nonzero);
      }
    }
    EXPECT_EQ(s->CacheLayer(3), 1);
    EXPECT_EQ(s->num_leaders(4), 2);
  }
}

TEST(RewireSwiftKvTest, RejectsLayerAndGroupOutOfRange) {
  const ModelWeights w = MakeRandomModel(SmallConfig(), 4);
  for (auto [layer, group, message] :
       {std::tuple{-1, 1, "layer -1"}, std::tuple{5, 1, "layer 5"}, std::tuple{1, 0, "group 0"},
        std::tuple{1, -2, "group -2"}, std::tuple{1, 2, "does not divide"},
        std::tuple{0, 3, "does not divide"}}) {
    absl::Status s = RewireSwiftKv(w, layer, group).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << layer << "/" << group;
    EXPECT_THAT(s.message(), HasSubstr(message)) << layer << "/" << group;
  }
  ModelWeights broken = w;
  broken.layers.pop_back();
  EXPECT_EQ(RewireSwiftKv(broken, 2, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ValidateSwiftKvTest, RejectsEachBadField) {
  const ModelWeights w = MakeRandomModel(SmallConfig(), 5);
  const SwiftKvWeights good = *RewireSwiftKv(w, 2, 1);
  ASSERT_TRUE(ValidateSwiftKv(w.config, good).ok());
  const Tensor kv_matrix = good.wk[0];  // [32, 64]
  const Tensor q_matrix = good.wq[0];   // [64, 64]
  const Tensor vector = good.norm;      // [64]
  struct Case {
    const char* label;
    std::function<void(SwiftKvWeights&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"negative_layer", [](SwiftKvWeights& s) { s.layer = -1; }, "layer -1"},
      {"layer_past_end", [](SwiftKvWeights& s) { s.layer = 5; }, "layer 5"},
      {"group_zero", [](SwiftKvWeights& s) { s.group = 0; }, "group 0"},
      {"group_not_dividing", [](SwiftKvWeights& s) { s.group = 3; }, "does not divide"},
      {"group_without_tensors_reshaped", [](SwiftKvWeights& s) { s.group = 2; }, "wk matrices"},
      {"no_norm", [](SwiftKvWeights& s) { s.norm = Tensor(); }, "swiftkv.norm is missing"},
      {"norm_shape", [&](SwiftKvWeights& s) { s.norm = kv_matrix; }, "swiftkv.norm has shape"},
      {"norm_bf16", [&](SwiftKvWeights& s) { s.norm = ConvertTensor(vector, DType::kBF16); },
       "not f32"},
      {"wq_count", [](SwiftKvWeights& s) { s.wq.pop_back(); }, "1 wq matrices, expected 2"},
      {"wk_count", [&](SwiftKvWeights& s) { s.wk.push_back(kv_matrix); }, "3 wk matrices"},
      {"wv_count", [](SwiftKvWeights& s) { s.wv.clear(); }, "0 wv matrices"},
      {"wq_shape", [&](SwiftKvWeights& s) { s.wq[1] = kv_matrix; }, "swiftkv.wq[1] (layer 3)"},
      {"wk_shape", [&](SwiftKvWeights& s) { s.wk[1] = q_matrix; }, "swiftkv.wk[1] (layer 3)"},
      {"wv_shape", [&](SwiftKvWeights& s) { s.wv[0] = vector; }, "swiftkv.wv[0] (layer 2)"},
      {"wv_missing", [](SwiftKvWeights& s) { s.wv[1] = Tensor(); }, "swiftkv.wv[1] (layer 3)"},
      {"identity_with_tensors", [](SwiftKvWeights& s) { s.layer = 4; }, "0 (one per layer"},
  };
  for (const Case& c : cases) {
    SwiftKvWeights bad = good;
    c.edit(bad);
    absl::Status s = ValidateSwiftKv(w.config, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.label << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.label;
    // ValidateWeights checks the SwiftKV tensors too.
    ModelWeights with = w;
    with.swiftkv = bad;
    EXPECT_EQ(ValidateWeights(with).code(), absl::StatusCode::kInvalidArgument) << c.label;
  }
  ModelWeights with = w;
  with.swiftkv = good;
  EXPECT_TRUE(ValidateWeights(with).ok());
}

TEST(ValidateSwiftKvTest, AcceptsMixedMatrixDtypes) {
  const ModelWeights w = MakeRandomModel(SmallConfig(), 6);
  SwiftKvWeights s = *RewireSwiftKv(w, 1, 3);
  s.wq[0] = ConvertTensor(s.wq[0], DType::kF16);
  s.wq[1] = ConvertTensor(s.wq[1], DType::kBF16);
  s.wv[0] = ConvertTensor(s.wv[0], DType::kBF16);
  EXPECT_TRUE(ValidateSwiftKv(w.config, s).ok());
}

TEST(SwiftKvWeightsTest, ConvertWeightsConvertsTheSwiftKvMatrices) {
  ModelWeights w = MakeRandomModel(SmallConfig(), 7);
  w.swiftkv = *RewireSwiftKv(w, 2, 2);
  const ModelWeights f16 = ConvertWeights(w, DType::kF16);
  ASSERT_TRUE(f16.swiftkv.has_value());
  ASSERT_TRUE(ValidateWeights(f16).ok());
  const SwiftKvWeights& s = *f16.swiftkv;
  EXPECT_EQ(s.layer, 2);
  EXPECT_EQ(s.group, 2);
  EXPECT_EQ(s.norm.dtype, DType::kF32);
  EXPECT_TRUE(SameBytes(s.norm, w.swiftkv->norm));
  for (size_t i = 0; i < s.wq.size(); ++i) {
    EXPECT_TRUE(SameBytes(s.wq[i], ConvertTensor(w.swiftkv->wq[i], DType::kF16))) << i;
  }
  ASSERT_EQ(s.wk.size(), 1u);
  EXPECT_TRUE(SameBytes(s.wk[0], ConvertTensor(w.swiftkv->wk[0], DType::kF16)));
  EXPECT_TRUE(SameBytes(s.wv[0], ConvertTensor(w.swiftkv->wv[0], DType::kF16)));
  // The identity SwiftKV has nothing to convert.
  w.swiftkv = *RewireSwiftKv(w, 4, 1);
  const ModelWeights bf16 = ConvertWeights(w, DType::kBF16);
  ASSERT_TRUE(bf16.swiftkv.has_value());
  EXPECT_TRUE(bf16.swiftkv->norm.empty());
  EXPECT_TRUE(ValidateWeights(bf16).ok());
}

TEST(SwiftKvWeightsTest, WithRopePairingPermutesSwiftKvQueriesAndKeysLikeTheLayers) {
  ModelWeights w = MakeRandomModel(SmallConfig(), 8);
  w.swiftkv = *RewireSwiftKv(w, 1, 1);  // shares the layers' q/k/v: they must permute alike
  const ModelWeights split = WithRopePairing(w, RopePairing::kSplitHalf);
  ASSERT_TRUE(split.swiftkv.has_value());
  ASSERT_TRUE(ValidateWeights(split).ok());
  const SwiftKvWeights& s = *split.swiftkv;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(SameBytes(s.wq[i], split.layers[1 + i].wq)) << i;
    EXPECT_TRUE(SameBytes(s.wk[i], split.layers[1 + i].wk)) << i;
    EXPECT_FALSE(SameBytes(s.wq[i], w.swiftkv->wq[i])) << i;
    EXPECT_FALSE(SameBytes(s.wk[i], w.swiftkv->wk[i])) << i;
    EXPECT_EQ(s.wv[i].data, w.swiftkv->wv[i].data) << i;  // V has no RoPE
  }
  EXPECT_EQ(s.norm.data, w.swiftkv->norm.data);
  // Back to adjacent restores every SwiftKV tensor exactly.
  const ModelWeights back = WithRopePairing(split, RopePairing::kAdjacent);
  ASSERT_TRUE(back.swiftkv.has_value());
  ExpectSameSwiftKv(*back.swiftkv, *w.swiftkv);
  // Averaged (AcrossKV) keys permute per head like any other.
  w.swiftkv = *RewireSwiftKv(w, 0, 4);
  const ModelWeights split4 = WithRopePairing(w, RopePairing::kSplitHalf);
  EXPECT_FALSE(SameBytes(split4.swiftkv->wk[0], w.swiftkv->wk[0]));
  ExpectSameSwiftKv(*WithRopePairing(split4, RopePairing::kAdjacent).swiftkv, *w.swiftkv);
}

// GGUF and llama2.c have no tensors for SwiftKV: writing them there would silently drop it.
TEST(SwiftKvWeightsTest, OnlyHuggingFaceCanHoldThem) {
  ModelWeights w = MakeRandomModel(SmallConfig(), 3);
  absl::StatusOr<SwiftKvWeights> rewired = RewireSwiftKv(w, 2, 1);
  ASSERT_TRUE(rewired.ok());
  w.swiftkv = *rewired;
  const Vocabulary vocab = SyntheticVocabulary(SmallConfig().vocab_size);
  for (ModelFormat format : {ModelFormat::kGguf, ModelFormat::kLlama2c}) {
    WriteOptions options;
    options.format = format;
    const absl::Status status =
        WriteModel(::testing::TempDir() + "/swiftkv.out", w, vocab, options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr("Hugging Face"));
  }
}

}  // namespace
}  // namespace pdserve
