#include "core/model/hf_model.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/mapped_file.h"
#include "core/base/status_macros.h"
#include "core/model/safetensors.h"
#include "core/model/sentencepiece_model_writer.h"
#include "core/model/sentencepiece_tokenizer.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using Json = nlohmann::json;

constexpr int kMaxJsonDepth = 64;
constexpr const char* kConfigFile = "config.json";
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kTokenizerModelFile = "tokenizer.model";
constexpr const char* kLayerPrefix = "model.layers.";

// Which config dimension a tensor axis has.
enum class Dim { kNone, kModel, kKv, kHidden, kVocab };

struct LayerTensor {
  const char* suffix;  // after "model.layers.N."
  Tensor LayerWeights::*field;
  Dim rows;
  Dim cols;  // kNone for vectors
};

constexpr LayerTensor kLayerTensors[] = {
    {"self_attn.q_proj.weight", &LayerWeights::wq, Dim::kModel, Dim::kModel},
    {"self_attn.k_proj.weight", &LayerWeights::wk, Dim::kKv, Dim::kModel},
    {"self_attn.v_proj.weight", &LayerWeights::wv, Dim::kKv, Dim::kModel},
    {"self_attn.o_proj.weight", &LayerWeights::wo, Dim::kModel, Dim::kModel},
    {"mlp.gate_proj.weight", &LayerWeights::w1, Dim::kHidden, Dim::kModel},
    {"mlp.up_proj.weight", &LayerWeights::w3, Dim::kHidden, Dim::kModel},
    {"mlp.down_proj.weight", &LayerWeights::w2, Dim::kModel, Dim::kHidden},
    {"input_layernorm.weight", &LayerWeights::attn_norm, Dim::kModel, Dim::kNone},
    {"post_attention_layernorm.weight", &LayerWeights::ffn_norm, Dim::kModel, Dim::kNone},
};

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

std::vector<int64_t> ShapeOf(const ModelConfig& c, Dim rows, Dim cols) {
  auto size = [&c](Dim d) -> int64_t {
    switch (d) {
      case Dim::kModel:
        return c.dim;
      case Dim::kKv:
        return c.kv_dim();
      case Dim::kHidden:
        return c.hidden_dim;
      case Dim::kVocab:
        return c.vocab_size;
      case Dim::kNone:
        break;
    }
    return 0;
  };
  if (cols == Dim::kNone) return {size(rows)};
  return {size(rows), size(cols)};
}

bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// ---------------------------------------------------------------------------------------------
// JSON files

absl::StatusOr<Json> ReadJsonFile(const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  const auto* text = reinterpret_cast<const char*>(file->data());
  bool too_deep = false;
  // Values nested too deeply are dropped as they are parsed, bounding memory; then rejected.
  Json::parser_callback_t limit_depth = [&too_deep](int depth, Json::parse_event_t, Json&) {
    if (depth <= kMaxJsonDepth) return true;
    too_deep = true;
    return false;
  };
  Json json = Json::parse(text, text + file->size(), limit_depth, /*allow_exceptions=*/false);
  if (json.is_discarded() || too_deep) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return json;
}

// The member `key` of `json`, or nullptr when it is absent or null.
const Json* Member(const Json& json, const char* key) {
  auto it = json.find(key);
  return it == json.end() || it->is_null() ? nullptr : &*it;
}

absl::Status FieldError(const std::string& path, const char* key, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": \"", key, "\" ", problem));
}

absl::StatusOr<int> IntField(const Json& json, const std::string& path, const char* key,
                             std::optional<int> fallback = std::nullopt) {
  const Json* value = Member(json, key);
  if (value == nullptr) {
    if (fallback) return *fallback;
    return FieldError(path, key, "is missing");
  }
  if (!value->is_number_integer()) return FieldError(path, key, "is not an integer");
  constexpr int64_t kMin = std::numeric_limits<int>::min(), kMax = std::numeric_limits<int>::max();
  const bool in_range = value->is_number_unsigned()
                            ? value->get<uint64_t>() <= static_cast<uint64_t>(kMax)
                            : value->get<int64_t>() >= kMin && value->get<int64_t>() <= kMax;
  if (!in_range) {
    return FieldError(path, key, "is out of range");
  }
  return static_cast<int>(value->get<int64_t>());
}

absl::StatusOr<double> NumberField(const Json& json, const std::string& path, const char* key,
                                   double fallback) {
  const Json* value = Member(json, key);
  if (value == nullptr) return fallback;
  if (!value->is_number()) return FieldError(path, key, "is not a number");
  return value->get<double>();
}

absl::StatusOr<bool> BoolField(const Json& json, const std::string& path, const char* key,
                               bool fallback) {
  const Json* value = Member(json, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) return FieldError(path, key, "is not a boolean");
  return value->get<bool>();
}

absl::StatusOr<std::string> StringField(const Json& json, const std::string& path, const char* key,
                                        const char* fallback) {
  const Json* value = Member(json, key);
  if (value == nullptr) {
    if (fallback != nullptr) return std::string(fallback);
    return FieldError(path, key, "is missing");
  }
  if (!value->is_string()) return FieldError(path, key, "is not a string");
  return value->get<std::string>();
}

// ---------------------------------------------------------------------------------------------
// config.json

// RoPE parameters: transformers < 5 writes "rope_theta" at the top level and "rope_scaling" (null
// or a dict); transformers 5 writes {"rope_parameters": {"rope_type": ..., "rope_theta": ...}}.
// Only plain RoPE (no type, or "default") is supported; anything else is an error, never ignored.
absl::Status CheckDefaultRope(const Json& json, const std::string& path, const char* key) {
  const Json* rope = Member(json, key);
  if (rope == nullptr) return absl::OkStatus();
  if (!rope->is_object()) return FieldError(path, key, "is not an object");
  for (const char* type_key : {"rope_type", "type"}) {
    const Json* type = Member(*rope, type_key);
    if (type == nullptr) continue;
    if (!type->is_string() || type->get<std::string>() != "default") {
      return FieldError(path, key,
                        absl::StrCat("has ", type_key, " ", type->dump(),
                                     "; only plain RoPE (\"default\") is supported"));
    }
  }
  return absl::OkStatus();
}

// Rejects the LlamaConfig variants whose math the engine does not implement.
absl::Status CheckSupportedArchitecture(const Json& json, const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(std::string model_type, StringField(json, path, "model_type", nullptr));
  if (model_type == "llama_swiftkv") {
    return FieldError(path, "model_type",
                      "is \"llama_swiftkv\": SwiftKV checkpoints are not supported yet");
  }
  if (model_type != "llama") {
    return FieldError(path, "model_type",
                      absl::StrCat("is \"", model_type, "\"; only \"llama\" is supported"));
  }
  PDSERVE_ASSIGN_OR_RETURN(std::string act, StringField(json, path, "hidden_act", "silu"));
  if (act != "silu") {
    return FieldError(path, "hidden_act", absl::StrCat("is \"", act, "\"; only silu is supported"));
  }
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    PDSERVE_RETURN_IF_ERROR(CheckDefaultRope(json, path, key));
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    PDSERVE_ASSIGN_OR_RETURN(bool bias, BoolField(json, path, key, false));
    if (bias) return FieldError(path, key, "is true; biases are not supported");
  }
  return absl::OkStatus();
}

// rope_theta from "rope_parameters" (transformers 5), else the top level, else 10000.
absl::StatusOr<double> RopeTheta(const Json& json, const std::string& path) {
  if (const Json* rope = Member(json, "rope_parameters"); rope != nullptr) {
    if (Member(*rope, "rope_theta") != nullptr) {
      return NumberField(*rope, path + " rope_parameters", "rope_theta", 10000.0);
    }
  }
  return NumberField(json, path, "rope_theta", 10000.0);
}

absl::StatusOr<ModelConfig> ParseLlamaConfig(const Json& json, const std::string& path) {
  PDSERVE_RETURN_IF_ERROR(CheckSupportedArchitecture(json, path));
  ModelConfig c;
  PDSERVE_ASSIGN_OR_RETURN(c.dim, IntField(json, path, "hidden_size"));
  PDSERVE_ASSIGN_OR_RETURN(c.hidden_dim, IntField(json, path, "intermediate_size"));
  PDSERVE_ASSIGN_OR_RETURN(c.n_layers, IntField(json, path, "num_hidden_layers"));
  PDSERVE_ASSIGN_OR_RETURN(c.n_heads, IntField(json, path, "num_attention_heads"));
  PDSERVE_ASSIGN_OR_RETURN(c.n_kv_heads, IntField(json, path, "num_key_value_heads", c.n_heads));
  PDSERVE_ASSIGN_OR_RETURN(c.vocab_size, IntField(json, path, "vocab_size"));
  PDSERVE_ASSIGN_OR_RETURN(c.max_seq_len, IntField(json, path, "max_position_embeddings", 2048));
  PDSERVE_ASSIGN_OR_RETURN(double eps, NumberField(json, path, "rms_norm_eps", 1e-6));
  PDSERVE_ASSIGN_OR_RETURN(double theta, RopeTheta(json, path));
  PDSERVE_ASSIGN_OR_RETURN(c.tied_embeddings, BoolField(json, path, "tie_word_embeddings", false));
  c.norm_eps = static_cast<float>(eps);
  c.rope_theta = static_cast<float>(theta);
  c.rope_pairing = RopePairing::kSplitHalf;
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  if (!(eps > 0 && eps < 1) || !(theta > 0 && theta < 1e12)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": rms_norm_eps ", eps, " or rope_theta ", theta, " is out of range"));
  }
  PDSERVE_ASSIGN_OR_RETURN(int head_dim, IntField(json, path, "head_dim", c.head_dim()));
  if (head_dim != c.head_dim()) {
    return FieldError(path, "head_dim",
                      absl::StrCat("is ", head_dim, ", not hidden_size / num_attention_heads = ",
                                   c.head_dim(), "; not supported"));
  }
  return c;
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
  absl::Status CheckAllTaken(int n_layers) const {
    for (const auto& [name, source] : tensors_) {
      if (absl::EndsWith(name, "rotary_emb.inv_freq")) continue;
      const int layer = LayerIndexOf(name);
      std::string why = layer >= n_layers ? absl::StrCat("belongs to layer ", layer,
                                                         " but num_hidden_layers is ", n_layers)
                                          : "is not part of a Llama model";
      return absl::InvalidArgumentError(
          absl::StrCat(source.file, ": unexpected tensor '", name, "': it ", why));
    }
    return absl::OkStatus();
  }

 private:
  TensorMap tensors_;
  std::string dir_;
};

absl::StatusOr<ModelWeights> AssembleWeights(const ModelConfig& c, TensorTable& table) {
  ModelWeights w;
  w.config = c;
  PDSERVE_ASSIGN_OR_RETURN(w.token_embedding, table.Take("model.embed_tokens.weight",
                                                         ShapeOf(c, Dim::kVocab, Dim::kModel)));
  w.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    for (const LayerTensor& spec : kLayerTensors) {
      PDSERVE_ASSIGN_OR_RETURN(
          w.layers[l].*spec.field,
          table.Take(LayerTensorName(l, spec.suffix), ShapeOf(c, spec.rows, spec.cols)));
    }
  }
  PDSERVE_ASSIGN_OR_RETURN(w.final_norm,
                           table.Take("model.norm.weight", ShapeOf(c, Dim::kModel, Dim::kNone)));
  if (c.tied_embeddings) {
    w.classifier = w.token_embedding;
    if (table.Has("lm_head.weight")) {  // some exporters save the tied copy; it is unused
      PDSERVE_RETURN_IF_ERROR(
          table.Take("lm_head.weight", ShapeOf(c, Dim::kVocab, Dim::kModel)).status());
    }
  } else {
    PDSERVE_ASSIGN_OR_RETURN(w.classifier,
                             table.Take("lm_head.weight", ShapeOf(c, Dim::kVocab, Dim::kModel)));
  }
  PDSERVE_RETURN_IF_ERROR(table.CheckAllTaken(c.n_layers));
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

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot create '", path, "'"));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("failed writing '", path, "'"));
  return absl::OkStatus();
}

absl::Status WriteJson(const std::string& path, const nlohmann::ordered_json& json) {
  return WriteFile(path, json.dump(2, ' ', false, Json::error_handler_t::replace) + "\n");
}

// The shortest decimal that reads back as `value` (1e-05, not 9.99999974737875e-06).
double ShortestDouble(float value) {
  char text[64];
  auto [end, ec] = std::to_chars(text, text + sizeof(text), value);
  double out = value;
  if (ec == std::errc()) std::from_chars(text, end, out);
  return out;
}

const char* TorchDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
  }
  return "float32";
}

nlohmann::ordered_json ConfigJson(const ModelConfig& c, const Vocabulary& vocab, DType dtype) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", c.dim},
          {"intermediate_size", c.hidden_dim},
          {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},
          {"num_key_value_heads", c.n_kv_heads},
          {"head_dim", c.head_dim()},
          {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.max_seq_len},
          {"rms_norm_eps", ShortestDouble(c.norm_eps)},
          {"rope_theta", ShortestDouble(c.rope_theta)},
          {"rope_scaling", nullptr},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tie_word_embeddings", c.tied_embeddings},
          {"torch_dtype", TorchDTypeName(dtype)},
          {"bos_token_id", vocab.bos_id},
          {"eos_token_id", vocab.eos_id},
          {"initializer_range", 0.02},
          {"pretraining_tp", 1},
          {"use_cache", true}};
}

nlohmann::ordered_json TokenizerConfigJson(const ModelConfig& c, const Vocabulary& vocab) {
  auto token = [&vocab](int id) { return SpaceToMetaspace(vocab.pieces[id]); };
  return {{"tokenizer_class", "LlamaTokenizer"},
          {"add_bos_token", true},
          {"add_eos_token", false},
          {"bos_token", token(vocab.bos_id)},
          {"eos_token", token(vocab.eos_id)},
          {"unk_token", token(vocab.unk_id)},
          {"pad_token", nullptr},
          {"clean_up_tokenization_spaces", false},
          {"legacy", true},
          {"model_max_length", c.max_seq_len},
          {"sp_model_kwargs", nlohmann::ordered_json::object()}};
}

// The tensors in Hugging Face's order and names; lm_head only when untied.
std::vector<NamedTensor> HfTensors(const ModelWeights& w) {
  std::vector<NamedTensor> out;
  out.push_back({"model.embed_tokens.weight", w.token_embedding});
  for (int l = 0; l < static_cast<int>(w.layers.size()); ++l) {
    for (const LayerTensor& spec : kLayerTensors) {
      out.push_back({LayerTensorName(l, spec.suffix), w.layers[l].*spec.field});
    }
  }
  out.push_back({"model.norm.weight", w.final_norm});
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
  return WriteJson(JoinPath(dir, kIndexFile), index);
}

absl::Status WriteTokenizerFiles(const std::string& dir, const ModelConfig& c,
                                 const Vocabulary& vocab) {
  const std::string model_path = JoinPath(dir, kTokenizerModelFile);
  PDSERVE_RETURN_IF_ERROR(WriteFile(model_path, EncodeSentencePieceModel(vocab)));
  if (absl::StatusOr<std::unique_ptr<Tokenizer>> check = LoadSentencePieceTokenizer(model_path);
      !check.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the vocabulary cannot be written as a SentencePiece model: ", check.status().message()));
  }
  return WriteJson(JoinPath(dir, "tokenizer_config.json"), TokenizerConfigJson(c, vocab));
}

}  // namespace

absl::StatusOr<HfModel> LoadHfModel(const std::string& dir) {
  const std::string config_path = JoinPath(dir, kConfigFile);
  if (!FileExists(config_path)) {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no ", kConfigFile, " (not a Hugging Face model directory)"));
  }
  PDSERVE_ASSIGN_OR_RETURN(Json config_json, ReadJsonFile(config_path));
  PDSERVE_ASSIGN_OR_RETURN(ModelConfig config, ParseLlamaConfig(config_json, config_path));
  PDSERVE_ASSIGN_OR_RETURN(TensorMap tensors, LoadTensors(dir));
  TensorTable table(std::move(tensors), dir);
  HfModel model;
  PDSERVE_ASSIGN_OR_RETURN(model.weights, AssembleWeights(config, table));
  const std::string tokenizer_path = JoinPath(dir, kTokenizerModelFile);
  if (FileExists(tokenizer_path)) model.tokenizer_model_path = tokenizer_path;
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
  const int num_tensors = 2 + 9 * c.n_layers + (c.tied_embeddings ? 0 : 1);
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
      WithRopePairing(ConvertWeights(weights, options.dtype), RopePairing::kSplitHalf);
  PDSERVE_RETURN_IF_ERROR(WriteShards(dir, HfTensors(w), options.num_shards));
  PDSERVE_RETURN_IF_ERROR(
      WriteJson(JoinPath(dir, kConfigFile), ConfigJson(c, vocab, options.dtype)));
  nlohmann::ordered_json generation = {
      {"_from_model_config", true}, {"bos_token_id", vocab.bos_id}, {"eos_token_id", vocab.eos_id}};
  return WriteJson(JoinPath(dir, "generation_config.json"), generation);
}

}  // namespace pdserve
