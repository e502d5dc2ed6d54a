#include "core/formats/gguf_model.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/formats/gguf_file.h"
#include "core/formats/gguf_vocabulary.h"
#include "core/formats/gguf_writer.h"
#include "core/model/layer_tensors.h"
#include "core/model/llama_file_type.h"

namespace pdserve {
namespace {

constexpr char kRopeFreqs[] = "rope_freqs.weight";

std::string LayerTensorName(int layer, const char* suffix) {
  return absl::StrCat("blk.", layer, ".", suffix);
}

// ---------------------------------------------------------------------------------------------
// Loading

// An integer key in [1, INT32_MAX]; `fallback` when absent (required when nullopt).
absl::StatusOr<int> GetCount(const GgufFile& file, const std::string& key,
                             std::optional<int> fallback = std::nullopt) {
  if (fallback && file.FindValue(key) == nullptr) return *fallback;
  PDSERVE_ASSIGN_OR_RETURN(int64_t value, file.GetInt(key));
  if (value < 1 || value > std::numeric_limits<int32_t>::max()) {
    return file.Error(absl::StrCat("metadata key '", key, "' = ", value, " is out of range"));
  }
  return static_cast<int>(value);
}

absl::StatusOr<float> GetFloatOr(const GgufFile& file, const std::string& key, float fallback) {
  if (file.FindValue(key) == nullptr) return fallback;
  PDSERVE_ASSIGN_OR_RETURN(double value, file.GetFloat(key));
  return static_cast<float>(value);
}

// llama.vocab_size, or the rows of token_embd.weight when absent (as in many converted files).
absl::StatusOr<int> ReadVocabSize(const GgufFile& file, const std::string& key) {
  if (file.FindValue(key) != nullptr) return GetCount(file, key);
  const GgufTensor* embedding = file.FindTensor("token_embd.weight");
  if (embedding == nullptr) return file.Error("tensor token_embd.weight is missing");
  return static_cast<int>(std::min<int64_t>(embedding->tensor.rows(), INT32_MAX));
}

// llama.cpp scales RoPE when rope.scaling.factor or rope.scale_linear is set (other than 0 or 1)
// or rope.scaling.type names another method. Unsupported here: refuse rather than run unscaled.
absl::Status CheckNoRopeScaling(const GgufFile& file, const std::string& p) {
  for (const std::string& key : {p + "rope.scaling.factor", p + "rope.scale_linear"}) {
    if (file.FindValue(key) == nullptr) continue;
    PDSERVE_ASSIGN_OR_RETURN(float factor, GetFloatOr(file, key, 1.0f));
    if (factor != 0.0f && factor != 1.0f) {
      return file.Error(absl::StrCat(key, " is ", factor, "; RoPE scaling is not supported yet"));
    }
  }
  if (file.FindValue(p + "rope.scaling.type") != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(std::string type, file.GetString(p + "rope.scaling.type"));
    if (type != "none" && type != "linear") {
      return file.Error(
          absl::StrCat(p, "rope.scaling.type is '", type, "'; RoPE scaling is not supported yet"));
    }
  }
  return absl::OkStatus();
}

// The family general.architecture names; InvalidArgument listing the supported ones otherwise.
absl::StatusOr<const FamilyTraits*> ReadFamily(const GgufFile& file) {
  PDSERVE_ASSIGN_OR_RETURN(std::string arch, file.GetString("general.architecture"));
  if (const FamilyTraits* traits = FamilyByGgufArchitecture(arch); traits != nullptr) {
    return traits;
  }
  std::string known;
  for (const FamilyTraits& f : AllFamilies()) {
    if (known.find(absl::StrCat("'", f.gguf_architecture, "'")) == std::string::npos) {
      absl::StrAppend(&known, known.empty() ? "" : ", ", "'", f.gguf_architecture, "'");
    }
  }
  return file.Error(absl::StrCat("general.architecture is '", arch, "'; supported: ", known));
}

// <arch>.attention.key_length, when present, is the head dim: explicit when it is not
// embedding_length / head_count (Qwen3-0.6B). Call before Validate.
absl::Status ReadHeadDim(const GgufFile& file, const std::string& p, ModelConfig& c) {
  const std::string key = p + "attention.key_length";
  if (file.FindValue(key) == nullptr) return absl::OkStatus();
  PDSERVE_ASSIGN_OR_RETURN(int value, GetCount(file, key));
  c.SetHeadDim(value);
  return absl::OkStatus();
}

// <arch>.attention.value_length and rope.dimension_count, when present, must be the head dim:
// pdserve has neither a separate value width nor partial rotary embeddings.
absl::Status CheckHeadDim(const GgufFile& file, const std::string& p, const ModelConfig& c) {
  for (const std::string& key : {p + "attention.value_length", p + "rope.dimension_count"}) {
    if (file.FindValue(key) == nullptr) continue;
    PDSERVE_ASSIGN_OR_RETURN(int value, GetCount(file, key));
    if (value != c.head_dim()) {
      return file.Error(absl::StrCat(key, " is ", value, ", not the head dim ", c.head_dim(),
                                     "; value widths other than the key width and partial rotary "
                                     "embeddings are unsupported"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ReadConfig(const GgufFile& file) {
  PDSERVE_ASSIGN_OR_RETURN(const FamilyTraits* family, ReadFamily(file));
  const std::string p = absl::StrCat(family->gguf_architecture, ".");
  ModelConfig c;
  c.family = family->family;
  PDSERVE_ASSIGN_OR_RETURN(c.max_seq_len, GetCount(file, p + "context_length"));
  PDSERVE_ASSIGN_OR_RETURN(c.dim, GetCount(file, p + "embedding_length"));
  PDSERVE_ASSIGN_OR_RETURN(c.n_layers, GetCount(file, p + "block_count"));
  PDSERVE_ASSIGN_OR_RETURN(c.hidden_dim, GetCount(file, p + "feed_forward_length"));
  PDSERVE_ASSIGN_OR_RETURN(c.n_heads, GetCount(file, p + "attention.head_count"));
  PDSERVE_ASSIGN_OR_RETURN(c.n_kv_heads, GetCount(file, p + "attention.head_count_kv", c.n_heads));
  PDSERVE_ASSIGN_OR_RETURN(c.norm_eps,
                           GetFloatOr(file, p + "attention.layer_norm_rms_epsilon", 1e-5f));
  PDSERVE_ASSIGN_OR_RETURN(c.rope_theta, GetFloatOr(file, p + "rope.freq_base", 10000.0f));
  PDSERVE_RETURN_IF_ERROR(CheckNoRopeScaling(file, p));  // so c.rope_scaling stays none
  c.rope_pairing = family->gguf_rope_pairing;
  PDSERVE_ASSIGN_OR_RETURN(c.vocab_size, ReadVocabSize(file, p + "vocab_size"));
  c.tied_embeddings = file.FindTensor("output.weight") == nullptr;
  PDSERVE_RETURN_IF_ERROR(ReadHeadDim(file, p, c));
  if (absl::Status s = c.Validate(); !s.ok()) return file.Error(s.message());
  PDSERVE_RETURN_IF_ERROR(CheckHeadDim(file, p, c));
  return c;
}

absl::StatusOr<Tensor> GetTensor(const GgufFile& file, const std::string& name,
                                 const std::vector<int64_t>& shape, std::set<std::string>& used) {
  const GgufTensor* t = file.FindTensor(name);
  if (t == nullptr) return file.Error(absl::StrCat("tensor ", name, " is missing"));
  if (t->tensor.shape != shape) {
    return file.Error(absl::StrCat("tensor ", name, " has shape [",
                                   absl::StrJoin(t->tensor.shape, ", "), "], expected [",
                                   absl::StrJoin(shape, ", "), "] (outermost first)"));
  }
  used.insert(name);
  return t->tensor;
}

// llama.cpp's Llama 3 RoPE scaling: one divisor per frequency pair in rope_freqs.weight (F32).
absl::Status ReadRopeFreqs(const GgufFile& file, ModelConfig& c, std::set<std::string>& used) {
  if (file.FindTensor(kRopeFreqs) == nullptr) return absl::OkStatus();
  PDSERVE_ASSIGN_OR_RETURN(Tensor t, GetTensor(file, kRopeFreqs, {c.head_dim() / 2}, used));
  if (t.dtype != DType::kF32) {
    return file.Error(absl::StrCat("tensor ", kRopeFreqs, " is ", DTypeName(t.dtype), ", not F32"));
  }
  const float* f = t.as<float>();
  c.rope_scaling.freq_factors.assign(f, f + c.head_dim() / 2);
  if (absl::Status s = c.Validate(); !s.ok()) return file.Error(s.message());
  return absl::OkStatus();
}

absl::StatusOr<ModelWeights> ReadWeights(const GgufFile& file, ModelConfig c) {
  std::set<std::string> used;
  PDSERVE_RETURN_IF_ERROR(ReadRopeFreqs(file, c, used));
  ModelWeights w;
  w.config = c;
  const int64_t d = c.dim, v = c.vocab_size;
  PDSERVE_ASSIGN_OR_RETURN(w.token_embedding, GetTensor(file, "token_embd.weight", {v, d}, used));
  PDSERVE_ASSIGN_OR_RETURN(w.final_norm, GetTensor(file, "output_norm.weight", {d}, used));
  if (c.tied_embeddings) {
    w.classifier = w.token_embedding;
  } else {
    PDSERVE_ASSIGN_OR_RETURN(w.classifier, GetTensor(file, "output.weight", {v, d}, used));
  }
  w.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    for (const LayerTensorSpec& t : LayerTensorSpecs()) {
      if (!HasTensor(t, c.traits())) continue;
      PDSERVE_ASSIGN_OR_RETURN(
          w.layers[l].*t.field,
          GetTensor(file, LayerTensorName(l, t.gguf_suffix), ShapeOf(c, t), used));
    }
  }
  for (const GgufTensor& t : file.tensors()) {
    if (used.count(t.name) == 0) {
      return file.Error(absl::StrCat("unexpected tensor ", t.name, " for a ", c.n_layers, "-layer ",
                                     c.traits().gguf_architecture, " model"));
    }
  }
  if (absl::Status s = ValidateWeights(w); !s.ok()) return file.Error(s.message());
  return w;
}

// ---------------------------------------------------------------------------------------------
// Writing

absl::Status AddConfigMetadata(GgufWriter& out, const ModelConfig& c, const std::string& name,
                               uint32_t file_type) {
  const std::string arch = c.traits().gguf_architecture;
  const std::string p = absl::StrCat(arch, ".");
  auto u32 = [](int v) { return GgufValue::Of(static_cast<uint32_t>(v)); };
  for (auto& [key, value] : std::vector<std::pair<std::string, GgufValue>>{
           {"general.architecture", GgufValue::Of(arch)},
           {"general.name", GgufValue::Of(name)},
           {"general.file_type", GgufValue::Of(file_type)},
           {p + "vocab_size", u32(c.vocab_size)},
           {p + "context_length", u32(c.max_seq_len)},
           {p + "embedding_length", u32(c.dim)},
           {p + "block_count", u32(c.n_layers)},
           {p + "feed_forward_length", u32(c.hidden_dim)},
           {p + "rope.dimension_count", u32(c.head_dim())},
           {p + "attention.head_count", u32(c.n_heads)},
           {p + "attention.head_count_kv", u32(c.n_kv_heads)},
           {p + "attention.key_length", u32(c.head_dim())},
           {p + "attention.value_length", u32(c.head_dim())},
           {p + "attention.layer_norm_rms_epsilon", GgufValue::Of(c.norm_eps)},
           {p + "rope.freq_base", GgufValue::Of(c.rope_theta)}}) {
    PDSERVE_RETURN_IF_ERROR(out.SetMetadata(std::move(key), std::move(value)));
  }
  return absl::OkStatus();
}

// Llama 3 RoPE scaling as llama.cpp stores it: rope_freqs.weight, one F32 divisor per pair.
absl::Status AddRopeFreqs(GgufWriter& out, const ModelConfig& c) {
  if (!c.rope_scaling.enabled()) return absl::OkStatus();
  std::vector<float> factors = c.rope_scaling.freq_factors;
  if (factors.empty()) factors = c.rope_scaling.FreqFactors(c.head_dim(), c.rope_theta);
  const int64_t n = static_cast<int64_t>(factors.size());
  return out.AddTensor(kRopeFreqs, MakeF32Tensor(std::move(factors), {n}));
}

bool HasQuantizedTensors(const ModelWeights& w) {
  bool quantized = IsQuantized(w.token_embedding.dtype) || IsQuantized(w.classifier.dtype);
  for (const LayerWeights& layer : w.layers) {
    for (const LayerTensorSpec& t : LayerTensorSpecs()) {
      quantized |= !(layer.*t.field).empty() && IsQuantized((layer.*t.field).dtype);
    }
  }
  return quantized;
}

// `w` is already converted and in its family's GGUF pairing.
absl::Status AddWeightTensors(GgufWriter& out, const ModelWeights& w) {
  PDSERVE_RETURN_IF_ERROR(out.AddTensor("token_embd.weight", w.token_embedding));
  PDSERVE_RETURN_IF_ERROR(out.AddTensor("output_norm.weight", w.final_norm));
  if (!w.config.tied_embeddings) {
    PDSERVE_RETURN_IF_ERROR(out.AddTensor("output.weight", w.classifier));
  }
  for (int l = 0; l < w.config.n_layers; ++l) {
    for (const LayerTensorSpec& t : LayerTensorSpecs()) {
      if (!HasTensor(t, w.config.traits())) continue;
      PDSERVE_RETURN_IF_ERROR(
          out.AddTensor(LayerTensorName(l, t.gguf_suffix), w.layers[l].*t.field));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GgufModel> LoadGgufModel(const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(GgufFile file, GgufFile::Open(path));
  GgufModel model;
  PDSERVE_ASSIGN_OR_RETURN(ModelConfig config, ReadConfig(file));
  PDSERVE_ASSIGN_OR_RETURN(model.weights, ReadWeights(file, config));
  PDSERVE_ASSIGN_OR_RETURN(model.vocabulary, ReadGgufVocabulary(file));
  if (model.vocabulary.size() != config.vocab_size) {
    return file.Error(absl::StrCat("the vocabulary has ", model.vocabulary.size(),
                                   " tokens but token_embd.weight has ", config.vocab_size,
                                   " rows"));
  }
  return model;
}

absl::Status WriteGgufModel(const std::string& path, const ModelWeights& weights,
                            const Vocabulary& vocab, DType dtype) {
  PDSERVE_RETURN_IF_ERROR(ValidateWeights(weights));
  return WriteTypedGgufModel(path, ConvertWeights(weights, dtype), vocab, LlamaFileType(dtype));
}

absl::Status WriteTypedGgufModel(const std::string& path, const ModelWeights& weights,
                                 const Vocabulary& vocab, uint32_t file_type) {
  PDSERVE_RETURN_IF_ERROR(ValidateWeights(weights));
  PDSERVE_RETURN_IF_ERROR(vocab.Validate());
  if (vocab.size() != weights.config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("gguf: the vocabulary has ", vocab.size(),
                                                   " tokens, the model ",
                                                   weights.config.vocab_size));
  }
  const ModelWeights w = WithRopePairing(weights, weights.config.traits().gguf_rope_pairing);
  GgufWriter out;
  PDSERVE_RETURN_IF_ERROR(
      AddConfigMetadata(out, w.config, std::filesystem::path(path).stem().string(), file_type));
  PDSERVE_RETURN_IF_ERROR(AddGgufVocabulary(out, vocab));
  PDSERVE_RETURN_IF_ERROR(AddWeightTensors(out, w));
  PDSERVE_RETURN_IF_ERROR(AddRopeFreqs(out, w.config));
  if (HasQuantizedTensors(w)) {
    // ggml's block layouts are version 2 (GGML_QNT_VERSION), as llama-quantize records.
    PDSERVE_RETURN_IF_ERROR(
        out.SetMetadata("general.quantization_version", GgufValue::Of(uint32_t{2})));
  }
  return out.WriteFile(path);
}

}  // namespace pdserve
