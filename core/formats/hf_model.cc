#include "core/formats/hf_model.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/json_fields.h"
#include "core/base/mapped_file.h"
#include "core/base/status_macros.h"
#include "core/formats/hf_config.h"
#include "core/formats/safetensors.h"
#include "core/model/layer_tensors.h"
#include "core/tokenizer/sentencepiece_model_writer.h"
#include "core/tokenizer/sentencepiece_tokenizer.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

constexpr const char* kConfigFile = "config.json";
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kTokenizerModelFile = "tokenizer.model";
constexpr const char* kTokenizerJsonFile = "tokenizer.json";
constexpr const char* kLayerPrefix = "model.layers.";
constexpr const char* kSwiftKvNorm = "model.norm_swiftkv.weight";
constexpr const char* kSwiftKvQ = "self_attn.q_proj_swiftkv.weight";
constexpr const char* kSwiftKvK = "self_attn.k_proj_swiftkv.weight";
constexpr const char* kSwiftKvV = "self_attn.v_proj_swiftkv.weight";

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string LayerTensorName(int layer, const char* suffix) {
  return absl::StrCat(kLayerPrefix, layer, ".", suffix);
}

// N of "model.layers.N.*", else -1.
int LayerIndexOf(const std::string& name) {
  if (!absl::StartsWith(name, kLayerPrefix)) return -1;
  const size_t begin = std::string_view(kLayerPrefix).size();
  const size_t dot = name.find('.', begin);
  int layer = -1;
  const absl::string_view digits =
      absl::string_view(name).substr(begin, dot == std::string::npos ? dot : dot - begin);
  return absl::SimpleAtoi(digits, &layer) ? layer : -1;
}

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// ---------------------------------------------------------------------------------------------
// Tensors

struct SourcedTensor {
  Tensor tensor;
  std::string file;
};

using TensorMap = std::map<std::string, SourcedTensor>;

absl::StatusOr<TensorMap> LoadSingleFile(const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(path));
  TensorMap out;
  for (auto& [name, tensor] : file.tensors) out[name] = {std::move(tensor), path};
  return out;
}

absl::Status CheckShardName(const std::string& name, const std::string& index_path) {
  if (name.empty() || name == "." || name == ".." ||
      name.find_first_of(std::string("/\\\0", 3)) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": shard name '", name, "' is not a plain file name"));
  }
  return absl::OkStatus();
}

// Reads the index's weight_map, mapping each shard once.
absl::StatusOr<TensorMap> LoadShards(const std::string& dir, const std::string& index_path) {
  PDSERVE_ASSIGN_OR_RETURN(Json index, ReadJsonFile(index_path));
  const Json* weight_map = Member(index, "weight_map");
  if (weight_map == nullptr || !weight_map->is_object() || weight_map->empty()) {
    return FieldError(index_path, "weight_map", "is missing, empty or not an object");
  }
  std::map<std::string, SafetensorsFile> shards;
  TensorMap out;
  for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map entry '", it.key(), "' is not a string"));
    }
    const std::string shard_name = it->get<std::string>();
    PDSERVE_RETURN_IF_ERROR(CheckShardName(shard_name, index_path));
    const std::string shard_path = JoinPath(dir, shard_name);
    auto shard = shards.find(shard_name);
    if (shard == shards.end()) {
      PDSERVE_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(shard_path));
      shard = shards.emplace(shard_name, std::move(file)).first;
    }
    auto tensor = shard->second.tensors.find(it.key());
    if (tensor == shard->second.tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat(shard_path, ": tensor '", it.key(),
                                                     "', listed in ", index_path, ", is missing"));
    }
    out[it.key()] = {tensor->second, shard_path};
  }
  return out;
}

// Hands out the tensors of a checkpoint by name, checking shapes, and reports leftovers.
class TensorTable {
 public:
  TensorTable(TensorMap tensors, std::string dir)
      : tensors_(std::move(tensors)), dir_(std::move(dir)) {}

  bool Has(const std::string& name) const { return tensors_.count(name) > 0; }

  absl::StatusOr<Tensor> Take(const std::string& name, const std::vector<int64_t>& shape) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir_, ": tensor '", name, "' is missing from the checkpoint"));
    }
    const Tensor& t = it->second.tensor;
    if (t.shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          it->second.file, ": tensor '", name, "' has shape [", absl::StrJoin(t.shape, ", "),
          "], config.json implies [", absl::StrJoin(shape, ", "), "]"));
    }
    Tensor out = shape.size() == 1 ? ToF32(t) : t;  // norms are kept in f32
    tensors_.erase(it);
    return out;
  }

  // InvalidArgument for any tensor not taken, except RoPE frequency buffers.
  absl::Status CheckAllTaken(const ModelConfig& c) const {
    const int n_layers = c.n_layers;
    for (const auto& [name, source] : tensors_) {
      if (absl::EndsWith(name, "rotary_emb.inv_freq")) continue;
      const int layer = LayerIndexOf(name);
      std::string why =
          layer >= n_layers
              ? absl::StrCat("belongs to layer ", layer, " but num_hidden_layers is ", n_layers)
          : absl::StrContains(name, "_swiftkv.")
              ? "is a SwiftKV tensor that config.json (model_type, num_key_value_layers, "
                "key_value_group_size) does not define"
              : absl::StrCat("is not part of a ", c.traits().hf_architecture, " model");
      return absl::InvalidArgumentError(
          absl::StrCat(source.file, ": unexpected tensor '", name, "': it ", why));
    }
    return absl::OkStatus();
  }

 private:
  TensorMap tensors_;
  std::string dir_;
};

// The tensors LlamaSwiftKVForCausalLM defines for `spec` (norm_swiftkv; q_proj_swiftkv of every
// layer ≥ l; k/v_proj_swiftkv of every group leader), shapes checked. The class defines them
// whatever "swiftkv" says; when they are unused (swiftkv false, or l = L) those present are taken
// and dropped, and the result is nullopt.
absl::StatusOr<std::optional<SwiftKvWeights>> TakeSwiftKv(const ModelConfig& c,
                                                          const HfSwiftKvConfig& spec,
                                                          TensorTable& table) {
  const bool used = spec.enabled && spec.layer < c.n_layers;
  auto take = [&](const std::string& name, Extent rows, Extent cols) -> absl::StatusOr<Tensor> {
    if (!used && !table.Has(name)) return Tensor{};
    return table.Take(name, ShapeOf(c, rows, cols));
  };
  SwiftKvWeights s;
  s.layer = spec.layer;
  s.group = spec.group;
  PDSERVE_ASSIGN_OR_RETURN(s.norm, take(kSwiftKvNorm, Extent::kDim, Extent::kNone));
  for (int j = spec.layer; j < c.n_layers; ++j) {
    PDSERVE_ASSIGN_OR_RETURN(Tensor wq,
                             take(LayerTensorName(j, kSwiftKvQ), Extent::kQDim, Extent::kDim));
    s.wq.push_back(std::move(wq));
    if ((j - spec.layer) % spec.group != 0) continue;  // followers use their leader's K/V
    PDSERVE_ASSIGN_OR_RETURN(Tensor wk,
                             take(LayerTensorName(j, kSwiftKvK), Extent::kKvDim, Extent::kDim));
    PDSERVE_ASSIGN_OR_RETURN(Tensor wv,
                             take(LayerTensorName(j, kSwiftKvV), Extent::kKvDim, Extent::kDim));
    s.wk.push_back(std::move(wk));
    s.wv.push_back(std::move(wv));
  }
  if (!used) return std::nullopt;
  return s;
}

absl::StatusOr<ModelWeights> AssembleWeights(const HfConfig& config, TensorTable& table) {
  const ModelConfig& c = config.model;
  ModelWeights w;
  w.config = c;
  PDSERVE_ASSIGN_OR_RETURN(w.token_embedding, table.Take("model.embed_tokens.weight",
                                                         ShapeOf(c, Extent::kVocab, Extent::kDim)));
  w.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    for (const LayerTensorSpec& spec : LayerTensorSpecs()) {
      if (!HasTensor(spec, c.traits())) continue;
      PDSERVE_ASSIGN_OR_RETURN(w.layers[l].*spec.field,
                               table.Take(LayerTensorName(l, spec.hf_suffix), ShapeOf(c, spec)));
    }
  }
  PDSERVE_ASSIGN_OR_RETURN(
      w.final_norm, table.Take("model.norm.weight", ShapeOf(c, Extent::kDim, Extent::kNone)));
  if (c.tied_embeddings) {
    w.classifier = w.token_embedding;
    if (table.Has("lm_head.weight")) {  // some exporters save the tied copy; it is unused
      PDSERVE_RETURN_IF_ERROR(
          table.Take("lm_head.weight", ShapeOf(c, Extent::kVocab, Extent::kDim)).status());
    }
  } else {
    PDSERVE_ASSIGN_OR_RETURN(
        w.classifier, table.Take("lm_head.weight", ShapeOf(c, Extent::kVocab, Extent::kDim)));
  }
  if (config.swiftkv.has_value()) {
    PDSERVE_ASSIGN_OR_RETURN(w.swiftkv, TakeSwiftKv(c, *config.swiftkv, table));
  }
  PDSERVE_RETURN_IF_ERROR(table.CheckAllTaken(c));
  PDSERVE_RETURN_IF_ERROR(ValidateWeights(w));
  return w;
}

absl::StatusOr<TensorMap> LoadTensors(const std::string& dir) {
  const std::string index_path = JoinPath(dir, kIndexFile);
  if (FileExists(index_path)) return LoadShards(dir, index_path);
  const std::string single_path = JoinPath(dir, kSingleFile);
  if (FileExists(single_path)) return LoadSingleFile(single_path);
  return absl::NotFoundError(absl::StrCat(dir, ": neither ", kSingleFile, " nor ", kIndexFile,
                                          " found (only safetensors checkpoints are supported)"));
}

// ---------------------------------------------------------------------------------------------
// Writing

// The tensors in Hugging Face's order and names; lm_head only when untied; the SwiftKV tensors
// when w.swiftkv is set.
std::vector<NamedTensor> HfTensors(const ModelWeights& w) {
  std::vector<NamedTensor> out;
  out.push_back({"model.embed_tokens.weight", w.token_embedding});
  for (int l = 0; l < static_cast<int>(w.layers.size()); ++l) {
    for (const LayerTensorSpec& spec : LayerTensorSpecs()) {
      if (!HasTensor(spec, w.config.traits())) continue;
      out.push_back({LayerTensorName(l, spec.hf_suffix), w.layers[l].*spec.field});
    }
    if (!w.swiftkv.has_value() || l < w.swiftkv->layer) continue;
    const SwiftKvWeights& s = *w.swiftkv;
    out.push_back({LayerTensorName(l, kSwiftKvQ), s.wq[l - s.layer]});
    if ((l - s.layer) % s.group == 0) {
      out.push_back({LayerTensorName(l, kSwiftKvK), s.wk[(l - s.layer) / s.group]});
      out.push_back({LayerTensorName(l, kSwiftKvV), s.wv[(l - s.layer) / s.group]});
    }
  }
  out.push_back({"model.norm.weight", w.final_norm});
  if (w.swiftkv.has_value()) out.push_back({kSwiftKvNorm, w.swiftkv->norm});
  if (!w.config.tied_embeddings) out.push_back({"lm_head.weight", w.classifier});
  return out;
}

// Splits `tensors` into `num_shards` consecutive groups of (nearly) equal count.
absl::Status WriteShards(const std::string& dir, const std::vector<NamedTensor>& tensors,
                         int num_shards) {
  if (num_shards == 1) return WriteSafetensors(JoinPath(dir, kSingleFile), tensors);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total_size = 0;
  const size_t count = tensors.size();
  for (int s = 0; s < num_shards; ++s) {
    const std::string name = absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, num_shards);
    std::vector<NamedTensor> shard(tensors.begin() + s * count / num_shards,
                                   tensors.begin() + (s + 1) * count / num_shards);
    for (const NamedTensor& t : shard) {
      weight_map[t.name] = name;
      total_size += t.tensor.NumBytes();
    }
    PDSERVE_RETURN_IF_ERROR(WriteSafetensors(JoinPath(dir, name), shard));
  }
  nlohmann::ordered_json index = {{"metadata", {{"total_size", total_size}}},
                                  {"weight_map", weight_map}};
  return WriteJsonFile(JoinPath(dir, kIndexFile), index);
}

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot create '", path, "'"));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("failed writing '", path, "'"));
  return absl::OkStatus();
}

absl::Status WriteTokenizerFiles(const std::string& dir, const ModelConfig& c,
                                 const Vocabulary& vocab) {
  if (vocab.model != TokenizerModel::kSentencePiece) {
    return absl::InvalidArgumentError(
        "writing a byte-level BPE vocabulary as a Hugging Face tokenizer.json is not supported; "
        "write GGUF (--format gguf)");
  }
  const std::string model_path = JoinPath(dir, kTokenizerModelFile);
  PDSERVE_RETURN_IF_ERROR(WriteFile(model_path, EncodeSentencePieceModel(vocab)));
  if (absl::StatusOr<std::unique_ptr<Tokenizer>> check = LoadSentencePieceTokenizer(model_path);
      !check.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the vocabulary cannot be written as a SentencePiece model: ", check.status().message()));
  }
  return WriteJsonFile(JoinPath(dir, "tokenizer_config.json"), HfTokenizerConfigJson(c, vocab));
}

}  // namespace

absl::StatusOr<HfModel> LoadHfModel(const std::string& dir) {
  const std::string config_path = JoinPath(dir, kConfigFile);
  if (!FileExists(config_path)) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no ", kConfigFile, " (not a Hugging Face model directory)"));
  }
  PDSERVE_ASSIGN_OR_RETURN(Json config_json, ReadJsonFile(config_path));
  PDSERVE_ASSIGN_OR_RETURN(HfConfig config, ParseHfConfig(config_json, config_path));
  PDSERVE_ASSIGN_OR_RETURN(TensorMap tensors, LoadTensors(dir));
  TensorTable table(std::move(tensors), dir);
  HfModel model;
  PDSERVE_ASSIGN_OR_RETURN(model.weights, AssembleWeights(config, table));
  // SentencePiece models (Llama 2, Mistral) ship tokenizer.model beside a tokenizer.json converted
  // from it (byte fallback, Metaspace), which BpeTokenizer does not read: the .model comes first.
  for (const char* name : {kTokenizerModelFile, kTokenizerJsonFile}) {
    const std::string tokenizer_path = JoinPath(dir, name);
    if (model.tokenizer_model_path.empty() && FileExists(tokenizer_path)) {
      model.tokenizer_model_path = tokenizer_path;
    }
  }
  return model;
}

absl::Status WriteHfModel(const std::string& dir, const ModelWeights& weights,
                          const Vocabulary& vocab, const HfWriteOptions& options) {
  PDSERVE_RETURN_IF_ERROR(ValidateWeights(weights));
  PDSERVE_RETURN_IF_ERROR(vocab.Validate());
  const ModelConfig& c = weights.config;
  if (vocab.size() != c.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocabulary has ", vocab.size(), " tokens, the model ", c.vocab_size));
  }
  if (c.rope_scaling.factor == 0.0f && !c.rope_scaling.freq_factors.empty()) {
    return absl::InvalidArgumentError(
        "RoPE frequency factors read from GGUF (rope_freqs.weight) have no config.json form; "
        "write GGUF");
  }
  // A SwiftKV model is written as one only when it differs from the plain model (l < L).
  ModelWeights source = weights;
  std::optional<HfSwiftKvConfig> swiftkv;
  if (source.swiftkv.has_value() && source.swiftkv->layer < c.n_layers) {
    if (source.swiftkv->layer == 0) {
      return absl::InvalidArgumentError(
          "SwiftKV layer 0 cannot be written: LlamaSwiftKVConfig reads num_key_value_layers 0 as "
          "num_hidden_layers");
    }
    swiftkv = HfSwiftKvConfig{true, source.swiftkv->layer, source.swiftkv->group};
  } else {
    source.swiftkv.reset();
  }
  const int num_tensors = static_cast<int>(HfTensors(source).size());
  if (options.num_shards < 1 || options.num_shards > num_tensors) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_shards ", options.num_shards, " is outside [1, ", num_tensors, "]"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create directory '", dir, "': ", ec.message()));
  }
  PDSERVE_RETURN_IF_ERROR(WriteTokenizerFiles(dir, c, vocab));
  const ModelWeights w =
      WithRopePairing(ConvertWeights(source, options.dtype), RopePairing::kSplitHalf);
  PDSERVE_RETURN_IF_ERROR(WriteShards(dir, HfTensors(w), options.num_shards));
  PDSERVE_RETURN_IF_ERROR(
      WriteJsonFile(JoinPath(dir, kConfigFile), HfConfigJson(c, vocab, options.dtype, swiftkv)));
  nlohmann::ordered_json generation = {
      {"_from_model_config", true}, {"bos_token_id", vocab.bos_id}, {"eos_token_id", vocab.eos_id}};
  return WriteJsonFile(JoinPath(dir, "generation_config.json"), generation);
}

}  // namespace pdserve
