#include "core/model/model_weights.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/hash.h"
#include "core/model/layer_tensors.h"

namespace pdserve {
namespace {

absl::Status CheckShape(const Tensor& t, const std::string& name, std::vector<int64_t> expected) {
  if (t.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("weights: tensor ", name, " is missing"));
  }
  if (t.shape != expected) {
    return absl::InvalidArgumentError(absl::StrCat("weights: tensor ", name, " has shape [",
                                                   absl::StrJoin(t.shape, ", "), "], expected [",
                                                   absl::StrJoin(expected, ", "), "]"));
  }
  return absl::OkStatus();
}

// Reorders the rows of a [heads·d, cols] matrix head by head: out[to(r)] = in[r].
Tensor PermuteHeadRows(const Tensor& t, int heads, RopePairing target) {
  const int64_t d = t.rows() / heads;
  const int64_t half = d / 2;
  const size_t row_bytes = RowBytes(t.dtype, t.cols());
  auto storage = std::make_shared<std::vector<uint8_t>>(t.NumBytes());
  const auto* in = static_cast<const uint8_t*>(t.data);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        int64_t adjacent = h * d + 2 * i + j;
        int64_t split = h * d + j * half + i;
        int64_t from = target == RopePairing::kSplitHalf ? adjacent : split;
        int64_t to = target == RopePairing::kSplitHalf ? split : adjacent;
        std::memcpy(storage->data() + to * row_bytes, in + from * row_bytes, row_bytes);
      }
    }
  }
  Tensor out = t;
  out.data = storage->data();
  out.owner = std::move(storage);
  return out;
}

// A per-head vector [heads·d] permuted as PermuteHeadRows permutes rows; empty stays empty.
Tensor PermuteHeadVector(const Tensor& t, int heads, RopePairing target) {
  if (t.empty()) return t;
  Tensor column = t;
  column.shape = {t.shape[0], 1};
  Tensor out = PermuteHeadRows(column, heads, target);
  out.shape = t.shape;
  return out;
}

}  // namespace

absl::Status ValidateWeights(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  if (absl::Status s = c.Validate(); !s.ok()) return s;
  const int64_t d = c.dim, v = c.vocab_size;
  if (auto s = CheckShape(w.token_embedding, "token_embedding", {v, d}); !s.ok()) return s;
  if (auto s = CheckShape(w.final_norm, "final_norm", {d}); !s.ok()) return s;
  if (auto s = CheckShape(w.classifier, "classifier", {v, d}); !s.ok()) return s;
  if (static_cast<int>(w.layers.size()) != c.n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("weights: ", w.layers.size(), " layers present, config says ", c.n_layers));
  }
  for (int l = 0; l < c.n_layers; ++l) {
    for (const LayerTensorSpec& spec : LayerTensorSpecs()) {
      const Tensor& t = w.layers[l].*spec.field;
      const std::string name = absl::StrCat("layers.", l, ".", spec.name);
      if (HasTensor(spec, c.traits())) {
        if (auto s = CheckShape(t, name, ShapeOf(c, spec)); !s.ok()) return s;
      } else if (!t.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("weights: tensor ", name, " is present but ",
                                                       c.traits().name, " layers have none"));
      }
    }
  }
  if (w.swiftkv.has_value()) return ValidateSwiftKv(c, *w.swiftkv);
  return absl::OkStatus();
}

void VectorsToF32(LayerWeights& layer) {
  for (Tensor* t : {&layer.attn_norm, &layer.ffn_norm, &layer.bq, &layer.bk, &layer.bv,
                    &layer.q_norm, &layer.k_norm}) {
    if (!t->empty()) *t = ToF32(*t);
  }
}

ModelWeights ConvertWeights(const ModelWeights& weights, DType dtype) {
  ModelWeights out = weights;
  out.token_embedding = ConvertTensor(weights.token_embedding, dtype);
  out.classifier = weights.config.tied_embeddings ? out.token_embedding
                                                  : ConvertTensor(weights.classifier, dtype);
  out.final_norm = ToF32(weights.final_norm);
  for (LayerWeights& layer : out.layers) {
    VectorsToF32(layer);
    for (Tensor* m :
         {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w1, &layer.w2, &layer.w3}) {
      *m = ConvertTensor(*m, dtype);
    }
  }
  if (out.swiftkv.has_value()) {
    SwiftKvWeights& swiftkv = *out.swiftkv;
    if (!swiftkv.norm.empty()) swiftkv.norm = ToF32(swiftkv.norm);
    for (std::vector<Tensor>* matrices : {&swiftkv.wq, &swiftkv.wk, &swiftkv.wv}) {
      for (Tensor& m : *matrices) m = ConvertTensor(m, dtype);
    }
  }
  return out;
}

ModelWeights WithRopePairing(const ModelWeights& weights, RopePairing target) {
  if (weights.config.rope_pairing == target) {
    return weights;
  }
  ModelWeights out = weights;
  out.config.rope_pairing = target;
  for (LayerWeights& layer : out.layers) {
    layer.wq = PermuteHeadRows(layer.wq, weights.config.n_heads, target);
    layer.wk = PermuteHeadRows(layer.wk, weights.config.n_kv_heads, target);
    layer.bq = PermuteHeadVector(layer.bq, weights.config.n_heads, target);
    layer.bk = PermuteHeadVector(layer.bk, weights.config.n_kv_heads, target);
    layer.q_norm = PermuteHeadVector(layer.q_norm, 1, target);
    layer.k_norm = PermuteHeadVector(layer.k_norm, 1, target);
  }
  if (out.swiftkv.has_value()) {  // same q/k layout as the layers'; wv has no RoPE
    for (Tensor& wq : out.swiftkv->wq) wq = PermuteHeadRows(wq, weights.config.n_heads, target);
    for (Tensor& wk : out.swiftkv->wk) wk = PermuteHeadRows(wk, weights.config.n_kv_heads, target);
  }
  return out;
}

namespace {

uint64_t HashTensor(const Tensor& tensor, uint64_t hash) {
  const auto mix = [&hash](const void* data, size_t bytes) {
    hash = Fnv1a64({static_cast<const uint8_t*>(data), bytes}, hash);
  };
  const uint8_t dtype = static_cast<uint8_t>(tensor.dtype);
  mix(&dtype, 1);
  mix(tensor.shape.data(), tensor.shape.size() * sizeof(int64_t));
  if (tensor.empty()) return hash;
  const auto* bytes = tensor.as<uint8_t>();
  const size_t size = tensor.NumBytes();
  constexpr size_t kSample = 256, kSamples = 16;
  if (size <= kSample * kSamples) {
    mix(bytes, size);
    return hash;
  }
  for (size_t i = 0; i < kSamples; ++i) mix(bytes + (size - kSample) / kSamples * i, kSample);
  mix(bytes + size - kSample, kSample);
  return hash;
}

}  // namespace

uint64_t WeightsFingerprint(const ModelWeights& weights) {
  const std::string config = weights.config.Describe();
  uint64_t hash = Fnv1a64({reinterpret_cast<const uint8_t*>(config.data()), config.size()});
  hash = HashTensor(weights.token_embedding, hash);
  for (const LayerWeights& layer : weights.layers) {
    for (const LayerTensorSpec& spec : LayerTensorSpecs())
      hash = HashTensor(layer.*spec.field, hash);
  }
  hash = HashTensor(weights.final_norm, hash);
  return HashTensor(weights.classifier, hash);
}

}  // namespace pdserve
