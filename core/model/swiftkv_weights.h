// SwiftKvWeights: the extra tensors of a SwiftKV model (DESIGN §4, research/algorithms.md §1).
// Layers ≥ layer take their K/V from x = RMSNorm(h_layer; norm) through the projections of their
// AcrossKV group leader (layer + i·group), and their queries from wq[j − layer]. The rest of every
// layer (o-projection, MLP, norms) is the base model's. q/k rows follow config.rope_pairing like
// the layers' wq/wk. A plain value type of shared, immutable tensors; safe to read from many
// threads.
#ifndef PDSERVE_CORE_MODEL_SWIFTKV_WEIGHTS_H_
#define PDSERVE_CORE_MODEL_SWIFTKV_WEIGHTS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor/tensor.h"

namespace pdserve {

struct ModelConfig;
struct ModelWeights;

struct SwiftKvWeights {
  int layer = 0;  // l: first layer whose KV comes from h_l; l = n_layers means SwiftKV is off
  int group = 1;  // G: consecutive later layers sharing one KV cache (AcrossKV)
  Tensor norm;    // [dim]
  std::vector<Tensor> wq;  // per later layer j ≥ l, [dim, dim]
  std::vector<Tensor> wk;  // per group leader, [kv_dim, dim]
  std::vector<Tensor> wv;  // per group leader, [kv_dim, dim]

  int num_later_layers(int n_layers) const { return n_layers - layer; }
  int num_leaders(int n_layers) const { return (n_layers - layer) / group; }
  // The cache layer (index among allocated caches) that model layer j reads and writes.
  int CacheLayer(int j) const { return j < layer ? j : layer + (j - layer) / group; }
};

// InvalidArgument (naming the field or tensor) unless 0 ≤ l ≤ L, G ≥ 1
// divides L − l, wq holds L − l and wk/wv (L − l)/G matrices of their shapes, and, when l < L, norm
// is [dim] f32. Matrices may be f32, f16 or bf16, not necessarily alike. At l = L norm is not read.
absl::Status ValidateSwiftKv(const ModelConfig& config, const SwiftKvWeights& swiftkv);

// Rewires a plain model the way SwiftKV training initializes it: norm = layer l's attention norm,
// wq = the original query projections, each leader's wk/wv = the mean of its group's original
// projections. wq (and wk/wv when G = 1) share the layers' tensors; G > 1 means are new f32
// tensors. l = L gives the empty identity SwiftKV {layer L, group 1}. A family's q biases and
// head norms stay the layers'; the leaders' K/V biases and K norms are taken (as group means) by
// BuildKvPlan. InvalidArgument for l or G out of range or invalid weights.
absl::StatusOr<SwiftKvWeights> RewireSwiftKv(const ModelWeights& weights, int layer, int group);

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_SWIFTKV_WEIGHTS_H_
