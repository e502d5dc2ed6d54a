#include "core/model/layer_graph.h"

namespace pdserve {

std::vector<LayerStep> LayerGraph(const FamilyTraits& family) {
  std::vector<LayerStep> steps = {LayerStep::kAttentionNorm, LayerStep::kQkvProjection};
  if (family.qkv_bias) steps.push_back(LayerStep::kQkvBias);
  if (family.qk_norm) steps.push_back(LayerStep::kQkHeadNorm);
  for (LayerStep step :
       {LayerStep::kKeyRopeAndStore, LayerStep::kQueryRope, LayerStep::kAttention,
        LayerStep::kOutputProjection, LayerStep::kResidualFfnNorm, LayerStep::kGateUpProjection,
        LayerStep::kSwiGlu, LayerStep::kDownProjection, LayerStep::kResidual}) {
    steps.push_back(step);
  }
  return steps;
}

const char* StepName(LayerStep step) {
  switch (step) {
    case LayerStep::kAttentionNorm:
      return "attention_norm";
    case LayerStep::kQkvProjection:
      return "qkv_projection";
    case LayerStep::kQkvBias:
      return "qkv_bias";
    case LayerStep::kQkHeadNorm:
      return "qk_head_norm";
    case LayerStep::kKeyRopeAndStore:
      return "key_rope_and_store";
    case LayerStep::kQueryRope:
      return "query_rope";
    case LayerStep::kAttention:
      return "attention";
    case LayerStep::kOutputProjection:
      return "output_projection";
    case LayerStep::kResidualFfnNorm:
      return "residual_ffn_norm";
    case LayerStep::kGateUpProjection:
      return "gate_up_projection";
    case LayerStep::kSwiGlu:
      return "swiglu";
    case LayerStep::kDownProjection:
      return "down_projection";
    case LayerStep::kResidual:
      return "residual";
  }
  return "?";
}

}  // namespace pdserve
