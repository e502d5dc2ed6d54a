#include "core/model/model_config.h"

#include "core/model/model_weights.h"
#include "core/model/random_model.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(ModelConfigTest, NamedShapesAreValidAndMatchTheirNames) {
  for (const char* name : {"stories260K", "stories15M", "stories42M", "stories110M", "llama3.2-1B",
                           "qwen2.5-0.5B", "qwen3-1.7B", "qwen3-0.6B"}) {
    auto config = ShapeByName(name);
    ASSERT_TRUE(config.ok()) << name;
    EXPECT_TRUE(config->Validate().ok()) << name;
  }
  EXPECT_NEAR(ShapeByName("stories15M")->NumParameters() / 1e6, 15.2, 0.1);  // 9.2M embedding
  EXPECT_NEAR(ShapeByName("stories110M")->NumParameters() / 1e6, 109.5, 0.1);
  EXPECT_NEAR(ShapeByName("llama3.2-1B")->NumParameters() / 1e9, 1.236, 0.001);   // as published
  EXPECT_NEAR(ShapeByName("qwen2.5-0.5B")->NumParameters() / 1e9, 0.494, 0.001);  // as published
  // Qwen3 0.6B: 0.44B without the embedding (as published), heads of 128 on a width of 1024.
  const ModelConfig qwen3 = *ShapeByName("qwen3-0.6B");
  EXPECT_NEAR((qwen3.NumParameters() - int64_t{qwen3.vocab_size} * qwen3.dim) / 1e9, 0.44, 0.005);
  EXPECT_EQ(qwen3.head_dim(), 128);
  EXPECT_EQ(qwen3.q_dim(), 2048);
  EXPECT_EQ(qwen3.kv_dim(), 1024);
  EXPECT_EQ(ShapeByName("stories1B").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelConfigTest, ValidateRejectsImpossibleShapes) {
  ModelConfig good = *ShapeByName("stories260K");
  auto with = [&](auto edit) {
    ModelConfig c = good;
    edit(c);
    return c.Validate();
  };
  EXPECT_TRUE(good.Validate().ok());
  EXPECT_FALSE(with([](ModelConfig& c) { c.dim = 0; }).ok());
  EXPECT_FALSE(with([](ModelConfig& c) { c.n_heads = 7; }).ok());     // 64 % 7
  EXPECT_FALSE(with([](ModelConfig& c) { c.n_kv_heads = 3; }).ok());  // 8 % 3
  EXPECT_FALSE(with([](ModelConfig& c) {
                 c.n_heads = 64;
                 c.n_kv_heads = 64;
               }).ok());  // head dim 1
  EXPECT_FALSE(with([](ModelConfig& c) { c.norm_eps = -1; }).ok());
  EXPECT_FALSE(with([](ModelConfig& c) { c.vocab_size = 1 << 30; }).ok());
  // An explicit head dim frees dim from dividing by the heads, but must itself be even and sane.
  EXPECT_TRUE(with([](ModelConfig& c) {
                c.n_heads = 7;
                c.n_kv_heads = 7;
                c.explicit_head_dim = 32;
              }).ok());
  EXPECT_FALSE(with([](ModelConfig& c) { c.explicit_head_dim = 33; }).ok());
  EXPECT_FALSE(with([](ModelConfig& c) { c.explicit_head_dim = 2048; }).ok());
  EXPECT_FALSE(with([](ModelConfig& c) { c.explicit_head_dim = -8; }).ok());
}

TEST(ModelConfigTest, SetHeadDimIsExplicitOnlyWhereItDiffers) {
  ModelConfig c = *ShapeByName("stories260K");  // dim 64, 8 heads
  c.SetHeadDim(8);
  EXPECT_EQ(c.explicit_head_dim, 0);
  c.SetHeadDim(16);
  EXPECT_EQ(c.explicit_head_dim, 16);
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_NE(c.Describe().find("8 heads of 16 (4 kv)"), std::string::npos) << c.Describe();
  c.SetHeadDim(0);
  EXPECT_EQ(c.head_dim(), 8);
}

TEST(ModelConfigTest, ValidateChecksRopeScalingAndDescribeShowsIt) {
  ModelConfig c = *ShapeByName("stories260K");
  EXPECT_EQ(c.rope_scaling.factor, 0.0f);  // none by default
  EXPECT_EQ(c.Describe().find("scaling"), std::string::npos);
  c.rope_scaling = {.factor = 8.0f,
                    .low_freq_factor = 1.0f,
                    .high_freq_factor = 4.0f,
                    .original_max_positions = 8192};
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_NE(c.Describe().find("llama3 rope scaling ×8 (low 1, high 4, original ctx 8192)"),
            std::string::npos)
      << c.Describe();
  struct Case {
    kernels::RopeScaling scaling;
    const char* field;
  };
  for (const Case& bad : {
           Case{{.factor = 0.5f}, "rope_scaling.factor"},
           Case{{.factor = -1.0f}, "rope_scaling.factor"},
           Case{{.factor = 2.0f, .low_freq_factor = 0.0f}, "rope_scaling.low_freq_factor"},
           Case{{.factor = 2.0f, .low_freq_factor = 4.0f, .high_freq_factor = 4.0f},
                "rope_scaling.high_freq_factor"},
           Case{{.factor = 2.0f, .original_max_positions = 0},
                "rope_scaling.original_max_positions"},
       }) {
    c.rope_scaling = bad.scaling;
    absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad.field;
    EXPECT_NE(s.message().find(bad.field), std::string::npos) << s;
  }
  // factor 0 is "none", whatever the other fields hold.
  c.rope_scaling = {.factor = 0.0f, .low_freq_factor = -1.0f, .original_max_positions = 0};
  EXPECT_TRUE(c.Validate().ok());
}

TEST(ModelWeightsTest, RopePairingPermutationRoundTrips) {
  ModelConfig c = *ShapeByName("stories260K");
  ModelWeights w = MakeRandomModel(c, 1);
  ModelWeights split = WithRopePairing(w, RopePairing::kSplitHalf);
  EXPECT_EQ(split.config.rope_pairing, RopePairing::kSplitHalf);
  const float* a = w.layers[0].wq.as<float>();
  const float* b = split.layers[0].wq.as<float>();
  // Row 2i+j of a head (adjacent) is row j·d/2 + i (split-half); d = 8: row 1 → row 4.
  EXPECT_EQ(b[4 * c.dim], a[1 * c.dim]);
  ModelWeights back = WithRopePairing(split, RopePairing::kAdjacent);
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(0,
              std::memcmp(back.layers[l].wk.data, w.layers[l].wk.data, w.layers[l].wk.NumBytes()));
    EXPECT_EQ(0,
              std::memcmp(back.layers[l].wq.data, w.layers[l].wq.data, w.layers[l].wq.NumBytes()));
  }
}

TEST(ModelWeightsTest, ValidateNamesTheMissingOrMisshapenTensor) {
  ModelWeights w = MakeRandomModel(*ShapeByName("stories260K"), 1);
  EXPECT_TRUE(ValidateWeights(w).ok());
  ModelWeights missing = w;
  missing.layers[2].w3 = Tensor{};
  EXPECT_NE(std::string(ValidateWeights(missing).message()).find("layers.2.w3"), std::string::npos);
  ModelWeights misshapen = w;
  misshapen.layers[1].wk.shape = {8, 64};
  EXPECT_NE(std::string(ValidateWeights(misshapen).message()).find("layers.1.wk"),
            std::string::npos);
}

}  // namespace
}  // namespace pdserve
