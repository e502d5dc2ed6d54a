#include "core/engine/kv_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"

namespace pdserve {
namespace {

absl::Status ValidateZack(const ModelConfig& c, const ZackBases& zack, int n_caches) {
  if (static_cast<int>(zack.heads.size()) != n_caches) {
    return absl::InvalidArgumentError(absl::StrCat("ZACK: bases for ", zack.heads.size(),
                                                   " cache layers; the model has ", n_caches));
  }
  const int d = c.head_dim();
  for (int layer = 0; layer < n_caches; ++layer) {
    if (static_cast<int>(zack.heads[layer].size()) != c.n_kv_heads) {
      return absl::InvalidArgumentError(absl::StrCat("ZACK: cache layer ", layer, " has bases for ",
                                                     zack.heads[layer].size(), " KV heads, not ",
                                                     c.n_kv_heads));
    }
    for (const ZackHeadBasis& head : zack.heads[layer]) {
      if (head.qk_rank < 1 || head.qk_rank > d || head.vo_rank < 1 || head.vo_rank > d ||
          head.qk_basis.size() != static_cast<size_t>(d) * d ||
          head.vo_basis.size() != static_cast<size_t>(d) * d) {
        return absl::InvalidArgumentError(absl::StrCat("ZACK: cache layer ", layer, " has ranks (",
                                                       head.qk_rank, ", ", head.vo_rank,
                                                       ") or bases that do not fit head dim ", d));
      }
    }
  }
  return absl::OkStatus();
}

// The model layer that first reads cache layer `cache`.
int FirstReader(int cache, int l, int group) { return cache < l ? cache : l + (cache - l) * group; }

CachePlan PlanCache(const ModelConfig& c, const KvCompression& compression, int page_size,
                    int cache, int first_reader) {
  const int d = c.head_dim(), group = c.n_heads / c.n_kv_heads;
  CachePlan plan;
  std::vector<int> k_dims(c.n_kv_heads, d), v_dims(c.n_kv_heads, d);
  if (compression.zack != nullptr) {
    for (int g = 0; g < c.n_kv_heads; ++g) {
      const ZackHeadBasis& head = compression.zack->heads[cache][g];
      k_dims[g] = head.qk_rank;
      v_dims[g] = head.vo_rank;
      plan.k_basis_offsets.push_back(static_cast<int64_t>(plan.k_basis.size()));
      plan.k_basis.insert(plan.k_basis.end(), head.qk_basis.begin(),
                          head.qk_basis.begin() + int64_t{head.qk_rank} * d);
    }
  }
  for (int h = 0; h < c.n_heads; ++h) {
    plan.q_offsets.push_back(plan.q_width);
    plan.out_offsets.push_back(plan.out_width);
    plan.q_width += k_dims[h / group];
    plan.out_width += v_dims[h / group];
  }
  for (int dim : v_dims) plan.v_width += dim;
  const KvElement element = compression.fp8 != KvScaleMode::kNone ? KvElement::kE4M3
                            : compression.f16                     ? KvElement::kF16
                                                                  : KvElement::kF32;
  plan.layout = {KvSectionLayout(page_size, k_dims, element, compression.fp8),
                 KvSectionLayout(page_size, v_dims, element, compression.fp8)};
  plan.kcache = compression.kcache.enabled() && first_reader >= compression.kcache.full_layers;
  return plan;
}

// The V projection wv [kv_dim, cols] (cols = dim; 1 for a bias) folded with the cache's V/O bases:
// head g's rows become basis_g[0, r) · wv_g, [Σ r, cols] in f32. Unchanged without ZACK.
Tensor FoldV(const Tensor& wv, const ModelConfig& c, const ZackBases* zack, int cache) {
  if (zack == nullptr) return wv;
  const int d = c.head_dim();
  const int64_t dim = wv.cols();
  const Tensor w = ToF32(wv);
  const float* src = w.as<float>();
  std::vector<float> out;
  for (int g = 0; g < c.n_kv_heads; ++g) {
    const ZackHeadBasis& head = zack->heads[cache][g];
    for (int i = 0; i < head.vo_rank; ++i) {
      std::vector<double> row(dim, 0.0);
      for (int k = 0; k < d; ++k) {
        const double b = head.vo_basis[int64_t{i} * d + k];
        const float* w_row = src + (int64_t{g} * d + k) * dim;
        for (int x = 0; x < dim; ++x) row[x] += b * w_row[x];
      }
      out.insert(out.end(), row.begin(), row.end());
    }
  }
  const int64_t rows = static_cast<int64_t>(out.size()) / dim;
  return MakeF32Tensor(std::move(out), {rows, dim});
}

void Append(std::vector<float>& out, const Tensor& vector) {
  const Tensor f32 = ToF32(vector);
  out.insert(out.end(), f32.as<float>(), f32.as<float>() + f32.rows());
}

// A V bias [kv_dim] folded as FoldV folds wv's rows (it is a one-column wv).
Tensor FoldVBias(const Tensor& bv, const ModelConfig& c, const ZackBases* zack, int cache) {
  Tensor column = bv;
  column.shape = {c.kv_dim(), 1};
  return FoldV(column, c, zack, cache);
}

// The biases [bq; bk; bv] added to the output of format.Stack({wq, wk, FoldV(wv)}), bv folded;
// [bq] alone for a layer that projects only queries. Empty without biases.
std::vector<float> StackBiases(const LayerWeights& w, const ModelConfig& c, const ZackBases* zack,
                               int cache, bool writes_kv) {
  if (!c.traits().qkv_bias) return {};
  std::vector<float> out;
  Append(out, w.bq);
  if (!writes_kv) return out;
  Append(out, w.bk);
  Append(out, FoldVBias(w.bv, c, zack, cache));
  return out;
}

// The mean of `field` ([n] vectors) over layers [first, first + count), f32.
Tensor MeanOverLayers(const ModelWeights& w, Tensor LayerWeights::*field, int first, int count) {
  const int64_t n = (w.layers[first].*field).rows();
  std::vector<float> mean(n, 0.0f);
  for (int j = first; j < first + count; ++j) {
    const Tensor f32 = ToF32(w.layers[j].*field);
    for (int64_t i = 0; i < n; ++i) mean[i] += f32.as<float>()[i] / static_cast<float>(count);
  }
  return MakeF32Tensor(std::move(mean), {n});
}

// SwiftKV's fused leader projection carries each AcrossKV group's biases and K head norms as it
// carries its K/V matrices: the group's mean (a group of one keeps its layer's exactly). Biases
// are [every leader's bk; every leader's bv folded], matching swiftkv_kv's rows.
void PlanSwiftKvExtras(const ModelWeights& w, const SwiftKvWeights& sw, const ZackBases* zack,
                       KvPlan& plan) {
  const ModelConfig& c = w.config;
  const int leaders = static_cast<int>(sw.wk.size());
  auto leader_layer = [&](int i) { return sw.layer + i * sw.group; };
  if (c.traits().qkv_bias) {
    for (int i = 0; i < leaders; ++i) {
      Append(plan.swiftkv_b, MeanOverLayers(w, &LayerWeights::bk, leader_layer(i), sw.group));
    }
    for (int i = 0; i < leaders; ++i) {
      const Tensor bv = MeanOverLayers(w, &LayerWeights::bv, leader_layer(i), sw.group);
      Append(plan.swiftkv_b, FoldVBias(bv, c, zack, sw.layer + i));
    }
  }
  if (c.traits().qk_norm) {
    for (int i = 0; i < leaders; ++i) {
      Append(plan.swiftkv_k_norms,
             MeanOverLayers(w, &LayerWeights::k_norm, leader_layer(i), sw.group));
    }
  }
}

// The o-projection wo [dim, n_heads·d] reading ZACK outputs: query head h's columns become
// wo_h · basis_g(h)[0, r)ᵀ, [dim, out_width] in f32. Unchanged without ZACK.
Tensor FoldO(const Tensor& wo, const ModelConfig& c, const ZackBases* zack, const CachePlan& plan,
             int cache) {
  if (zack == nullptr) return wo;
  const int d = c.head_dim(), group = c.n_heads / c.n_kv_heads;
  const Tensor w = ToF32(wo);
  const float* src = w.as<float>();
  std::vector<float> out(static_cast<size_t>(c.dim) * plan.out_width);
  for (int r = 0; r < c.dim; ++r) {
    const float* w_row = src + int64_t{r} * c.n_heads * d;
    for (int h = 0; h < c.n_heads; ++h) {
      const ZackHeadBasis& head = zack->heads[cache][h / group];
      for (int i = 0; i < head.vo_rank; ++i) {
        double sum = 0.0;
        for (int k = 0; k < d; ++k) sum += double{w_row[h * d + k]} * head.vo_basis[i * d + k];
        out[int64_t{r} * plan.out_width + plan.out_offsets[h] + i] = static_cast<float>(sum);
      }
    }
  }
  return MakeF32Tensor(std::move(out), {c.dim, plan.out_width});
}

}  // namespace

absl::Status KvCompression::Validate() const {
  if (kcache.top_n < 0 || kcache.full_layers < 0 || kcache.sink < 0 || kcache.recent < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("KCache: top-n ", kcache.top_n, ", full layers ", kcache.full_layers,
                     " and sink ", kcache.sink, " must not be negative, and recent ", kcache.recent,
                     " must be ≥ 1 (the newest token always attends to itself)"));
  }
  if (fp8 != KvScaleMode::kNone && fp8 != KvScaleMode::kPerTokenHead &&
      fp8 != KvScaleMode::kPerPageHead) {
    return absl::InvalidArgumentError("FP8: unknown scale mode");
  }
  if (f16 && fp8 != KvScaleMode::kNone) {
    return absl::InvalidArgumentError(
        "KV elements: f16 and FP8 exclude each other (FP8 stores e4m3 codes)");
  }
  if (!retention.enabled()) return absl::OkStatus();
  if (absl::Status status = retention.Validate(); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("token retention: ", status.message()));
  }
  if (retention.recent < 1) {
    return absl::InvalidArgumentError(absl::StrCat("token retention: recent ", retention.recent,
                                                   " must be ≥ 1 (the prompt's last token stays)"));
  }
  return absl::OkStatus();
}

namespace {

std::string DescribeSection(const KvSectionLayout& section) {
  return absl::StrCat(section.page_size(), " ", KvElementName(section.element()), " ",
                      KvScaleModeName(section.scale_mode()), " [",
                      absl::StrJoin(section.dims(), ","), "]");
}

}  // namespace

std::string DescribeKvPlanStorage(const KvPlan& plan) {
  std::string out = absl::StrCat("swiftkv ", plan.swiftkv_layer, "; layers");
  for (const LayerPlan& layer : plan.layers) {
    absl::StrAppend(&out, " ", layer.cache, layer.writes_kv ? "w" : "r");
  }
  for (const CachePlan& cache : plan.caches) {
    absl::StrAppend(&out, "; k ", DescribeSection(cache.layout.k), " v ",
                    DescribeSection(cache.layout.v));
  }
  return out;
}

double KvPlan::kv_bytes_per_token() const {
  double bytes = 0.0;
  for (const CachePlan& cache : caches) bytes += cache.layout.bytes_per_token();
  return bytes;
}

double Fp16KvBytesPerToken(const ModelConfig& config) {
  return 2.0 * config.n_layers * config.kv_dim() * 2.0;
}

absl::StatusOr<KvPlan> BuildKvPlan(const ModelWeights& weights, const KvCompression& compression,
                                   int page_size, const WeightFormat& format) {
  PDSERVE_RETURN_IF_ERROR(compression.Validate());
  const ModelConfig& c = weights.config;
  const int L = c.n_layers;
  const SwiftKvWeights* sw =
      weights.swiftkv.has_value() && weights.swiftkv->layer < L ? &*weights.swiftkv : nullptr;
  KvPlan plan;
  plan.swiftkv_layer = sw ? sw->layer : L;
  const int l = plan.swiftkv_layer, group = sw ? sw->group : 1;
  const int n_caches = sw ? sw->CacheLayer(L - 1) + 1 : L;
  const ZackBases* zack = compression.zack.get();
  if (zack != nullptr) PDSERVE_RETURN_IF_ERROR(ValidateZack(c, *zack, n_caches));
  for (int cache = 0; cache < n_caches; ++cache) {
    plan.caches.push_back(
        PlanCache(c, compression, page_size, cache, FirstReader(cache, l, group)));
  }
  for (int j = 0; j < L; ++j) {
    const LayerWeights& w = weights.layers[j];
    LayerPlan layer;
    layer.cache = sw ? sw->CacheLayer(j) : j;
    layer.writes_kv = j < l;
    if (layer.writes_kv) {
      layer.w_in = format.Stack({w.wq, w.wk, FoldV(w.wv, c, zack, layer.cache)});
    } else {
      layer.w_in = StackedWeights{{format.ApplyOwned(sw->wq[j - l])}};
    }
    layer.b_in = StackBiases(w, c, zack, layer.cache, layer.writes_kv);
    layer.wo = format.ApplyOwned(FoldO(w.wo, c, zack, plan.caches[layer.cache], layer.cache));
    plan.layers.push_back(std::move(layer));
  }
  if (sw != nullptr) {
    plan.swiftkv_norm = ToF32(sw->norm);
    std::vector<Tensor> parts;
    for (const Tensor& wk : sw->wk) parts.push_back(wk);
    int v_offset = 0;
    for (size_t i = 0; i < sw->wv.size(); ++i) {
      const int cache = l + static_cast<int>(i);
      parts.push_back(FoldV(sw->wv[i], c, zack, cache));
      plan.swiftkv_v_offsets.push_back(v_offset);
      v_offset += plan.caches[cache].v_width;
    }
    plan.swiftkv_kv = format.Stack(parts);
    PlanSwiftKvExtras(weights, *sw, zack, plan);
  }
  return plan;
}

}  // namespace pdserve
