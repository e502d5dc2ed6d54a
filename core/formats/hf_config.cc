#include "core/formats/hf_config.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace pdserve {
namespace {

// RoPE parameters: transformers < 5 writes "rope_theta" at the top level and "rope_scaling" (null
// or a dict); transformers 5 writes {"rope_parameters": {"rope_type": ..., "rope_theta": ...}}.
// The dict's "rope_type" (or the legacy "type") is "default" (or absent) for plain RoPE, or
// "llama3" with all four of its fields; any other type is an error, never ignored.
absl::StatusOr<kernels::RopeScaling> ParseRopeScaling(const Json& json, const std::string& path,
                                                      const char* key) {
  const Json* rope = Member(json, key);
  if (rope == nullptr) return kernels::RopeScaling{};
  if (!rope->is_object()) return FieldError(path, key, "is not an object");
  std::string type = "default";
  for (const char* type_key : {"type", "rope_type"}) {  // rope_type wins when both are present
    const Json* value = Member(*rope, type_key);
    if (value == nullptr) continue;
    if (!value->is_string()) {
      return FieldError(path, key,
                        absl::StrCat("has ", type_key, " ", value->dump(), ", not a string"));
    }
    type = value->get<std::string>();
  }
  if (type == "default") return kernels::RopeScaling{};
  if (type != "llama3") {
    return FieldError(path, key,
                      absl::StrCat("has unsupported rope scaling type \"", type,
                                   "\"; only \"default\" and \"llama3\" are supported"));
  }
  const std::string where = absl::StrCat(path, " ", key, " (rope_type \"llama3\")");
  kernels::RopeScaling scaling;
  for (auto [field, out] : {std::pair{"factor", &scaling.factor},
                            std::pair{"low_freq_factor", &scaling.low_freq_factor},
                            std::pair{"high_freq_factor", &scaling.high_freq_factor}}) {
    if (Member(*rope, field) == nullptr) return FieldError(where, field, "is missing");
    PDSERVE_ASSIGN_OR_RETURN(double value, NumberField(*rope, where, field, 0.0));
    *out = static_cast<float>(value);
  }
  PDSERVE_ASSIGN_OR_RETURN(scaling.original_max_positions,
                           IntField(*rope, where, "original_max_position_embeddings"));
  if (scaling.factor == 0.0f) {  // 0 would read as "none": the file asked for scaling
    return FieldError(where, "factor", "is 0; llama3 scaling needs a factor ≥ 1");
  }
  return scaling;
}

// The scaling from "rope_parameters" (transformers 5) when it sets one, else from "rope_scaling";
// both are checked. InvalidArgument when both set one and they differ.
absl::StatusOr<kernels::RopeScaling> ReadRopeScaling(const Json& json, const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(kernels::RopeScaling parameters,
                           ParseRopeScaling(json, path, "rope_parameters"));
  PDSERVE_ASSIGN_OR_RETURN(kernels::RopeScaling legacy,
                           ParseRopeScaling(json, path, "rope_scaling"));
  if (parameters.factor == 0.0f) return legacy;
  if (legacy.factor != 0.0f &&
      (legacy.factor != parameters.factor || legacy.low_freq_factor != parameters.low_freq_factor ||
       legacy.high_freq_factor != parameters.high_freq_factor ||
       legacy.original_max_positions != parameters.original_max_positions)) {
    return FieldError(path, "rope_scaling", "disagrees with \"rope_parameters\"");
  }
  return parameters;
}

constexpr const char* kSwiftKvModelType = "llama_swiftkv";

// The family of model_type ("llama_swiftkv" is Llama with SwiftKV fields), rejecting the config
// variants whose math the engine does not implement.
absl::StatusOr<const FamilyTraits*> CheckSupportedArchitecture(const Json& json,
                                                               const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(std::string model_type, StringField(json, path, "model_type", nullptr));
  const FamilyTraits* family = model_type == kSwiftKvModelType ? &Traits(ModelFamily::kLlama)
                                                               : FamilyByHfModelType(model_type);
  if (family == nullptr) {
    std::string known;
    for (const FamilyTraits& f : AllFamilies())
      absl::StrAppend(&known, "\"", f.hf_model_type, "\", ");
    return FieldError(
        path, "model_type",
        absl::StrCat("is \"", model_type, "\"; supported: ", known, "\"", kSwiftKvModelType, "\""));
  }
  PDSERVE_ASSIGN_OR_RETURN(std::string act, StringField(json, path, "hidden_act", "silu"));
  if (act != "silu") {
    return FieldError(path, "hidden_act", absl::StrCat("is \"", act, "\"; only silu is supported"));
  }
  // Qwen2's q/k/v biases are not a config field; elsewhere "attention_bias" would add biases the
  // family does not have (Qwen3's also on o_proj).
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    PDSERVE_ASSIGN_OR_RETURN(bool bias, BoolField(json, path, key, false));
    if (bias) {
      return FieldError(path, key,
                        absl::StrCat("is true; ", family->hf_model_type,
                                     " with biases there is "
                                     "not supported"));
    }
  }
  return family;
}

// LlamaSwiftKVConfig's fields; 0 and null mean the default, as `x or default` does in Python.
absl::StatusOr<HfSwiftKvConfig> ParseSwiftKv(const Json& json, const std::string& path,
                                             int n_layers) {
  HfSwiftKvConfig s;
  PDSERVE_ASSIGN_OR_RETURN(s.enabled, BoolField(json, path, "swiftkv", false));
  PDSERVE_ASSIGN_OR_RETURN(s.layer, IntField(json, path, "num_key_value_layers", 0));
  PDSERVE_ASSIGN_OR_RETURN(s.group, IntField(json, path, "key_value_group_size", 0));
  if (s.layer == 0) s.layer = n_layers;
  if (s.group == 0) s.group = 1;
  if (s.layer < 0 || s.layer > n_layers) {
    return FieldError(
        path, "num_key_value_layers",
        absl::StrCat("is ", s.layer, ", outside [0, num_hidden_layers = ", n_layers, "]"));
  }
  if (s.group < 0) {
    return FieldError(path, "key_value_group_size", absl::StrCat("is ", s.group, ", not ≥ 1"));
  }
  if ((n_layers - s.layer) % s.group != 0) {
    return FieldError(path, "key_value_group_size",
                      absl::StrCat("is ", s.group, ", which does not divide num_hidden_layers − ",
                                   "num_key_value_layers = ", n_layers - s.layer));
  }
  return s;
}

// Mistral is Llama's math plus, in some releases (v0.1), sliding-window attention: each token
// attends to the last sliding_window positions; Qwen2/Qwen3 the same in the layers from
// max_window_layers on when "use_sliding_window" is true (false in every released checkpoint).
// Within a context no longer than the window that is full attention, so such a model is served
// with its context capped at the window.
absl::Status LimitToSlidingWindow(const Json& json, const std::string& path, ModelConfig& c) {
  if (c.family == ModelFamily::kQwen2 || c.family == ModelFamily::kQwen3) {
    PDSERVE_ASSIGN_OR_RETURN(bool used, BoolField(json, path, "use_sliding_window", false));
    if (!used) return absl::OkStatus();
  } else if (c.family != ModelFamily::kMistral) {
    return absl::OkStatus();  // LlamaConfig has no window
  }
  const Json* window = Member(json, "sliding_window");
  if (window == nullptr || window->is_null()) return absl::OkStatus();
  PDSERVE_ASSIGN_OR_RETURN(int size, IntField(json, path, "sliding_window"));
  if (size < 1) return FieldError(path, "sliding_window", absl::StrCat("is ", size, ", not ≥ 1"));
  c.max_seq_len = std::min(c.max_seq_len, size);
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

}  // namespace

absl::StatusOr<HfConfig> ParseHfConfig(const Json& json, const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(const FamilyTraits* family, CheckSupportedArchitecture(json, path));
  PDSERVE_ASSIGN_OR_RETURN(std::string model_type, StringField(json, path, "model_type", nullptr));
  HfConfig out;
  ModelConfig& c = out.model;
  c.family = family->family;
  PDSERVE_ASSIGN_OR_RETURN(c.dim, IntField(json, path, "hidden_size"));
  PDSERVE_ASSIGN_OR_RETURN(c.hidden_dim, IntField(json, path, "intermediate_size"));
  PDSERVE_ASSIGN_OR_RETURN(c.n_layers, IntField(json, path, "num_hidden_layers"));
  PDSERVE_ASSIGN_OR_RETURN(c.n_heads, IntField(json, path, "num_attention_heads"));
  PDSERVE_ASSIGN_OR_RETURN(c.n_kv_heads, IntField(json, path, "num_key_value_heads", c.n_heads));
  PDSERVE_ASSIGN_OR_RETURN(c.vocab_size, IntField(json, path, "vocab_size"));
  PDSERVE_ASSIGN_OR_RETURN(c.max_seq_len, IntField(json, path, "max_position_embeddings", 2048));
  PDSERVE_ASSIGN_OR_RETURN(double eps, NumberField(json, path, "rms_norm_eps", 1e-6));
  PDSERVE_ASSIGN_OR_RETURN(double theta, RopeTheta(json, path));
  PDSERVE_ASSIGN_OR_RETURN(c.rope_scaling, ReadRopeScaling(json, path));
  PDSERVE_ASSIGN_OR_RETURN(c.tied_embeddings, BoolField(json, path, "tie_word_embeddings", false));
  c.norm_eps = static_cast<float>(eps);
  c.rope_theta = static_cast<float>(theta);
  c.rope_pairing = RopePairing::kSplitHalf;
  // head_dim is explicit where it is not hidden_size / num_attention_heads (Qwen3-0.6B).
  PDSERVE_ASSIGN_OR_RETURN(int head_dim, IntField(json, path, "head_dim", 0));
  c.SetHeadDim(head_dim);
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  if (!(eps > 0 && eps < 1) || !(theta > 0 && theta < 1e12)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": rms_norm_eps ", eps, " or rope_theta ", theta, " is out of range"));
  }
  PDSERVE_RETURN_IF_ERROR(LimitToSlidingWindow(json, path, c));
  if (model_type == kSwiftKvModelType) {
    PDSERVE_ASSIGN_OR_RETURN(out.swiftkv, ParseSwiftKv(json, path, c.n_layers));
  }
  return out;
}

namespace {

// The shortest decimal that reads back as `value` (1e-05, not 9.99999974737875e-06).
double ShortestDouble(float value) {
  char text[64];
  auto [end, ec] = std::to_chars(text, text + sizeof(text), value);
  double out = value;
  if (ec == std::errc()) std::from_chars(text, end, out);
  return out;
}

// transformers' rope_scaling dict for `s` (as Llama 3.1's config.json has it), null when none.
nlohmann::ordered_json RopeScalingJson(const kernels::RopeScaling& s) {
  if (s.factor == 0.0f) return nullptr;
  return {{"factor", ShortestDouble(s.factor)},
          {"low_freq_factor", ShortestDouble(s.low_freq_factor)},
          {"high_freq_factor", ShortestDouble(s.high_freq_factor)},
          {"original_max_position_embeddings", s.original_max_positions},
          {"rope_type", "llama3"}};
}

const char* TorchDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    default:
      return "float32";  // the HF writer converts quantized weights first
  }
}

}  // namespace

nlohmann::ordered_json HfConfigJson(const ModelConfig& c, const Vocabulary& vocab, DType dtype,
                                    const std::optional<HfSwiftKvConfig>& swiftkv) {
  nlohmann::ordered_json json = {
      {"architectures", {swiftkv ? "LlamaSwiftKVForCausalLM" : c.traits().hf_architecture}},
      {"model_type", swiftkv ? kSwiftKvModelType : c.traits().hf_model_type},
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
      {"rope_scaling", RopeScalingJson(c.rope_scaling)},
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
  if (swiftkv) {
    json["swiftkv"] = swiftkv->enabled;
    json["num_key_value_layers"] = swiftkv->layer;
    json["key_value_group_size"] = swiftkv->group;
  }
  return json;
}

nlohmann::ordered_json HfTokenizerConfigJson(const ModelConfig& c, const Vocabulary& vocab) {
  auto token = [&vocab](int id) { return SpaceToMetaspace(vocab.pieces[id]); };
  nlohmann::ordered_json config = {{"tokenizer_class", "LlamaTokenizer"},
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
  if (!vocab.chat_template.empty()) config["chat_template"] = vocab.chat_template;
  return config;
}

}  // namespace pdserve
