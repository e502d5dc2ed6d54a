#include "core/compress/calibrator.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/base/thread_pool.h"
#include "core/calib/linalg.h"
#include "core/calib/rank_selection.h"
#include "core/compress/profile.h"
#include "core/engine/llama_engine.h"
#include "kernels/matmul.h"
#include "kernels/rms_norm.h"

namespace pdserve {
namespace {

int MaxLength(std::span<const std::vector<int32_t>> sequences) {
  size_t n = 0;
  for (const std::vector<int32_t>& s : sequences) n = std::max(n, s.size());
  return static_cast<int>(n);
}

// Runs every sequence through `engine` (all rows through every layer) for an observer.
absl::Status RunAll(LlamaEngine& engine, std::span<const std::vector<int32_t>> sequences,
                    const char* phase, const CalibrateOptions& options,
                    const std::function<void()>& after_each) {
  for (size_t i = 0; i < sequences.size(); ++i) {
    if (sequences[i].empty()) continue;
    PDSERVE_ASSIGN_OR_RETURN(int id, engine.AddSequence());
    const ForwardChunk chunk{id, sequences[i], /*all_logits=*/true};
    absl::Status status = engine.Forward({&chunk, 1}).status();
    PDSERVE_RETURN_IF_ERROR(engine.RemoveSequence(id));
    PDSERVE_RETURN_IF_ERROR(status);
    if (after_each) after_each();
    if (options.progress) options.progress(phase, static_cast<int>(i + 1), sequences.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LlamaEngine>> CalibrationEngine(
    const ModelWeights& weights, std::span<const std::vector<int32_t>> sequences,
    const CalibrateOptions& options) {
  EngineOptions engine;
  engine.num_threads = options.num_threads;
  engine.max_sequences = 1;
  engine.max_context = std::max(1, MaxLength(sequences));
  engine.max_batch_tokens = engine.max_context;
  return LlamaEngine::Create(weights, engine);
}

// Phase 1's observer: x = RMSNorm(h_l) and per later layer the teacher K/V targets of the
// sequence just run; Finish() folds them into the leaders' statistics.
class RecoveryObserver final : public ForwardObserver {
 public:
  RecoveryObserver(const ModelWeights& weights, int layer, int group, ThreadPool& pool)
      : w_(weights), c_(weights.config), l_(layer), g_(group), pool_(pool) {
    const int leaders = (c_.n_layers - l_) / g_;
    for (int i = 0; i < leaders; ++i) {
      cross_k_.emplace_back(c_.dim, c_.kv_dim());
      cross_v_.emplace_back(c_.dim, c_.kv_dim());
    }
    for (int j = l_; j < c_.n_layers; ++j) {
      wk_.push_back(ToF32(w_.layers[j].wk));
      wv_.push_back(ToF32(w_.layers[j].wv));
    }
    y_k_.resize(c_.n_layers - l_);
    y_v_.resize(c_.n_layers - l_);
    workspace_.resize(kernels::MatmulWorkspaceFloats(pool.size(), c_.dim));
  }

  void LayerInput(int layer, const float* x, int n) override {
    if (layer < l_) return;
    n_ = n;
    std::vector<float> normed(static_cast<size_t>(n) * c_.dim);
    if (layer == l_) {
      kernels::RmsNorm(x, w_.layers[l_].attn_norm.as<float>(), n, c_.dim, c_.norm_eps,
                       normed.data());
      x_ = normed;
    } else {
      kernels::RmsNorm(x, w_.layers[layer].attn_norm.as<float>(), n, c_.dim, c_.norm_eps,
                       normed.data());
    }
    const int j = layer - l_;
    y_k_[j].resize(static_cast<size_t>(n) * c_.kv_dim());
    y_v_[j].resize(y_k_[j].size());
    kernels::Matmul(pool_, normed.data(), n, wk_[j], y_k_[j].data(), workspace_);
    kernels::Matmul(pool_, normed.data(), n, wv_[j], y_v_[j].data(), workspace_);
  }
  void Queries(int, const float*, int64_t, int) override {}
  void CachedKv(int, const float*, const float*, int64_t, int) override {}

  // Adds the sequence just run: XᵀX and, per leader, XᵀȲ for K and V.
  void Finish() {
    gram_.Add(x_.data(), n_, c_.dim);
    const size_t size = static_cast<size_t>(n_) * c_.kv_dim();
    for (size_t i = 0; i < cross_k_.size(); ++i) {
      std::vector<float> mean_k(size, 0.0f), mean_v(size, 0.0f);
      for (int m = 0; m < g_; ++m) {
        const size_t j = i * g_ + m;
        for (size_t e = 0; e < size; ++e) {
          mean_k[e] += y_k_[j][e] / g_;
          mean_v[e] += y_v_[j][e] / g_;
        }
      }
      cross_k_[i].Add(x_.data(), c_.dim, mean_k.data(), c_.kv_dim(), n_);
      cross_v_[i].Add(x_.data(), c_.dim, mean_v.data(), c_.kv_dim(), n_);
    }
  }

  // Fits every leader; keeps the initialization where the fit is not better.
  absl::StatusOr<SwiftKvRecovery> Solve(double ridge) const {
    SwiftKvRecovery r;
    r.layer = l_;
    r.group = g_;
    const std::vector<double> xtx = gram_.Matrix();
    double trace = 0.0;
    for (int i = 0; i < c_.dim; ++i) trace += xtx[static_cast<size_t>(i) * c_.dim + i];
    r.ridge_lambda = ridge * trace / c_.dim;
    const Tensor norm = ToF32(w_.layers[l_].attn_norm);
    r.norm.assign(norm.as<float>(), norm.as<float>() + c_.dim);
    for (size_t i = 0; i < cross_k_.size(); ++i) {
      double mse_init = 0.0, mse_fit = 0.0;
      std::vector<float> wk, wv;
      PDSERVE_RETURN_IF_ERROR(
          FitOne(xtx, cross_k_[i], wk_, i, r.ridge_lambda, wk, mse_init, mse_fit));
      PDSERVE_RETURN_IF_ERROR(
          FitOne(xtx, cross_v_[i], wv_, i, r.ridge_lambda, wv, mse_init, mse_fit));
      r.wk.push_back(std::move(wk));
      r.wv.push_back(std::move(wv));
      r.mse_init.push_back(mse_init / 2);
      r.mse_fit.push_back(mse_fit / 2);
    }
    return r;
  }

 private:
  // One projection of leader i: the ridge fit or, when that is worse, the group mean of the
  // original matrices. Adds both MSEs to the running sums; `out` is [kv_dim, dim].
  absl::Status FitOne(const std::vector<double>& xtx, const CrossAccumulator& cross,
                      const std::vector<Tensor>& originals, size_t leader, double lambda,
                      std::vector<float>& out, double& mse_init, double& mse_fit) const {
    const int dim = c_.dim, kv = c_.kv_dim();
    const std::vector<double> xty = cross.Matrix();
    const LeastSquaresStats stats{dim, kv, cross.count(), xtx, xty, cross.y_sum_squares()};
    PDSERVE_ASSIGN_OR_RETURN(std::vector<double> fit, RidgeSolve(stats, lambda));
    std::vector<double> init(static_cast<size_t>(dim) * kv, 0.0);  // [dim, kv] = mean Wᵀ
    for (int m = 0; m < g_; ++m) {
      const float* w = originals[leader * g_ + m].as<float>();
      for (int o = 0; o < kv; ++o) {
        for (int in = 0; in < dim; ++in) {
          init[static_cast<size_t>(in) * kv + o] += double{w[int64_t{o} * dim + in]} / g_;
        }
      }
    }
    PDSERVE_ASSIGN_OR_RETURN(double e_init, MeanSquaredError(stats, init));
    PDSERVE_ASSIGN_OR_RETURN(double e_fit, MeanSquaredError(stats, fit));
    const std::vector<double>& chosen = e_fit <= e_init ? fit : init;
    mse_init += e_init;
    mse_fit += std::min(e_fit, e_init);
    out.resize(static_cast<size_t>(kv) * dim);
    for (int o = 0; o < kv; ++o) {
      for (int in = 0; in < dim; ++in) {
        out[static_cast<size_t>(o) * dim + in] =
            static_cast<float>(chosen[static_cast<size_t>(in) * kv + o]);
      }
    }
    return absl::OkStatus();
  }

  const ModelWeights& w_;
  const ModelConfig& c_;
  int l_, g_;
  ThreadPool& pool_;
  std::vector<Tensor> wk_, wv_;  // f32, layers l..L-1
  std::vector<std::vector<float>> y_k_, y_v_;
  std::vector<float> x_, workspace_;
  int n_ = 0;
  GramAccumulator gram_{c_.dim};
  std::vector<CrossAccumulator> cross_k_, cross_v_;
};

// Phase 2's observer: Gram matrices per cache layer and KV head.
class ZackObserver final : public ForwardObserver {
 public:
  explicit ZackObserver(const ModelWeights& weights) : c_(weights.config) {
    const SwiftKvWeights* sw = weights.swiftkv ? &*weights.swiftkv : nullptr;
    for (int j = 0; j < c_.n_layers; ++j) cache_of_.push_back(sw ? sw->CacheLayer(j) : j);
    const int caches = cache_of_.back() + 1, d = c_.head_dim();
    qk_.resize(caches);
    vo_.resize(caches);
    for (int cache = 0; cache < caches; ++cache) {
      for (int g = 0; g < c_.n_kv_heads; ++g) {
        qk_[cache].emplace_back(d);
        vo_[cache].emplace_back(d);
      }
    }
    // The o-projection slices every reading layer applies to its cache's values.
    const int group = c_.n_heads / c_.n_kv_heads;
    for (int j = 0; j < c_.n_layers; ++j) {
      const Tensor wo = ToF32(weights.layers[j].wo);
      for (int h = 0; h < c_.n_heads; ++h) {
        vo_[cache_of_[j]][h / group].Add(wo.as<float>() + int64_t{h} * d, c_.dim, wo.cols());
      }
    }
  }

  void LayerInput(int, const float*, int) override {}
  void Queries(int layer, const float* q, int64_t stride, int n) override {
    const int d = c_.head_dim(), group = c_.n_heads / c_.n_kv_heads;
    for (int h = 0; h < c_.n_heads; ++h) {
      qk_[cache_of_[layer]][h / group].Add(q + int64_t{h} * d, n, stride);
    }
  }
  void CachedKv(int cache, const float* k, const float* v, int64_t stride, int n) override {
    const int d = c_.head_dim();
    for (int g = 0; g < c_.n_kv_heads; ++g) {
      qk_[cache][g].Add(k + int64_t{g} * d, n, stride);
      vo_[cache][g].Add(v + int64_t{g} * d, n, stride);
    }
  }

  absl::StatusOr<ZackBases> Solve(const CalibrateOptions& options) const {
    ZackBases bases;
    const int d = c_.head_dim();
    const int multiple = ZackRankMultipleFor(options.zack_rank_multiple, d);
    for (size_t cache = 0; cache < qk_.size(); ++cache) {
      bases.heads.emplace_back();
      for (int g = 0; g < c_.n_kv_heads; ++g) {
        ZackHeadBasis head;
        PDSERVE_ASSIGN_OR_RETURN(SymmetricEigenResult qk,
                                 SymmetricEigen(qk_[cache][g].Matrix(), d));
        PDSERVE_ASSIGN_OR_RETURN(SymmetricEigenResult vo,
                                 SymmetricEigen(vo_[cache][g].Matrix(), d));
        head.qk_basis.assign(qk.vectors.begin(), qk.vectors.end());
        head.qk_eigenvalues = qk.values;
        head.vo_basis.assign(vo.vectors.begin(), vo.vectors.end());
        head.vo_eigenvalues = vo.values;
        bases.heads.back().push_back(std::move(head));
      }
    }
    bases.removal_rate = options.zack_rho;
    if (options.zack_kept_fraction > 0.0) {
      std::vector<WeightedSpectrum> spectra;
      for (const auto& layer : bases.heads) {
        for (const ZackHeadBasis& head : layer) {
          spectra.push_back({head.qk_eigenvalues, 1.0});
          spectra.push_back({head.vo_eigenvalues, 1.0});
        }
      }
      PDSERVE_ASSIGN_OR_RETURN(bases.removal_rate,
                               RemovalRateForTarget(spectra, options.zack_kept_fraction, multiple));
    }
    for (auto& layer : bases.heads) {
      for (ZackHeadBasis& head : layer) {
        head.qk_rank = RoundRankUpToMultiple(
            RankForRemovalRate(head.qk_eigenvalues, bases.removal_rate), d, multiple);
        head.vo_rank = RoundRankUpToMultiple(
            RankForRemovalRate(head.vo_eigenvalues, bases.removal_rate), d, multiple);
      }
    }
    return bases;
  }

 private:
  const ModelConfig& c_;
  std::vector<int> cache_of_;
  std::vector<std::vector<GramAccumulator>> qk_, vo_;
};

absl::Status ValidateOptions(const ModelConfig& c, const CalibrateOptions& o, size_t sequences) {
  if (sequences == 0) return absl::InvalidArgumentError("calibrate: no calibration text");
  if (o.swiftkv_layer < 0 && !o.zack) {
    return absl::InvalidArgumentError(
        "calibrate: nothing to do; ask for --swiftkv-layer and/or ZACK bases");
  }
  if (o.swiftkv_layer >= c.n_layers || o.across_kv < 1 ||
      (o.swiftkv_layer >= 0 && (c.n_layers - o.swiftkv_layer) % o.across_kv != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibrate: --swiftkv-layer ", o.swiftkv_layer, " must be below the ", c.n_layers,
        " layers and --across-kv ", o.across_kv, " ≥ 1 must divide the layers after it"));
  }
  if (!(o.ridge >= 0.0) || !(o.zack_rho >= 0.0) || o.zack_rho > 1.0 ||
      !(o.zack_kept_fraction >= 0.0) || o.zack_kept_fraction > 1.0) {
    return absl::InvalidArgumentError(
        "calibrate: the ridge must be ≥ 0, ZACK ρ in [0, 1] and the kept fraction in (0, 1]");
  }
  if (o.zack_rank_multiple < 0 || o.zack_rank_multiple > c.head_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibrate: --zack-rank-multiple ", o.zack_rank_multiple, " must be in [0, ",
                     c.head_dim(), "] (0: automatic; at most the model's head dimension)"));
  }
  return absl::OkStatus();
}

}  // namespace

int ZackRankMultipleFor(int option, int head_dim) {
  if (option > 0) return option;
  return head_dim >= 4 * kZackAutoRankMultiple && head_dim % kZackAutoRankMultiple == 0
             ? kZackAutoRankMultiple
             : 1;
}

absl::StatusOr<Calibration> Calibrate(const ModelWeights& weights,
                                      std::span<const std::vector<int32_t>> sequences,
                                      const CalibrateOptions& options, const std::string& corpus) {
  const ModelConfig& c = weights.config;
  PDSERVE_RETURN_IF_ERROR(ValidateOptions(c, options, sequences.size()));
  Calibration calibration;
  calibration.model = CalibrationModelOf(c);
  calibration.corpus = corpus.substr(0, kMaxCalibrationCorpusBytes);
  for (const std::vector<int32_t>& s : sequences) calibration.tokens += s.size();
  ModelWeights plain = weights;
  plain.swiftkv.reset();
  if (options.swiftkv_layer >= 0) {
    if (weights.swiftkv.has_value() && weights.swiftkv->layer < c.n_layers) {
      return absl::InvalidArgumentError(
          "calibrate: SwiftKV recovery is for plain models; this checkpoint is already SwiftKV");
    }
    PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<LlamaEngine> engine,
                             CalibrationEngine(plain, sequences, options));
    ThreadPool pool(engine->options().num_threads);
    RecoveryObserver observer(plain, options.swiftkv_layer, options.across_kv, pool);
    engine->set_observer(&observer);
    PDSERVE_RETURN_IF_ERROR(
        RunAll(*engine, sequences, "swiftkv", options, [&observer] { observer.Finish(); }));
    PDSERVE_ASSIGN_OR_RETURN(calibration.swiftkv, observer.Solve(options.ridge));
  }
  if (options.zack) {
    CompressionProfile profile;
    profile.swiftkv_layer = options.swiftkv_layer;
    profile.across_kv = options.across_kv;
    profile.swiftkv_recovery = calibration.swiftkv.has_value();
    PDSERVE_ASSIGN_OR_RETURN(
        PreparedModel student,
        PrepareModel(options.swiftkv_layer >= 0 ? plain : weights, profile, &calibration));
    PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<LlamaEngine> engine,
                             CalibrationEngine(student.weights, sequences, options));
    ZackObserver observer(student.weights);
    engine->set_observer(&observer);
    PDSERVE_RETURN_IF_ERROR(RunAll(*engine, sequences, "zack", options, nullptr));
    PDSERVE_ASSIGN_OR_RETURN(calibration.zack, observer.Solve(options));
  }
  PDSERVE_RETURN_IF_ERROR(ValidateCalibration(calibration));
  return calibration;
}

}  // namespace pdserve
