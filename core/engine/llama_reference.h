// LlamaReference: the readable fp32 forward pass that specifies what LlamaEngine computes, for
// every family: each layer walks the family's LayerGraph (layer_graph.h). One
// sequence, one token at a time, a contiguous KV cache, the reference kernels only (plain loops,
// as llama2.c's run.c). Used by tests, never by the serving path. Not thread-safe.
#ifndef PDSERVE_CORE_ENGINE_LLAMA_REFERENCE_H_
#define PDSERVE_CORE_ENGINE_LLAMA_REFERENCE_H_

#include <vector>

#include "core/model/layer_graph.h"
#include "core/model/model_weights.h"

namespace pdserve {

class LlamaReference {
 public:
  // Converts the weights to fp32. Requires ValidateWeights(weights).ok().
  explicit LlamaReference(const ModelWeights& weights);

  int position() const { return position_; }

  // Runs `token` at the next position (requires position() < max_seq_len) and returns the logits
  // [vocab].
  std::vector<float> Forward(int token);

 private:
  void Layer(int layer);
  void Step(LayerStep step, int layer);

  ModelWeights weights_;
  std::vector<LayerStep> graph_;  // every layer's steps (the family's LayerGraph)
  int position_ = 0;
  std::vector<float> key_cache_, value_cache_;  // [layers, kv_heads, max_seq_len, head_dim]
  std::vector<float> x_, xb_, q_, k_, v_, attn_, hb_, hb2_;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_LLAMA_REFERENCE_H_
