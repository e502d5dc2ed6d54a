// Calibrate on a small random model: the SwiftKV recovery is never worse than the plain
// initialization on calibration MSE, recovers the exact projection where the target is linear in
// x (the first later layer), and the ZACK bases are orthonormal, sorted, and full rank at ρ = 0.
#include "core/compress/calibrator.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/calib/rank_selection.h"
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
  c.vocab_size = 100;
  c.max_seq_len = 96;
  return MakeRandomModel(c, 11);
}

std::vector<std::vector<int32_t>> Sequences(int count, int length) {
  std::vector<std::vector<int32_t>> out;
  for (int s = 0; s < count; ++s) {
    std::vector<int32_t> t(length);
    for (int i = 0; i < length; ++i) t[i] = 1 + (i * 31 + s * 17 + i * i) % 99;
    out.push_back(t);
  }
  return out;
}

TEST(CalibratorTest, RecoveryIsNeverWorseThanTheInitialization) {
  const ModelWeights w = Model();
  for (auto [layer, group] : {std::pair{1, 1}, std::pair{1, 3}, std::pair{2, 2}}) {
    CalibrateOptions o;
    o.swiftkv_layer = layer;
    o.across_kv = group;
    absl::StatusOr<Calibration> c = Calibrate(w, Sequences(4, 64), o, "test");
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE(c->swiftkv.has_value());
    const SwiftKvRecovery& r = *c->swiftkv;
    ASSERT_EQ(static_cast<int>(r.mse_fit.size()), (4 - layer) / group);
    for (size_t i = 0; i < r.mse_fit.size(); ++i) {
      EXPECT_LE(r.mse_fit[i], r.mse_init[i]) << "l=" << layer << " G=" << group << " leader " << i;
    }
    // Leaders past the first really have something to recover.
    if (r.mse_init.size() > 1) {
      EXPECT_LT(r.mse_fit.back(), 0.9 * r.mse_init.back());
    }
  }
}

TEST(CalibratorTest, RecoveryOfTheFirstLaterLayerIsItsOwnProjection) {
  // For layer l the target RMSNorm_l(h_l)·Wk_lᵀ is exactly x·Wk_lᵀ: the fit must find Wk_l.
  const ModelWeights w = Model();
  CalibrateOptions o;
  o.swiftkv_layer = 3;
  o.ridge = 0.0;
  absl::StatusOr<Calibration> c = Calibrate(w, Sequences(6, 80), o, "test");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<float>& fitted = c->swiftkv->wk[0];
  const float* original = w.layers[3].wk.as<float>();
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < fitted.size(); ++i) {
    worst = std::max(worst, std::abs(double{fitted[i]} - original[i]));
    scale = std::max(scale, std::abs(double{original[i]}));
  }
  EXPECT_LT(worst, 1e-3 * scale);
  EXPECT_LT(c->swiftkv->mse_fit[0], 1e-9);
}

TEST(CalibratorTest, ZackBasesAreOrthonormalSortedAndFullRankAtRhoZero) {
  const ModelWeights w = Model();
  CalibrateOptions o;
  o.zack = true;
  o.zack_rho = 0.0;
  absl::StatusOr<Calibration> c = Calibrate(w, Sequences(3, 64), o, "test");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->zack.has_value());
  const int d = 8;
  ASSERT_EQ(c->zack->heads.size(), 4u);
  for (const auto& layer : c->zack->heads) {
    ASSERT_EQ(layer.size(), 2u);
    for (const ZackHeadBasis& head : layer) {
      EXPECT_EQ(head.qk_rank, d);
      EXPECT_EQ(head.vo_rank, d);
      for (const auto* basis : {&head.qk_basis, &head.vo_basis}) {
        for (int i = 0; i < d; ++i) {
          for (int j = 0; j < d; ++j) {
            double dot = 0.0;
            for (int k = 0; k < d; ++k) dot += double{(*basis)[i * d + k]} * (*basis)[j * d + k];
            EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5);
          }
        }
      }
      EXPECT_TRUE(std::is_sorted(head.qk_eigenvalues.rbegin(), head.qk_eigenvalues.rend()));
    }
  }
}

TEST(CalibratorTest, KeptFractionTargetShrinksTheRanks) {
  const ModelWeights w = Model();
  CalibrateOptions o;
  o.zack = true;
  o.zack_kept_fraction = 0.5;
  absl::StatusOr<Calibration> c = Calibrate(w, Sequences(3, 64), o, "test");
  ASSERT_TRUE(c.ok()) << c.status();
  int kept = 0, total = 0;
  for (const auto& layer : c->zack->heads) {
    for (const ZackHeadBasis& head : layer) {
      kept += head.qk_rank + head.vo_rank;
      total += 16;
    }
  }
  EXPECT_LE(kept, total / 2);
  EXPECT_GT(c->zack->removal_rate, 0.0);
}

// With a rank multiple every rank is a whole multiple and together they meet the kept fraction;
// the automatic multiple leaves this model's 8-dimension heads as ρ chose them.
TEST(CalibratorTest, RankMultipleMakesWholeMultiplesThatMeetTheTarget) {
  const ModelWeights w = Model();
  CalibrateOptions o;
  o.zack = true;
  o.zack_kept_fraction = 0.6;
  o.zack_rank_multiple = 1;
  absl::StatusOr<Calibration> exact = Calibrate(w, Sequences(3, 64), o, "test");
  o.zack_rank_multiple = 0;
  absl::StatusOr<Calibration> automatic = Calibrate(w, Sequences(3, 64), o, "test");
  o.zack_rank_multiple = 4;
  absl::StatusOr<Calibration> rounded = Calibrate(w, Sequences(3, 64), o, "test");
  ASSERT_TRUE(exact.ok() && automatic.ok() && rounded.ok())
      << exact.status() << automatic.status() << rounded.status();
  bool any_ragged = false;
  int kept = 0, total = 0;
  for (size_t l = 0; l < exact->zack->heads.size(); ++l) {
    for (size_t g = 0; g < exact->zack->heads[l].size(); ++g) {
      const ZackHeadBasis& e = exact->zack->heads[l][g];
      const ZackHeadBasis& a = automatic->zack->heads[l][g];
      const ZackHeadBasis& r = rounded->zack->heads[l][g];
      EXPECT_EQ(a.qk_rank, e.qk_rank);
      EXPECT_EQ(a.vo_rank, e.vo_rank);
      EXPECT_EQ(r.qk_rank % 4, 0);
      EXPECT_EQ(r.vo_rank % 4, 0);
      any_ragged |= e.qk_rank % 4 != 0 || e.vo_rank % 4 != 0;
      kept += r.qk_rank + r.vo_rank;
      total += 16;
    }
  }
  EXPECT_TRUE(any_ragged) << "no rank was ragged: the test checks nothing";
  EXPECT_LE(kept, 0.6 * total);
  for (int bad : {-1, 9}) {  // the heads have 8 dimensions
    o.zack_rank_multiple = bad;
    EXPECT_THAT(std::string(Calibrate(w, Sequences(1, 8), o, "t").status().message()),
                HasSubstr(absl::StrCat("--zack-rank-multiple ", bad, " must be in [0, 8]")));
  }
}

TEST(CalibratorTest, AutomaticRankMultipleIsWholeVectorsOnWideHeads) {
  EXPECT_EQ(ZackRankMultipleFor(0, 8), 1);
  EXPECT_EQ(ZackRankMultipleFor(0, 48), 1);  // fewer than four vectors
  EXPECT_EQ(ZackRankMultipleFor(0, 64), kZackAutoRankMultiple);
  EXPECT_EQ(ZackRankMultipleFor(0, 72), 1);  // not whole vectors
  EXPECT_EQ(ZackRankMultipleFor(0, 128), kZackAutoRankMultiple);
  EXPECT_EQ(ZackRankMultipleFor(4, 8), 4);
  EXPECT_EQ(ZackRankMultipleFor(1, 128), 1);
}

TEST(CalibratorTest, RejectsNothingToDoAndBadLayers) {
  const ModelWeights w = Model();
  CalibrateOptions none;
  EXPECT_THAT(std::string(Calibrate(w, Sequences(1, 8), none, "t").status().message()),
              HasSubstr("nothing to do"));
  CalibrateOptions beyond;
  beyond.swiftkv_layer = 4;
  EXPECT_FALSE(Calibrate(w, Sequences(1, 8), beyond, "t").ok());
  CalibrateOptions group;
  group.swiftkv_layer = 1;
  group.across_kv = 2;  // 3 later layers
  EXPECT_FALSE(Calibrate(w, Sequences(1, 8), group, "t").ok());
  CalibrateOptions zero_group;
  zero_group.swiftkv_layer = 1;
  zero_group.across_kv = 0;
  EXPECT_THAT(std::string(Calibrate(w, Sequences(1, 8), zero_group, "t").status().message()),
              HasSubstr("--across-kv 0"));
  CalibrateOptions ok;
  ok.swiftkv_layer = 1;
  EXPECT_FALSE(Calibrate(w, {}, ok, "t").ok());
}

}  // namespace
}  // namespace pdserve
