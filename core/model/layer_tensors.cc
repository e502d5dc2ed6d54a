#include "core/model/layer_tensors.h"

#include <iterator>

namespace pdserve {
namespace {

const LayerTensorSpec kSpecs[] = {
    {&LayerWeights::wq, "wq", "attn_q.weight", "self_attn.q_proj.weight", Extent::kQDim,
     Extent::kDim},
    {&LayerWeights::wk, "wk", "attn_k.weight", "self_attn.k_proj.weight", Extent::kKvDim,
     Extent::kDim},
    {&LayerWeights::wv, "wv", "attn_v.weight", "self_attn.v_proj.weight", Extent::kKvDim,
     Extent::kDim},
    {&LayerWeights::wo, "wo", "attn_output.weight", "self_attn.o_proj.weight", Extent::kDim,
     Extent::kQDim},
    {&LayerWeights::w1, "w1", "ffn_gate.weight", "mlp.gate_proj.weight", Extent::kHidden,
     Extent::kDim},
    {&LayerWeights::w3, "w3", "ffn_up.weight", "mlp.up_proj.weight", Extent::kHidden, Extent::kDim},
    {&LayerWeights::w2, "w2", "ffn_down.weight", "mlp.down_proj.weight", Extent::kDim,
     Extent::kHidden},
    {&LayerWeights::attn_norm, "attn_norm", "attn_norm.weight", "input_layernorm.weight",
     Extent::kDim},
    {&LayerWeights::ffn_norm, "ffn_norm", "ffn_norm.weight", "post_attention_layernorm.weight",
     Extent::kDim},
    {&LayerWeights::bq, "bq", "attn_q.bias", "self_attn.q_proj.bias", Extent::kQDim, Extent::kNone,
     Presence::kQkvBias},
    {&LayerWeights::bk, "bk", "attn_k.bias", "self_attn.k_proj.bias", Extent::kKvDim, Extent::kNone,
     Presence::kQkvBias},
    {&LayerWeights::bv, "bv", "attn_v.bias", "self_attn.v_proj.bias", Extent::kKvDim, Extent::kNone,
     Presence::kQkvBias},
    {&LayerWeights::q_norm, "q_norm", "attn_q_norm.weight", "self_attn.q_norm.weight",
     Extent::kHeadDim, Extent::kNone, Presence::kQkNorm},
    {&LayerWeights::k_norm, "k_norm", "attn_k_norm.weight", "self_attn.k_norm.weight",
     Extent::kHeadDim, Extent::kNone, Presence::kQkNorm},
};

}  // namespace

std::span<const LayerTensorSpec> LayerTensorSpecs() { return kSpecs; }

bool HasTensor(const LayerTensorSpec& spec, const FamilyTraits& family) {
  switch (spec.presence) {
    case Presence::kAlways:
      return true;
    case Presence::kQkvBias:
      return family.qkv_bias;
    case Presence::kQkNorm:
      return family.qk_norm;
  }
  return false;
}

int64_t ExtentSize(const ModelConfig& c, Extent extent) {
  switch (extent) {
    case Extent::kNone:
      return 0;
    case Extent::kDim:
      return c.dim;
    case Extent::kQDim:
      return c.q_dim();
    case Extent::kKvDim:
      return c.kv_dim();
    case Extent::kHidden:
      return c.hidden_dim;
    case Extent::kHeadDim:
      return c.head_dim();
    case Extent::kVocab:
      return c.vocab_size;
  }
  return 0;
}

std::vector<int64_t> ShapeOf(const ModelConfig& c, Extent rows, Extent cols) {
  if (cols == Extent::kNone) return {ExtentSize(c, rows)};
  return {ExtentSize(c, rows), ExtentSize(c, cols)};
}

std::vector<int64_t> ShapeOf(const ModelConfig& c, const LayerTensorSpec& spec) {
  return ShapeOf(c, spec.rows, spec.cols);
}

}  // namespace pdserve
