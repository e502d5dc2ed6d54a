#include "core/engine/llama_reference.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace pdserve {

LlamaReference::LlamaReference(const ModelWeights& weights)
    : weights_(ConvertWeights(weights, DType::kF32)), graph_(LayerGraph(weights_.config.traits())) {
  const ModelConfig& c = weights_.config;
  const size_t cache = size_t{1} * c.n_layers * c.kv_dim() * c.max_seq_len;
  key_cache_.resize(cache);
  value_cache_.resize(cache);
  for (auto [buffer, width] :
       {std::pair{&x_, c.dim}, std::pair{&xb_, c.dim}, std::pair{&q_, c.q_dim()},
        std::pair{&k_, c.kv_dim()}, std::pair{&v_, c.kv_dim()}, std::pair{&attn_, c.q_dim()},
        std::pair{&hb_, c.hidden_dim}, std::pair{&hb2_, c.hidden_dim}}) {
    buffer->resize(width);
  }
}

std::vector<float> LlamaReference::Forward(int token) {
  const ModelConfig& c = weights_.config;
  for (int i = 0; i < c.dim; ++i) {
    x_[i] = weights_.token_embedding.as<float>()[int64_t{token} * c.dim + i];
  }
  for (int layer = 0; layer < c.n_layers; ++layer) Layer(layer);
  kernels::RmsNormReference(x_.data(), weights_.final_norm.as<float>(), 1, c.dim, c.norm_eps,
                            x_.data());
  std::vector<float> logits(c.vocab_size);
  kernels::MatmulReference(x_.data(), 1, weights_.classifier, logits.data());
  ++position_;
  return logits;
}

void LlamaReference::Layer(int layer) {
  for (LayerStep step : graph_) Step(step, layer);
}

void LlamaReference::Step(LayerStep step, int layer) {
  const ModelConfig& c = weights_.config;
  const LayerWeights& w = weights_.layers[layer];
  const int d = c.head_dim(), pos = position_;
  const kernels::RopeParams rope = {
      .head_dim = d, .theta = c.rope_theta, .pairing = c.rope_pairing, .scaling = c.rope_scaling};
  // The contiguous cache is a paged cache with one page of max_seq_len tokens.
  const int64_t layer_offset = int64_t{layer} * c.kv_dim() * c.max_seq_len;
  switch (step) {
    case LayerStep::kAttentionNorm:
      kernels::RmsNormReference(x_.data(), w.attn_norm.as<float>(), 1, c.dim, c.norm_eps,
                                xb_.data());
      return;
    case LayerStep::kQkvProjection:
      kernels::MatmulReference(xb_.data(), 1, w.wq, q_.data());
      kernels::MatmulReference(xb_.data(), 1, w.wk, k_.data());
      kernels::MatmulReference(xb_.data(), 1, w.wv, v_.data());
      return;
    case LayerStep::kQkvBias:
      for (auto [out, bias, width] :
           {std::tuple{q_.data(), &w.bq, c.q_dim()}, std::tuple{k_.data(), &w.bk, c.kv_dim()},
            std::tuple{v_.data(), &w.bv, c.kv_dim()}}) {
        for (int i = 0; i < width; ++i) out[i] += bias->as<float>()[i];
      }
      return;
    case LayerStep::kQkHeadNorm:  // each head is a row of d
      kernels::RmsNormReference(q_.data(), w.q_norm.as<float>(), c.n_heads, d, c.norm_eps,
                                q_.data());
      kernels::RmsNormReference(k_.data(), w.k_norm.as<float>(), c.n_kv_heads, d, c.norm_eps,
                                k_.data());
      return;
    case LayerStep::kKeyRopeAndStore:
      kernels::ApplyRopeReference(k_.data(), c.n_kv_heads, pos, rope);
      for (int g = 0; g < c.n_kv_heads; ++g) {
        const int64_t row = layer_offset + (int64_t{g} * c.max_seq_len + pos) * d;
        std::copy_n(k_.data() + g * d, d, key_cache_.data() + row);
        std::copy_n(v_.data() + g * d, d, value_cache_.data() + row);
      }
      return;
    case LayerStep::kQueryRope:
      kernels::ApplyRopeReference(q_.data(), c.n_heads, pos, rope);
      return;
    case LayerStep::kAttention: {
      const int32_t page = 0;
      kernels::AttentionSequence seq;
      seq.q = q_.data();
      seq.out = attn_.data();
      seq.n_queries = 1;
      seq.start_pos = pos;
      seq.kv = kernels::PlainPagedKv(key_cache_.data() + layer_offset,
                                     value_cache_.data() + layer_offset, &page, c.max_seq_len,
                                     int64_t{c.kv_dim()} * c.max_seq_len, d);
      kernels::AttentionReference({c.n_heads, c.n_kv_heads, d}, seq);
      return;
    }
    case LayerStep::kOutputProjection:
      kernels::MatmulReference(attn_.data(), 1, w.wo, xb_.data());
      return;
    case LayerStep::kResidualFfnNorm:
      for (int i = 0; i < c.dim; ++i) x_[i] += xb_[i];
      kernels::RmsNormReference(x_.data(), w.ffn_norm.as<float>(), 1, c.dim, c.norm_eps,
                                xb_.data());
      return;
    case LayerStep::kGateUpProjection:
      kernels::MatmulReference(xb_.data(), 1, w.w1, hb_.data());
      kernels::MatmulReference(xb_.data(), 1, w.w3, hb2_.data());
      return;
    case LayerStep::kSwiGlu:
      kernels::SwiGlu(hb_.data(), hb2_.data(), c.hidden_dim, hb_.data());
      return;
    case LayerStep::kDownProjection:
      kernels::MatmulReference(hb_.data(), 1, w.w2, xb_.data());
      return;
    case LayerStep::kResidual:
      for (int i = 0; i < c.dim; ++i) x_[i] += xb_[i];
      return;
  }
}

}  // namespace pdserve
