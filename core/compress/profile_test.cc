// PrepareModel: which SwiftKV structure, ZACK bases and options a profile yields, and the errors
// for profiles that do not fit the model or the calibration.
#include "core/compress/profile.h"

#include "core/engine/kv_plan.h"
#include "core/model/random_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

ModelWeights Model() {
  ModelConfig c;
  c.dim = 32;
  c.hidden_dim = 64;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 50;
  c.max_seq_len = 32;
  return MakeRandomModel(c, 5);
}

std::string Error(const ModelWeights& w, const CompressionProfile& p, const Calibration* c) {
  absl::StatusOr<PreparedModel> prepared = PrepareModel(w, p, c);
  return prepared.ok() ? "" : std::string(prepared.status().message());
}

TEST(ProfileTest, PlainProfileKeepsThePlainModel) {
  absl::StatusOr<PreparedModel> p = PrepareModel(Model(), {}, nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->weights.swiftkv.has_value());
  EXPECT_EQ(p->compression.zack, nullptr);
  EXPECT_EQ(CompressionProfile{}.Describe(), "plain");
}

TEST(ProfileTest, RewiresAPlainModel) {
  CompressionProfile profile;
  profile.swiftkv_layer = 2;
  profile.across_kv = 2;
  profile.fp8 = KvScaleMode::kPerPageHead;
  absl::StatusOr<PreparedModel> p = PrepareModel(Model(), profile, nullptr);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->weights.swiftkv.has_value());
  EXPECT_EQ(p->weights.swiftkv->layer, 2);
  EXPECT_EQ(p->weights.swiftkv->wk.size(), 1u);
  EXPECT_EQ(p->compression.fp8, KvScaleMode::kPerPageHead);
  EXPECT_EQ(profile.Describe(), "swiftkv l=2 G=2, fp8 per-page");
}

TEST(ProfileTest, RecoveryAndZackNeedTheirCalibration) {
  const ModelWeights w = Model();
  CompressionProfile recovery;
  recovery.swiftkv_layer = 1;
  recovery.swiftkv_recovery = true;
  EXPECT_THAT(Error(w, recovery, nullptr), HasSubstr("not in the calibration"));
  Calibration other;
  other.model = CalibrationModelOf(w.config);
  other.swiftkv.emplace();
  other.swiftkv->layer = 2;
  EXPECT_THAT(Error(w, recovery, &other), HasSubstr("l=1 G=1"));
  CompressionProfile zack;
  zack.zack = true;
  EXPECT_THAT(Error(w, zack, nullptr), HasSubstr("ZACK"));
  EXPECT_THAT(Error(w, zack, &other), HasSubstr("ZACK"));
}

// Identity ZACK bases (full rank) for `cache_layers` cache layers of Model().
Calibration IdentityZack(const ModelWeights& w, int cache_layers) {
  const int d = w.config.head_dim();
  Calibration c;
  c.model = CalibrationModelOf(w.config);
  c.zack.emplace();
  for (int layer = 0; layer < cache_layers; ++layer) {
    c.zack->heads.emplace_back(w.config.n_kv_heads);
    for (ZackHeadBasis& head : c.zack->heads.back()) {
      head.qk_rank = head.vo_rank = d;
      head.qk_basis.assign(d * d, 0.0f);
      for (int i = 0; i < d; ++i) head.qk_basis[i * d + i] = 1.0f;
      head.vo_basis = head.qk_basis;
      head.qk_eigenvalues.assign(d, 1.0);
      head.vo_eigenvalues.assign(d, 1.0);
    }
  }
  return c;
}

TEST(ProfileTest, ZackBasesServeOnlyTheModelTheyWereMadeFor) {
  const ModelWeights w = Model();
  Calibration c = IdentityZack(w, 4);
  CompressionProfile zack;
  zack.zack = true;
  EXPECT_EQ(Error(w, zack, &c), "");
  CompressionProfile rewired = zack;
  rewired.swiftkv_layer = 1;
  EXPECT_THAT(Error(w, rewired, &c), HasSubstr("without SwiftKV"));
  c.swiftkv.emplace();
  c.swiftkv->layer = 1;
  c.swiftkv->group = 1;
  c.swiftkv->norm.assign(w.config.dim, 1.0f);
  c.swiftkv->wk.assign(3, std::vector<float>(w.config.kv_dim() * w.config.dim, 0.0f));
  c.swiftkv->wv = c.swiftkv->wk;
  EXPECT_THAT(Error(w, zack, &c), HasSubstr("l=1 G=1"));
  rewired.swiftkv_recovery = true;
  EXPECT_EQ(Error(w, rewired, &c), "");
}

// The KV plan's error for `w` served with `profile` and `c`, "" when it builds.
std::string PlanError(const ModelWeights& w, const CompressionProfile& profile,
                      const Calibration& c) {
  absl::StatusOr<PreparedModel> prepared = PrepareModel(w, profile, &c);
  if (!prepared.ok()) return std::string(prepared.status().message());
  absl::StatusOr<KvPlan> plan =
      BuildKvPlan(prepared->weights, prepared->compression, /*page_size=*/16, WeightFormat{});
  return plan.ok() ? "" : std::string(plan.status().message());
}

TEST(ProfileTest, ZackBasesOfAnAcrossKvCheckpointServeOnlyThatCheckpoint) {
  ModelWeights checkpoint = Model();
  absl::StatusOr<SwiftKvWeights> trained = RewireSwiftKv(checkpoint, 2, 2);  // 3 cache layers
  ASSERT_TRUE(trained.ok());
  checkpoint.swiftkv = *trained;
  Calibration c = IdentityZack(Model(), 3);
  ASSERT_TRUE(ValidateCalibration(c).ok()) << ValidateCalibration(c);
  CompressionProfile zack;
  zack.zack = true;
  EXPECT_EQ(PlanError(checkpoint, zack, c), "");
  EXPECT_THAT(PlanError(Model(), zack, c), HasSubstr("bases for 3 cache layers; the model has 4"));
  const Calibration plain = IdentityZack(Model(), 4);
  EXPECT_THAT(PlanError(checkpoint, zack, plain),
              HasSubstr("bases for 4 cache layers; the model has 3"));
}

TEST(ProfileTest, RejectsACalibrationOfAnotherShape) {
  const ModelWeights w = Model();
  Calibration c;
  c.model = CalibrationModelOf(w.config);
  c.model.n_layers += 1;
  EXPECT_THAT(Error(w, {}, &c), HasSubstr("another shape"));
}

TEST(ProfileTest, RejectsAnotherLayerForASwiftKvCheckpoint) {
  ModelWeights w = Model();
  absl::StatusOr<SwiftKvWeights> trained = RewireSwiftKv(w, 2, 1);
  ASSERT_TRUE(trained.ok());
  w.swiftkv = *trained;
  CompressionProfile as_trained;
  EXPECT_EQ(Error(w, as_trained, nullptr), "");
  CompressionProfile other;
  other.swiftkv_layer = 1;
  EXPECT_THAT(Error(w, other, nullptr), HasSubstr("trained with l=2"));
}

TEST(ProfileTest, AcrossKvWithoutSwiftKvIsAnError) {
  CompressionProfile p;
  p.across_kv = 2;
  EXPECT_THAT(Error(Model(), p, nullptr), HasSubstr("--swiftkv-layer"));
}

}  // namespace
}  // namespace pdserve
