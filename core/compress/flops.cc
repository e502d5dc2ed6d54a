#include "core/compress/flops.h"

namespace pdserve {
namespace {

double MatmulFlops(const Tensor& w, double rows) {
  return 2.0 * rows * static_cast<double>(w.shape[0]) * static_cast<double>(w.shape[1]);
}

double MatmulFlops(const StackedWeights& w, double rows) {
  return 2.0 * rows * static_cast<double>(w.rows()) * static_cast<double>(w.cols());
}

// Attention of `queries` consecutive queries ending at position `last` (inclusive) on one cache.
double AttentionFlops(const ModelConfig& c, const CachePlan& cache, int queries, int last) {
  double keys = 0.0;  // Σ over the queries of the tokens each sees
  for (int p = last - queries + 1; p <= last; ++p) keys += p + 1;
  return 2.0 * keys * (cache.q_width + cache.out_width) +
         (cache.zack() ? 2.0 * queries * c.head_dim() * cache.q_width : 0.0);
}

// ZACK's projection of every stored key of a cache: Σ_g r_k(g) · head_dim per token.
double KeyProjectionFlops(const ModelConfig& c, const CachePlan& cache, double tokens) {
  if (!cache.zack()) return 0.0;
  return 2.0 * tokens * c.head_dim() * (cache.q_width / (c.n_heads / c.n_kv_heads));
}

}  // namespace

double PrefillFlops(const ModelConfig& c, const KvPlan& plan, int prompt_tokens) {
  const double n = prompt_tokens;
  const double mlp = 2.0 * 3.0 * c.dim * c.hidden_dim;  // per token per layer
  double flops = 2.0 * c.dim * c.vocab_size;            // classifier, last token
  for (int j = 0; j < static_cast<int>(plan.layers.size()); ++j) {
    const LayerPlan& layer = plan.layers[j];
    const CachePlan& cache = plan.caches[layer.cache];
    const int rows = j < plan.swiftkv_layer ? prompt_tokens : 1;
    flops += MatmulFlops(layer.w_in, rows) + MatmulFlops(layer.wo, rows) + mlp * rows;
    flops += AttentionFlops(c, cache, rows, prompt_tokens - 1);
    if (layer.writes_kv) flops += KeyProjectionFlops(c, cache, n);
  }
  if (plan.swiftkv()) {
    flops += MatmulFlops(plan.swiftkv_kv, n);
    for (size_t cache = plan.swiftkv_layer; cache < plan.caches.size(); ++cache) {
      flops += KeyProjectionFlops(c, plan.caches[cache], n);
    }
  }
  return flops;
}

}  // namespace pdserve
