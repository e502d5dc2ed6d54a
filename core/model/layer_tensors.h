// The tensors of a transformer layer as data: for each LayerWeights field, its shape in config
// extents, which families have it, and its name in GGUF and Hugging Face files. ValidateWeights,
// the GGUF loader/writer and the safetensors loader/writer all walk this one table, so a family's
// new tensor is one row here (docs/engine.md, "Adding a family").
#ifndef PDSERVE_CORE_MODEL_LAYER_TENSORS_H_
#define PDSERVE_CORE_MODEL_LAYER_TENSORS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "core/model/model_config.h"
#include "core/model/model_weights.h"

namespace pdserve {

// A config extent a tensor axis has (kQDim: n_heads · head_dim, = dim unless the head dim is
// explicit).
enum class Extent : uint8_t { kNone, kDim, kQDim, kKvDim, kHidden, kHeadDim, kVocab };

// Which layers have a tensor: every family's, or only those of families with the trait.
enum class Presence : uint8_t { kAlways, kQkvBias, kQkNorm };

struct LayerTensorSpec {
  Tensor LayerWeights::*field;
  const char* name;         // in errors: "layers.N.<name>"
  const char* gguf_suffix;  // GGUF: "blk.N.<gguf_suffix>"
  const char* hf_suffix;    // Hugging Face: "model.layers.N.<hf_suffix>"
  Extent rows;
  Extent cols = Extent::kNone;  // kNone for vectors
  Presence presence = Presence::kAlways;
};

// Every layer tensor, matrices first in Hugging Face's order, then the norms, then the family
// extras.
std::span<const LayerTensorSpec> LayerTensorSpecs();

// Whether layers of `family` have the tensor.
bool HasTensor(const LayerTensorSpec& spec, const FamilyTraits& family);

// The size of `extent` in `c` (0 for kNone).
int64_t ExtentSize(const ModelConfig& c, Extent extent);

// [rows] or [rows, cols] in `c`.
std::vector<int64_t> ShapeOf(const ModelConfig& c, Extent rows, Extent cols = Extent::kNone);
std::vector<int64_t> ShapeOf(const ModelConfig& c, const LayerTensorSpec& spec);

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_LAYER_TENSORS_H_
