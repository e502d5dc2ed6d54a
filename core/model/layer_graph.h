// LayerGraph: one decoder layer as the ordered step operations every engine runs — the fast CPU
// engine (LlamaEngine), the CUDA engine and the readable reference (LlamaReference) each walk the
// same graph and implement each step once. The graph is built from a family's traits
// (model_family.h), so a family made of existing steps is a row in the family table, not code in
// every engine; a family needing a new kind of step adds it here and to each engine's step switch
// (docs/engine.md, "Adding a family").
#ifndef PDSERVE_CORE_MODEL_LAYER_GRAPH_H_
#define PDSERVE_CORE_MODEL_LAYER_GRAPH_H_

#include <cstdint>
#include <vector>

#include "core/model/model_family.h"

namespace pdserve {

// x is the layer's input and output (the residual stream); each step names what it computes.
enum class LayerStep : uint8_t {
  kAttentionNorm,     // xb = RmsNorm(x) · attn_norm
  kQkvProjection,     // [q; k; v] = xb · [wq; wk; wv]ᵀ (q alone in layers that do not write KV)
  kQkvBias,           // [q; k; v] += [bq; bk; bv]
  kQkHeadNorm,        // every q head (and k head) = RmsNorm(head) · q_norm (k_norm)
  kKeyRopeAndStore,   // RoPE on k; k and v into the layer's cache (layers that write KV)
  kQueryRope,         // RoPE on q (then, under ZACK, q projected into the packed basis)
  kAttention,         // attn = softmax(q·kᵀ / √d) · v over the cache, causal, GQA
  kOutputProjection,  // xb = attn · woᵀ
  kResidualFfnNorm,   // x += xb; xb = RmsNorm(x) · ffn_norm
  kGateUpProjection,  // [gate; up] = xb · [w1; w3]ᵀ
  kSwiGlu,            // hb = silu(gate) ⊙ up
  kDownProjection,    // xb = hb · w2ᵀ
  kResidual,          // x += xb
};

// The steps of a layer of `family`, in order: Llama's, with kQkvBias after the projection when
// the family has q/k/v biases and kQkHeadNorm before RoPE when it normalizes q/k heads.
std::vector<LayerStep> LayerGraph(const FamilyTraits& family);

// "qkv_bias": for logs and errors.
const char* StepName(LayerStep step);

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_LAYER_GRAPH_H_
