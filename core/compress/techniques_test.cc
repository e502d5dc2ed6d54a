// The KV techniques inside LlamaEngine, end to end: identity settings reproduce the plain engine
// (bit for bit where the arithmetic is unchanged, 1e-5 for ZACK at full rank), SwiftKV's skip path
// equals the dense SwiftKV pass, chunked prefill equals one-shot prefill and prefill of n + m
// tokens equals prefill of n then m teacher-forced decode steps with every technique on, AcrossKV
// allocates only leaders, the fused SwiftKV projection equals per-leader projections, and ZACK's
// projection must follow RoPE (the negative test).
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "core/calib/linalg.h"
#include "core/compress/calibrator.h"
#include "core/compress/profile.h"
#include "core/compress/techniques_testing.h"
#include "core/engine/llama_engine.h"
#include "core/engine/logits_testing.h"
#include "core/model/random_model.h"
#include "gtest/gtest.h"
#include "kernels/basis_projection.h"
#include "kernels/matmul.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"

namespace pdserve {
namespace {

using techniques_testing::Config;
using techniques_testing::Engine;
using techniques_testing::Everything;
using techniques_testing::Model;
using techniques_testing::RunPrompt;
using techniques_testing::TestCalibration;
using techniques_testing::Tokens;

TEST(TechniquesTest, IdentitySettingsReproduceThePlainEngine) {
  const std::vector<float> plain = RunPrompt(*Engine({}), Tokens(40), 10);
  CompressionProfile swiftkv_identity;
  swiftkv_identity.swiftkv_layer = Config().n_layers;  // l = L
  EXPECT_EQ(RunPrompt(*Engine(swiftkv_identity), Tokens(40), 10), plain);
  CompressionProfile kcache_everything;  // N ≥ context, every layer through KCache
  kcache_everything.kcache = {.top_n = 1000, .full_layers = 0, .sink = 0, .recent = 1};
  EXPECT_EQ(RunPrompt(*Engine(kcache_everything), Tokens(40), 10), plain);
  CompressionProfile zack_full;  // r = d
  zack_full.zack = true;
  zack_full.zack_rho = 0.0;
  std::vector<std::vector<int32_t>> sequences = {Tokens(64, 1), Tokens(64, 2)};
  CalibrateOptions options;
  options.zack = true;
  options.zack_rho = 0.0;
  absl::StatusOr<Calibration> zack = Calibrate(Model(), sequences, options, "test");
  ASSERT_TRUE(zack.ok()) << zack.status();
  EXPECT_LT(MaxRelativeError(RunPrompt(*Engine(zack_full, &*zack), Tokens(40), 10), plain), 1e-5);
}

// An f16 cache rounds each K/V element once (2^-11 relative): the logits move, but by far less
// than FP8's 2^-4 does, and differ from the f32 cache's (so f16 is really stored).
TEST(TechniquesTest, F16KvStaysWithinItsRoundingOfThePlainEngine) {
  const std::vector<float> plain = RunPrompt(*Engine({}), Tokens(40), 10);
  CompressionProfile f16;
  f16.f16_kv = true;
  CompressionProfile fp8;
  fp8.fp8 = KvScaleMode::kPerTokenHead;
  const double f16_error = MaxRelativeError(RunPrompt(*Engine(f16), Tokens(40), 10), plain);
  const double fp8_error = MaxRelativeError(RunPrompt(*Engine(fp8), Tokens(40), 10), plain);
  EXPECT_GT(f16_error, 0.0);
  EXPECT_LT(f16_error, 2e-3);
  EXPECT_LT(f16_error * 8, fp8_error);
}

TEST(TechniquesTest, SwiftKvSkipPathEqualsDenseSwiftKvPass) {
  for (int group : {1, 2}) {
    CompressionProfile profile;
    profile.swiftkv_layer = 2;
    profile.across_kv = group;
    const std::vector<int32_t> prompt = Tokens(50);
    const std::vector<float> skip = RunPrompt(*Engine(profile), prompt, 4);
    const std::vector<float> dense = RunPrompt(*Engine(profile), prompt, 4, /*all_logits=*/true);
    const size_t vocab = Config().vocab_size;
    // The dense pass's last prompt row and its decode rows are the skip path's rows.
    std::vector<float> dense_tail(dense.end() - static_cast<int64_t>(5 * vocab), dense.end());
    EXPECT_LT(MaxRelativeError(skip, dense_tail), 1e-5) << "G=" << group;
    // SwiftKV really changes the model here (else the test would prove nothing).
    EXPECT_GT(MaxRelativeError(skip, RunPrompt(*Engine({}), prompt, 4)), 1e-3);
  }
}

TEST(TechniquesTest, ChunkedPrefillEqualsOneShot) {
  const Calibration& calibration = TestCalibration(2, 2);
  const std::vector<float> one_shot = RunPrompt(*Engine(Everything(), &calibration), Tokens(48), 6);
  for (int chunk : {16, 5}) {
    const std::vector<float> chunked =
        RunPrompt(*Engine(Everything(), &calibration), Tokens(48), 6, false, chunk);
    EXPECT_LT(MaxRelativeError(chunked, one_shot), 1e-5) << "chunks of " << chunk;
  }
}

TEST(TechniquesTest, PrefillOfNPlusMEqualsPrefillNThenDecodeM) {
  CompressionProfile profile = Everything();
  profile.kcache = {};  // prefill attends densely; KCache selects only in decode
  const Calibration& calibration = TestCalibration(2, 2);
  std::vector<int32_t> all = Tokens(30);
  const std::vector<int32_t> decoded = Tokens(8, 99);
  all.insert(all.end(), decoded.begin(), decoded.end());
  const std::vector<float> long_prefill = RunPrompt(*Engine(profile, &calibration), all, 0, true);
  const std::vector<float> stepwise = RunPrompt(*Engine(profile, &calibration), Tokens(30), 8);
  const size_t vocab = Config().vocab_size;
  // Rows 29 .. 37 of the long prefill predict what the prompt's last token and each decode step do.
  std::vector<float> tail(long_prefill.begin() + 29 * vocab, long_prefill.end());
  EXPECT_LT(MaxRelativeError(stepwise, tail), 1e-5);
}

// SwiftKV leaves a prompt's last token alone in the later layers: it still attends densely, and
// only decode steps go through KCache's selection.
TEST(TechniquesTest, PromptsAttendDenselyUnderKCache) {
  CompressionProfile swiftkv;
  swiftkv.swiftkv_layer = 2;
  CompressionProfile with_kcache = swiftkv;
  with_kcache.kcache = {.top_n = 1, .full_layers = 0, .sink = 1, .recent = 1};
  const std::vector<float> dense = RunPrompt(*Engine(swiftkv), Tokens(40), 0);
  EXPECT_EQ(RunPrompt(*Engine(with_kcache), Tokens(40), 0), dense);
  // ... while its decode steps do select (else this test would prove nothing).
  EXPECT_GT(MaxRelativeError(RunPrompt(*Engine(with_kcache), Tokens(40), 3),
                             RunPrompt(*Engine(swiftkv), Tokens(40), 3)),
            1e-4);
}

TEST(TechniquesTest, AcrossKvAllocatesOnlyLeaders) {
  for (auto [layer, group, caches] :
       {std::tuple{2, 1, 4}, std::tuple{2, 2, 3}, std::tuple{0, 4, 1}, std::tuple{1, 3, 2}}) {
    CompressionProfile profile;
    profile.swiftkv_layer = layer;
    profile.across_kv = group;
    std::unique_ptr<LlamaEngine> engine = Engine(profile);
    EXPECT_EQ(static_cast<int>(engine->plan().caches.size()), caches);
    const ModelConfig c = Config();
    EXPECT_DOUBLE_EQ(engine->plan().kv_bytes_per_token(), caches * 2.0 * c.kv_dim() * 4);
  }
}

// T5: the fused [Wk of every leader; Wv of every leader] projection with one RoPE call stores what
// per-leader RMSNorm → matmul → RoPE computes.
class KvCapture final : public ForwardObserver {
 public:
  void LayerInput(int layer, const float* x, int n) override {
    if (layer == 2) h_l.assign(x, x + int64_t{n} * Config().dim);
  }
  void Queries(int, const float*, int64_t, int) override {}
  void CachedKv(int cache, const float* k, const float* v, int64_t stride, int n) override {
    const int kv_dim = Config().kv_dim();
    std::vector<float> kk, vv;
    for (int t = 0; t < n; ++t) {
      kk.insert(kk.end(), k + t * stride, k + t * stride + kv_dim);
      vv.insert(vv.end(), v + t * stride, v + t * stride + kv_dim);
    }
    keys[cache] = kk;
    values[cache] = vv;
  }
  std::vector<float> h_l;
  std::map<int, std::vector<float>> keys, values;
};

TEST(TechniquesTest, FusedSwiftKvProjectionEqualsPerLeaderProjections) {
  CompressionProfile profile;
  profile.swiftkv_layer = 2;
  profile.across_kv = 1;
  absl::StatusOr<PreparedModel> prepared = PrepareModel(Model(), profile, nullptr);
  ASSERT_TRUE(prepared.ok());
  std::unique_ptr<LlamaEngine> engine = Engine(profile);
  KvCapture capture;
  engine->set_observer(&capture);
  const int n = 20;
  RunPrompt(*engine, Tokens(n), 0, /*all_logits=*/true);
  const ModelConfig c = Config();
  const SwiftKvWeights& sw = *prepared->weights.swiftkv;
  ASSERT_EQ(capture.h_l.size(), static_cast<size_t>(n) * c.dim);
  std::vector<float> x(capture.h_l.size());
  kernels::RmsNormReference(capture.h_l.data(), sw.norm.as<float>(), n, c.dim, c.norm_eps,
                            x.data());
  kernels::RopeTable rope(c.head_dim(), c.max_seq_len, c.rope_theta, c.rope_scaling);
  for (int leader = 0; leader < 2; ++leader) {
    std::vector<float> k(static_cast<size_t>(n) * c.kv_dim()), v(k.size());
    kernels::MatmulReference(x.data(), n, sw.wk[leader], k.data());
    kernels::MatmulReference(x.data(), n, sw.wv[leader], v.data());
    for (int t = 0; t < n; ++t) {
      kernels::ApplyRope(k.data() + t * c.kv_dim(), c.n_kv_heads, rope, t, c.rope_pairing);
    }
    EXPECT_LT(MaxRelativeError(capture.keys[2 + leader], k), 1e-5) << "leader " << leader;
    EXPECT_LT(MaxRelativeError(capture.values[2 + leader], v), 1e-5) << "leader " << leader;
  }
}

// ZACK must project after RoPE: with a full orthonormal basis B, (B·RoPE(q))·(B·RoPE(k)) is
// q·k after RoPE, while rotating first, RoPE(B·q)·RoPE(B·k), is not (B does not commute with RoPE).
TEST(TechniquesTest, ZackProjectionMustFollowRope) {
  const int d = 8;
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  std::vector<double> gram(d * d, 0.0);
  for (int s = 0; s < 64; ++s) {
    std::vector<double> row(d);
    for (int i = 0; i < d; ++i) row[i] = normal(rng) * (1.0 + i);  // anisotropic samples
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) gram[i * d + j] += row[i] * row[j];
  }
  absl::StatusOr<SymmetricEigenResult> eig = SymmetricEigen(gram, d);
  ASSERT_TRUE(eig.ok());
  const std::vector<float> basis(eig->vectors.begin(), eig->vectors.end());
  kernels::RopeTable rope(d, 64, 10000.0f);
  double worst_after = 0.0, worst_before = 0.0;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> q(d), k(d);
    for (float& v : q) v = static_cast<float>(normal(rng));
    for (float& v : k) v = static_cast<float>(normal(rng));
    const int pq = 40, pk = 3 + trial;
    std::vector<float> rq = q, rk = k;
    kernels::ApplyRope(rq.data(), 1, rope, pq, RopePairing::kAdjacent);
    kernels::ApplyRope(rk.data(), 1, rope, pk, RopePairing::kAdjacent);
    double truth = 0.0;
    for (int i = 0; i < d; ++i) truth += double{rq[i]} * rk[i];
    std::vector<float> bq(d), bk(d);
    kernels::ProjectRows(basis.data(), d, d, rq.data(), bq.data());  // right: after RoPE
    kernels::ProjectRows(basis.data(), d, d, rk.data(), bk.data());
    double after = 0.0;
    for (int i = 0; i < d; ++i) after += double{bq[i]} * bk[i];
    kernels::ProjectRows(basis.data(), d, d, q.data(), bq.data());  // wrong: before RoPE
    kernels::ProjectRows(basis.data(), d, d, k.data(), bk.data());
    kernels::ApplyRope(bq.data(), 1, rope, pq, RopePairing::kAdjacent);
    kernels::ApplyRope(bk.data(), 1, rope, pk, RopePairing::kAdjacent);
    double before = 0.0;
    for (int i = 0; i < d; ++i) before += double{bq[i]} * bk[i];
    worst_after = std::max(worst_after, std::abs(after - truth));
    worst_before = std::max(worst_before, std::abs(before - truth));
  }
  EXPECT_LT(worst_after, 1e-4);
  EXPECT_GT(worst_before, 0.1);
}

}  // namespace
}  // namespace pdserve
