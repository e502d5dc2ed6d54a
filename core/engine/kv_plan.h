// KvPlan: what the engine runs per layer and stores per cache layer once SwiftKV, AcrossKV, ZACK,
// FP8 and KCache are applied to a model. Built once at engine creation:
//
//  - Cache layers: layers < l own one each; with SwiftKV each AcrossKV group of later layers shares
//    its leader's (SwiftKvWeights::CacheLayer). Each has a K and a V section layout: widths are
//    the ZACK ranks (or head_dim), elements FP8 or f32. KCache caches keep V in the value tier.
//  - Layers < l project [q; k; v] from their input, later layers only q (their K/V come from
//    x = RMSNorm(h_l) through one fused projection of every leader's [k; v], which carries the
//    family's K/V biases and K head norms as it carries the matrices: the group's mean).
//  - ZACK (DESIGN §4): each V projection is folded with its cache's V/O basis (rows [r_v, d] per
//    KV head), each o-projection with the basis of the cache it reads; K and q stay full width and
//    are projected by the Q/K basis after RoPE (k_basis), which cannot be folded.
//
// Without ZACK the matrices are the model's (converted to the engine's dtype and stacked), so the
// engine computes exactly what it did before any of this existed.
#ifndef PDSERVE_CORE_ENGINE_KV_PLAN_H_
#define PDSERVE_CORE_ENGINE_KV_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/engine/kv_compression.h"
#include "core/kv/kv_layout.h"
#include "core/model/model_weights.h"
#include "core/model/weight_format.h"
#include "core/tensor/dtype.h"

namespace pdserve {

struct CachePlan {
  KvLayerLayout layout;
  bool kcache = false;  // V in the value tier
  // ZACK Q/K basis: KV head g's rows [k_dim(g), head_dim] at k_basis_offsets[g]; empty = none.
  std::vector<float> k_basis;
  std::vector<int64_t> k_basis_offsets;
  // Per query head, float offsets of its slice in a packed query row (widths k_dim(g)) and in a
  // packed attention-output row (widths v_dim(g)).
  std::vector<int> q_offsets, out_offsets;
  int q_width = 0;    // Σ over query heads of k_dim(g): packed query row after ZACK
  int out_width = 0;  // Σ over query heads of v_dim(g): what the o-projection reads
  int v_width = 0;    // Σ over KV heads of v_dim(g): the V projection's rows
  bool zack() const { return !k_basis.empty(); }
};

struct LayerPlan {
  int cache = 0;           // cache layer it reads (and writes when writes_kv)
  bool writes_kv = false;  // projects its own k/v (layers < l)
  StackedWeights w_in;     // [q_dim (q) + (writes_kv ? kv_dim (k) + v_width (v) : 0), dim]
  // Added to w_in's output rows (the v part folded like w_in's); empty when the family has none.
  std::vector<float> b_in;
  Tensor wo;  // [dim, out_width]
};

struct KvPlan {
  std::vector<LayerPlan> layers;
  std::vector<CachePlan> caches;
  int swiftkv_layer = 0;  // l; = n_layers when SwiftKV is off
  Tensor swiftkv_norm;    // [dim] f32
  // [n_leaders · kv_dim (every leader's k) + Σ leaders' v_width, dim]
  StackedWeights swiftkv_kv;
  std::vector<int> swiftkv_v_offsets;  // per leader, its v rows' first row minus n_leaders·kv_dim
  // Families with biases / K head norms: added to swiftkv_kv's output rows ([n_leaders · kv_dim +
  // Σ v_width], the v part folded) and applied to each leader's K heads ([n_leaders · head_dim]),
  // each the mean over the leader's AcrossKV group; empty otherwise.
  std::vector<float> swiftkv_b, swiftkv_k_norms;

  bool swiftkv() const {
    return !layers.empty() && swiftkv_layer < static_cast<int>(layers.size());
  }
  // Stored bytes per token over all cache layers (K, V and amortized scales).
  double kv_bytes_per_token() const;
};

// InvalidArgument when the compression does not fit the model (ZACK bases for another number of
// cache layers or heads, ranks out of range) or the options are invalid.
absl::StatusOr<KvPlan> BuildKvPlan(const ModelWeights& weights, const KvCompression& compression,
                                   int page_size, const WeightFormat& format);

// What a plan makes of a model's KV, as text: the SwiftKV layer, the cache layer each layer reads
// and whether it writes it, and each cache layer's K and V layouts (page size, element, scales,
// widths). Equal for plans that store the same KV bytes for the same weights and calibration (the
// prefix cache's identity); KCache, which changes where V lives but not its bytes, is left out.
std::string DescribeKvPlanStorage(const KvPlan& plan);

// Stored bytes per token of the plain model's KV in fp16: the baseline compression is measured
// against.
double Fp16KvBytesPerToken(const ModelConfig& config);

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_KV_PLAN_H_
