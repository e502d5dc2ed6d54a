#include "core/model/swiftkv_weights.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/model/model_weights.h"

namespace pdserve {
namespace {

absl::Status CheckTensor(const Tensor& t, const std::string& name,
                         const std::vector<int64_t>& expected) {
  if (t.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("weights: tensor ", name, " is missing"));
  }
  if (t.shape != expected) {
    return absl::InvalidArgumentError(absl::StrCat("weights: tensor ", name, " has shape [",
                                                   absl::StrJoin(t.shape, ", "), "], expected [",
                                                   absl::StrJoin(expected, ", "), "]"));
  }
  return absl::OkStatus();
}

// InvalidArgument unless 0 ≤ layer ≤ n_layers, group ≥ 1 and group divides n_layers − layer.
absl::Status CheckLayerAndGroup(int n_layers, int layer, int group) {
  if (layer < 0 || layer > n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("swiftkv: layer ", layer, " is outside [0, ", n_layers, "]"));
  }
  if (group < 1) {
    return absl::InvalidArgumentError(absl::StrCat("swiftkv: group ", group, " is not ≥ 1"));
  }
  if ((n_layers - layer) % group != 0) {
    return absl::InvalidArgumentError(absl::StrCat("swiftkv: group ", group,
                                                   " does not divide the ", n_layers - layer,
                                                   " layers from layer ", layer, " on"));
  }
  return absl::OkStatus();
}

absl::Status CheckCount(const std::vector<Tensor>& tensors, const char* name, int expected,
                        const char* per) {
  if (static_cast<int>(tensors.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "swiftkv: ", tensors.size(), " ", name, " matrices, expected ", expected, " (", per, ")"));
  }
  return absl::OkStatus();
}

// The element-wise mean of equally shaped matrices, computed and returned in f32.
Tensor MeanF32(const std::vector<const Tensor*>& parts) {
  std::vector<float> sum(static_cast<size_t>(parts.front()->NumElements()), 0.0f);
  for (const Tensor* part : parts) {
    const Tensor f32 = ToF32(*part);
    const float* values = f32.as<float>();
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += values[i];
  }
  const float count = static_cast<float>(parts.size());
  for (float& v : sum) v /= count;
  return MakeF32Tensor(std::move(sum), parts.front()->shape);
}

}  // namespace

absl::Status ValidateSwiftKv(const ModelConfig& config, const SwiftKvWeights& swiftkv) {
  const int n_layers = config.n_layers;
  PDSERVE_RETURN_IF_ERROR(CheckLayerAndGroup(n_layers, swiftkv.layer, swiftkv.group));
  const int l = swiftkv.layer;
  const int64_t d = config.dim, q = config.q_dim(), kv = config.kv_dim();
  PDSERVE_RETURN_IF_ERROR(
      CheckCount(swiftkv.wq, "wq", swiftkv.num_later_layers(n_layers), "one per layer ≥ layer"));
  PDSERVE_RETURN_IF_ERROR(
      CheckCount(swiftkv.wk, "wk", swiftkv.num_leaders(n_layers), "one per group leader"));
  PDSERVE_RETURN_IF_ERROR(
      CheckCount(swiftkv.wv, "wv", swiftkv.num_leaders(n_layers), "one per group leader"));
  if (l == n_layers) return absl::OkStatus();  // identity: no tensor is read
  PDSERVE_RETURN_IF_ERROR(CheckTensor(swiftkv.norm, "swiftkv.norm", {d}));
  if (swiftkv.norm.dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("weights: tensor swiftkv.norm is ",
                                                   DTypeName(swiftkv.norm.dtype), ", not f32"));
  }
  for (size_t i = 0; i < swiftkv.wq.size(); ++i) {
    PDSERVE_RETURN_IF_ERROR(CheckTensor(
        swiftkv.wq[i], absl::StrCat("swiftkv.wq[", i, "] (layer ", l + i, ")"), {q, d}));
  }
  for (size_t i = 0; i < swiftkv.wk.size(); ++i) {
    const std::string leader = absl::StrCat("] (layer ", l + i * swiftkv.group, ")");
    PDSERVE_RETURN_IF_ERROR(
        CheckTensor(swiftkv.wk[i], absl::StrCat("swiftkv.wk[", i, leader), {kv, d}));
    PDSERVE_RETURN_IF_ERROR(
        CheckTensor(swiftkv.wv[i], absl::StrCat("swiftkv.wv[", i, leader), {kv, d}));
  }
  return absl::OkStatus();
}

absl::StatusOr<SwiftKvWeights> RewireSwiftKv(const ModelWeights& weights, int layer, int group) {
  const int n_layers = weights.config.n_layers;
  PDSERVE_RETURN_IF_ERROR(CheckLayerAndGroup(n_layers, layer, group));
  PDSERVE_RETURN_IF_ERROR(ValidateWeights(weights));  // the means below rely on the shapes
  SwiftKvWeights out;
  out.layer = layer;
  out.group = layer == n_layers ? 1 : group;
  if (layer == n_layers) return out;
  out.norm = ToF32(weights.layers[layer].attn_norm);
  for (int j = layer; j < n_layers; ++j) out.wq.push_back(weights.layers[j].wq);
  for (int leader = layer; leader < n_layers; leader += group) {
    if (group == 1) {
      out.wk.push_back(weights.layers[leader].wk);
      out.wv.push_back(weights.layers[leader].wv);
      continue;
    }
    std::vector<const Tensor*> keys, values;
    for (int j = leader; j < leader + group; ++j) {
      keys.push_back(&weights.layers[j].wk);
      values.push_back(&weights.layers[j].wv);
    }
    out.wk.push_back(MeanF32(keys));
    out.wv.push_back(MeanF32(values));
  }
  return out;
}

}  // namespace pdserve
