// Quantization mixtures: which ggml block format each matrix of a Llama model gets under
// `pdserve quantize --type`, following llama-quantize's choices for the file types of the same
// names (llama-quant.cpp, no importance matrix): Q8_0 and Q4_0 quantize every matrix to that type
// but the classifier (Q6_K under Q4_0); Q4_K_M is Q4_K with Q6_K for the classifier and for the
// V and FFN-down matrices of the layers llama.cpp gives more bits. Rows that are not whole blocks
// fall back as llama-quantize's do (Q4_K → Q5_0, Q6_K → Q8_0, then F16). Pure: thread-safe.
#ifndef PDSERVE_CORE_FORMATS_QUANT_MIXTURE_H_
#define PDSERVE_CORE_FORMATS_QUANT_MIXTURE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/model_weights.h"
#include "core/tensor/dtype.h"

namespace pdserve {

enum class QuantMixture { kQ8_0, kQ4_0, kQ4_K_M };

// "q8_0", "q4_0" or "q4_k_m" (case-insensitive); InvalidArgument naming the accepted ones.
absl::StatusOr<QuantMixture> ParseQuantMixture(const std::string& name);
std::string QuantMixtureName(QuantMixture mixture);

// general.file_type of the mixture's files (llama_ftype: 7, 2, 15).
uint32_t QuantMixtureFileType(QuantMixture mixture);

// The matrices of a Llama model, as llama-quantize tells them apart.
enum class MatrixRole {
  kTokenEmbedding,
  kClassifier,  // output.weight, or the token embedding when tied
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kFfnGate,
  kFfnDown,
  kFfnUp,
};

// The type a matrix of `cols` columns in `role` of layer `layer` (< n_layers; ignored for the
// embedding and classifier) is stored in. F16 when no block format of the mixture fits the rows.
DType MixtureTypeFor(QuantMixture mixture, MatrixRole role, int layer, int n_layers, int64_t cols);

struct QuantizedWeights {
  ModelWeights weights;              // matrices in their mixture types, norms f32
  std::map<DType, int> type_counts;  // matrices per stored type
  int fallbacks = 0;  // matrices stored in another type than their role's first choice because
                      // their rows are not whole blocks of it
};

// Quantizes every matrix of `weights` (any dtypes; quantized ones are requantized from their
// dequantized values) to its mixture type; `on_layer(l)` is called after each layer for progress.
// InvalidArgument for SwiftKV weights (GGUF has no place for them) or a matrix with a non-finite
// value (named).
absl::StatusOr<QuantizedWeights> QuantizeWeights(const ModelWeights& weights, QuantMixture mixture,
                                                 const std::function<void(int)>& on_layer);

}  // namespace pdserve

#endif  // PDSERVE_CORE_FORMATS_QUANT_MIXTURE_H_
