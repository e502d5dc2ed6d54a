#include "core/compress/profile.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/calib/rank_selection.h"

namespace pdserve {
namespace {

Tensor VectorTensor(const std::vector<float>& values, std::vector<int64_t> shape) {
  return MakeF32Tensor(values, std::move(shape));
}

// The SwiftKV structure the profile asks for, or none.
absl::StatusOr<std::optional<SwiftKvWeights>> ResolveSwiftKv(const ModelWeights& weights,
                                                             const CompressionProfile& profile,
                                                             const Calibration* calibration) {
  const ModelConfig& c = weights.config;
  if (weights.swiftkv.has_value() && weights.swiftkv->layer < c.n_layers) {
    if (profile.swiftkv_layer >= 0 && (profile.swiftkv_layer != weights.swiftkv->layer ||
                                       profile.across_kv != weights.swiftkv->group)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SwiftKV: the checkpoint was trained with l=", weights.swiftkv->layer,
                       " G=", weights.swiftkv->group,
                       "; it cannot run with l=", profile.swiftkv_layer, " G=", profile.across_kv));
    }
    if (profile.swiftkv_recovery) {
      return absl::InvalidArgumentError(
          "SwiftKV: recovery is for rewired plain models; this checkpoint has trained projections");
    }
    return weights.swiftkv;
  }
  if (profile.swiftkv_layer < 0) {
    if (profile.swiftkv_recovery || profile.across_kv != 1) {
      return absl::InvalidArgumentError(
          "SwiftKV: recovery and AcrossKV need --swiftkv-layer on a plain model");
    }
    return std::optional<SwiftKvWeights>();
  }
  PDSERVE_ASSIGN_OR_RETURN(SwiftKvWeights rewired,
                           RewireSwiftKv(weights, profile.swiftkv_layer, profile.across_kv));
  if (!profile.swiftkv_recovery || rewired.layer == c.n_layers) return rewired;
  if (calibration == nullptr || !calibration->swiftkv.has_value() ||
      calibration->swiftkv->layer != rewired.layer ||
      calibration->swiftkv->group != rewired.group) {
    return absl::InvalidArgumentError(
        absl::StrCat("SwiftKV: recovery for l=", rewired.layer, " G=", rewired.group,
                     " is not in the calibration file; run `pdserve calibrate --swiftkv-layer ",
                     rewired.layer, " --across-kv ", rewired.group, "`"));
  }
  const SwiftKvRecovery& recovery = *calibration->swiftkv;
  rewired.norm = VectorTensor(recovery.norm, {c.dim});
  for (size_t i = 0; i < recovery.wk.size(); ++i) {
    rewired.wk[i] = VectorTensor(recovery.wk[i], {c.kv_dim(), c.dim});
    rewired.wv[i] = VectorTensor(recovery.wv[i], {c.kv_dim(), c.dim});
  }
  return rewired;
}

absl::StatusOr<std::shared_ptr<const ZackBases>> ResolveZack(const CompressionProfile& profile,
                                                             const Calibration* calibration) {
  if (!profile.zack) return std::shared_ptr<const ZackBases>();
  if (calibration == nullptr || !calibration->zack.has_value()) {
    return absl::InvalidArgumentError(
        "ZACK: needs a calibration file with bases (`pdserve calibrate --zack-rho ...`)");
  }
  auto bases = std::make_shared<ZackBases>(*calibration->zack);
  if (profile.zack_rho >= 0.0) {
    bases->removal_rate = profile.zack_rho;
    for (std::vector<ZackHeadBasis>& layer : bases->heads) {
      for (ZackHeadBasis& head : layer) {
        head.qk_rank = RankForRemovalRate(head.qk_eigenvalues, profile.zack_rho);
        head.vo_rank = RankForRemovalRate(head.vo_eigenvalues, profile.zack_rho);
      }
    }
  }
  return std::shared_ptr<const ZackBases>(std::move(bases));
}

// ZACK bases describe the cache of one model: the calibration's recovered SwiftKV model when the
// file has a recovery, else the model as loaded (plain, or a SwiftKV checkpoint as trained). Their
// cache layer count is checked against the served model's by BuildKvPlan.
absl::Status CheckZackMatchesSwiftKv(const ModelWeights& weights, const CompressionProfile& profile,
                                     const Calibration& calibration) {
  const bool checkpoint =
      weights.swiftkv.has_value() && weights.swiftkv->layer < weights.config.n_layers;
  const bool rewired =
      profile.swiftkv_layer >= 0 && !checkpoint && profile.swiftkv_layer < weights.config.n_layers;
  if (!calibration.swiftkv.has_value()) {
    if (!rewired) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "ZACK: the calibration's bases are for the model without SwiftKV rewiring; calibrate with "
        "the same --swiftkv-layer/--across-kv to serve them together");
  }
  const SwiftKvRecovery& r = *calibration.swiftkv;
  if (rewired && profile.swiftkv_recovery && profile.swiftkv_layer == r.layer &&
      profile.across_kv == r.group) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("ZACK: the calibration's bases are for SwiftKV l=", r.layer, " G=", r.group,
                   " with recovery; serve them with --swiftkv-layer ", r.layer, " --across-kv ",
                   r.group, " --swiftkv-recovery"));
}

}  // namespace

CalibrationModel CalibrationModelOf(const ModelConfig& config) {
  return {config.dim, config.n_layers, config.n_heads, config.n_kv_heads, config.head_dim()};
}

std::string CompressionProfile::Describe() const {
  std::string out;
  auto add = [&out](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (swiftkv_layer >= 0) {
    add(absl::StrCat("swiftkv l=", swiftkv_layer, " G=", across_kv,
                     swiftkv_recovery ? " +recovery" : ""));
  }
  if (zack) add(zack_rho >= 0 ? absl::StrCat("zack rho=", zack_rho) : "zack (file ranks)");
  if (fp8 != KvScaleMode::kNone) add(absl::StrCat("fp8 ", KvScaleModeName(fp8)));
  if (f16_kv) add("f16 kv");
  if (kcache.enabled()) {
    add(absl::StrCat("kcache N=", kcache.top_n, " full=", kcache.full_layers, " sink=", kcache.sink,
                     " recent=", kcache.recent, kcache.renormalize ? " renormalized" : ""));
  }
  if (retention.enabled()) add(retention.Describe());
  return out.empty() ? "plain" : out;
}

absl::StatusOr<PreparedModel> PrepareModel(const ModelWeights& weights,
                                           const CompressionProfile& profile,
                                           const Calibration* calibration) {
  if (calibration != nullptr && calibration->model != CalibrationModelOf(weights.config)) {
    return absl::InvalidArgumentError(
        "calibration: the file was made for a model of another shape (dim, layers or heads)");
  }
  PreparedModel prepared;
  prepared.weights = weights;
  PDSERVE_ASSIGN_OR_RETURN(prepared.weights.swiftkv, ResolveSwiftKv(weights, profile, calibration));
  PDSERVE_ASSIGN_OR_RETURN(prepared.compression.zack, ResolveZack(profile, calibration));
  if (profile.zack)
    PDSERVE_RETURN_IF_ERROR(CheckZackMatchesSwiftKv(weights, profile, *calibration));
  prepared.compression.fp8 = profile.fp8;
  prepared.compression.f16 = profile.f16_kv;
  prepared.compression.kcache = profile.kcache;
  prepared.compression.retention = profile.retention;
  PDSERVE_RETURN_IF_ERROR(prepared.compression.Validate());
  return prepared;
}

}  // namespace pdserve
