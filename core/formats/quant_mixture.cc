#include "core/formats/quant_mixture.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/base/thread_pool.h"
#include "core/model/llama_file_type.h"
#include "core/tensor/tensor.h"

namespace pdserve {
namespace {

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third between.
bool UseMoreBits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

DType BaseType(QuantMixture mixture) {
  switch (mixture) {
    case QuantMixture::kQ8_0:
      return DType::kQ8_0;
    case QuantMixture::kQ4_0:
      return DType::kQ4_0;
    case QuantMixture::kQ4_K_M:
      return DType::kQ4_K;
  }
  return DType::kQ8_0;
}

DType FirstChoice(QuantMixture mixture, MatrixRole role, int layer, int n_layers, int64_t cols) {
  const DType base = BaseType(mixture);
  if (role == MatrixRole::kClassifier) {
    if (cols % BlockElements(base) != 0 || base == DType::kQ8_0) return DType::kQ8_0;
    return DType::kQ6_K;
  }
  if (mixture == QuantMixture::kQ4_K_M &&
      (role == MatrixRole::kAttnV || role == MatrixRole::kFfnDown) &&
      UseMoreBits(layer, n_layers)) {
    return DType::kQ6_K;
  }
  return base;
}

// llama-quantize's fallback for rows that are not whole blocks of `type`.
DType Fallback(DType type, int64_t cols) {
  if (cols % BlockElements(type) == 0) return type;
  DType smaller = type;
  if (type == DType::kQ4_K) smaller = DType::kQ5_0;
  if (type == DType::kQ5_K) smaller = DType::kQ5_1;
  if (type == DType::kQ6_K) smaller = DType::kQ8_0;
  return cols % BlockElements(smaller) == 0 ? smaller : DType::kF16;
}

absl::Status CheckFinite(const Tensor& matrix, const std::string& name) {
  std::vector<float> row(static_cast<size_t>(matrix.cols()));
  for (int64_t r = 0; r < matrix.rows(); ++r) {
    RowAsFloat(matrix, r, row.data());
    for (int64_t c = 0; c < matrix.cols(); ++c) {
      if (!std::isfinite(row[c])) {
        return absl::InvalidArgumentError(absl::StrCat(name, " has a non-finite value (", row[c],
                                                       ") at row ", r, ", column ", c,
                                                       "; quantization needs finite weights"));
      }
    }
  }
  return absl::OkStatus();
}

struct MatrixSlot {
  MatrixRole role;
  Tensor LayerWeights::*field;
  const char* name;
};
constexpr MatrixSlot kLayerMatrices[] = {
    {MatrixRole::kAttnQ, &LayerWeights::wq, "attn_q"},
    {MatrixRole::kAttnK, &LayerWeights::wk, "attn_k"},
    {MatrixRole::kAttnV, &LayerWeights::wv, "attn_v"},
    {MatrixRole::kAttnOutput, &LayerWeights::wo, "attn_output"},
    {MatrixRole::kFfnGate, &LayerWeights::w1, "ffn_gate"},
    {MatrixRole::kFfnDown, &LayerWeights::w2, "ffn_down"},
    {MatrixRole::kFfnUp, &LayerWeights::w3, "ffn_up"},
};

class Quantizer {
 public:
  Quantizer(QuantMixture mixture, int n_layers, QuantizedWeights& out)
      : mixture_(mixture), n_layers_(n_layers), out_(out) {}

  // Not thread-safe: counts the type it picks.
  DType TypeFor(const Tensor& matrix, MatrixRole role, int layer) {
    const DType first = FirstChoice(mixture_, role, layer, n_layers_, matrix.cols());
    const DType type = Fallback(first, matrix.cols());
    out_.fallbacks += type != first;
    ++out_.type_counts[type];
    return type;
  }

  absl::StatusOr<Tensor> operator()(const Tensor& matrix, MatrixRole role, int layer,
                                    const std::string& name) {
    return Convert(matrix, TypeFor(matrix, role, layer), name);
  }

  // Thread-safe.
  static absl::StatusOr<Tensor> Convert(const Tensor& matrix, DType type, const std::string& name) {
    PDSERVE_RETURN_IF_ERROR(CheckFinite(matrix, name));
    return ConvertTensor(matrix, type);
  }

 private:
  QuantMixture mixture_;
  int n_layers_;
  QuantizedWeights& out_;
};

}  // namespace

absl::StatusOr<QuantMixture> ParseQuantMixture(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "q8_0") return QuantMixture::kQ8_0;
  if (lower == "q4_0") return QuantMixture::kQ4_0;
  if (lower == "q4_k_m") return QuantMixture::kQ4_K_M;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown quantization type '", name, "' (expected q8_0, q4_0 or q4_k_m)"));
}

std::string QuantMixtureName(QuantMixture mixture) {
  switch (mixture) {
    case QuantMixture::kQ8_0:
      return "q8_0";
    case QuantMixture::kQ4_0:
      return "q4_0";
    case QuantMixture::kQ4_K_M:
      return "q4_k_m";
  }
  return "?";
}

uint32_t QuantMixtureFileType(QuantMixture mixture) { return LlamaFileType(BaseType(mixture)); }

DType MixtureTypeFor(QuantMixture mixture, MatrixRole role, int layer, int n_layers, int64_t cols) {
  return Fallback(FirstChoice(mixture, role, layer, n_layers, cols), cols);
}

absl::StatusOr<QuantizedWeights> QuantizeWeights(const ModelWeights& weights, QuantMixture mixture,
                                                 const std::function<void(int)>& on_layer) {
  if (weights.swiftkv.has_value() && weights.swiftkv->layer < weights.config.n_layers) {
    return absl::InvalidArgumentError(
        "the model has SwiftKV weights, which GGUF has no place for; quantize the model without "
        "them");
  }
  QuantizedWeights out;
  out.weights = weights;
  out.weights.swiftkv.reset();
  ModelWeights& w = out.weights;
  const ModelConfig& c = weights.config;
  Quantizer quantize(mixture, c.n_layers, out);
  const bool tied = c.tied_embeddings;
  PDSERVE_ASSIGN_OR_RETURN(w.token_embedding,
                           quantize(weights.token_embedding,
                                    tied ? MatrixRole::kClassifier : MatrixRole::kTokenEmbedding, 0,
                                    "token_embd.weight"));
  if (tied) {
    w.classifier = w.token_embedding;
  } else {
    PDSERVE_ASSIGN_OR_RETURN(
        w.classifier, quantize(weights.classifier, MatrixRole::kClassifier, 0, "output.weight"));
  }
  w.final_norm = ToF32(weights.final_norm);
  // A layer's matrices quantize in parallel, one per thread at a time.
  ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  constexpr size_t kMatrices = std::size(kLayerMatrices);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& layer = w.layers[l];
    VectorsToF32(layer);
    std::array<DType, kMatrices> types;
    for (size_t i = 0; i < kMatrices; ++i) {
      types[i] =
          quantize.TypeFor(weights.layers[l].*kLayerMatrices[i].field, kLayerMatrices[i].role, l);
    }
    std::array<absl::StatusOr<Tensor>, kMatrices> results;
    pool.ParallelForDynamic(kMatrices, 1, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) {
        const MatrixSlot& m = kLayerMatrices[i];
        results[i] = Quantizer::Convert(weights.layers[l].*m.field, types[i],
                                        absl::StrCat("blk.", l, ".", m.name, ".weight"));
      }
    });
    for (size_t i = 0; i < kMatrices; ++i) {
      if (!results[i].ok()) return results[i].status();
      layer.*kLayerMatrices[i].field = *std::move(results[i]);
    }
    if (on_layer) on_layer(l);
  }
  return out;
}

}  // namespace pdserve
