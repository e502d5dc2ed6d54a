// CheckLoadedWeights: what every model loader that maps its file (GGUF, llama2.c) must hand back
// for any file it accepts, checked by the fuzz targets of those formats (tests/fuzz).
#ifndef PDSERVE_TESTS_FUZZ_MODEL_CHECK_H_
#define PDSERVE_TESTS_FUZZ_MODEL_CHECK_H_

#include <vector>

#include "core/base/mapped_file.h"
#include "core/model/layer_tensors.h"
#include "core/model/model_weights.h"
#include "tests/fuzz/fuzz_support.h"

namespace pdserve::fuzz {

// Aborts unless `tensor` is a view into the mapping of the `file_size`-byte file it was loaded
// from (the loaders document their weights as memory-mapped, not copied: the owner is the
// MappedFile) and its last row or element reads as a number.
inline void CheckMappedTensor(const Tensor& tensor, size_t file_size) {
  const auto* file = static_cast<const MappedFile*>(tensor.owner.get());
  Check(file != nullptr, "a loaded tensor is owned by its file's mapping");
  Check(file->size() == file_size, "the mapping is the whole file");
  CheckInside(tensor, file->data(), file->size());
  Check(tensor.NumElements() > 0, "a loaded tensor has elements");
  if (tensor.shape.size() == 2) {
    std::vector<float> row(static_cast<size_t>(tensor.cols()));
    RowAsFloat(tensor, tensor.rows() - 1, row.data());
  } else {
    ElementAsFloat(tensor, tensor.NumElements() - 1);
  }
}

// Every tensor of `weights`, loaded from a `file_size`-byte file, passes CheckMappedTensor; the
// config is valid and the fingerprint (read at startup) can be taken.
inline void CheckLoadedWeights(const ModelWeights& weights, size_t file_size) {
  Check(weights.config.Validate().ok(), "a loaded config is valid");
  Check(static_cast<int>(weights.layers.size()) == weights.config.n_layers,
        "a loaded model has n_layers layers");
  CheckMappedTensor(weights.token_embedding, file_size);
  CheckMappedTensor(weights.final_norm, file_size);
  CheckMappedTensor(weights.classifier, file_size);
  for (const LayerWeights& layer : weights.layers) {
    for (const LayerTensorSpec& spec : LayerTensorSpecs()) {
      if (!(layer.*spec.field).empty()) CheckMappedTensor(layer.*spec.field, file_size);
    }
  }
  WeightsFingerprint(weights);
}

}  // namespace pdserve::fuzz

#endif  // PDSERVE_TESTS_FUZZ_MODEL_CHECK_H_
