#include "core/formats/hf_model.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "core/formats/safetensors.h"
#include "core/model/random_model.h"
#include "core/tokenizer/sentencepiece_tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = std::string(::testing::TempDir()) + "hf_model_test/" + info->test_suite_name() +
                    "." + info->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

ModelConfig SmallConfig(bool tied) {
  ModelConfig c;
  c.dim = 64;
  c.hidden_dim = 96;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 300;
  c.max_seq_len = 128;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_pairing = RopePairing::kAdjacent;
  c.tied_embeddings = tied;
  return c;
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && std::memcmp(a.data, b.data, a.NumBytes()) == 0;
}

void ExpectSameWeights(const ModelWeights& a, const ModelWeights& b) {
  const ModelConfig &x = a.config, &y = b.config;
  EXPECT_EQ(x.Describe(), y.Describe());
  EXPECT_EQ(x.norm_eps, y.norm_eps);
  EXPECT_EQ(x.rope_theta, y.rope_theta);
  EXPECT_EQ(x.rope_pairing, y.rope_pairing);
  EXPECT_EQ(x.tied_embeddings, y.tied_embeddings);
  EXPECT_TRUE(SameTensor(a.token_embedding, b.token_embedding));
  EXPECT_TRUE(SameTensor(a.final_norm, b.final_norm));
  EXPECT_TRUE(SameTensor(a.classifier, b.classifier));
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    for (Tensor LayerWeights::*f : {&LayerWeights::attn_norm, &LayerWeights::wq, &LayerWeights::wk,
                                    &LayerWeights::wv, &LayerWeights::wo, &LayerWeights::ffn_norm,
                                    &LayerWeights::w1, &LayerWeights::w2, &LayerWeights::w3}) {
      EXPECT_TRUE(SameTensor(a.layers[l].*f, b.layers[l].*f)) << "layer " << l;
    }
  }
}

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in, nullptr, false);
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// Writes the small model to a fresh directory and returns it.
std::string WriteSmallModel(bool tied, int shards = 1) {
  const std::string dir = TestDir() + "/model";
  absl::Status s = WriteHfModel(dir, MakeRandomModel(SmallConfig(tied), 7),
                                SyntheticVocabulary(300), {DType::kF32, shards});
  EXPECT_TRUE(s.ok()) << s;
  return dir;
}

struct RoundTripCase {
  bool tied;
  int shards;
};

class HfRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(HfRoundTripTest, LoadsExactlyWhatWasWritten) {
  const RoundTripCase p = GetParam();
  const std::string dir = TestDir() + "/model";
  const ModelWeights source = MakeRandomModel(SmallConfig(p.tied), 42);
  ASSERT_TRUE(WriteHfModel(dir, source, SyntheticVocabulary(300), {DType::kF32, p.shards}).ok());
  if (p.shards == 1) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors"));
  } else {
    for (int s = 1; s <= p.shards; ++s) {
      EXPECT_TRUE(std::filesystem::exists(
          absl::StrFormat("%s/model-%05d-of-%05d.safetensors", dir, s, p.shards)));
    }
    Json index = ReadJson(dir + "/model.safetensors.index.json");
    ASSERT_TRUE(index.is_object());
    EXPECT_EQ(index["weight_map"].size(), 2u + 9u * 2u + (p.tied ? 0u : 1u));
    EXPECT_TRUE(index["metadata"]["total_size"].is_number_unsigned());
  }
  absl::StatusOr<HfModel> model = LoadHfModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->tokenizer_model_path, dir + "/tokenizer.model");
  EXPECT_EQ(model->weights.config.rope_pairing, RopePairing::kSplitHalf);
  // Stored as Hugging Face stores them: q/k rows in the split-half order, zero copy.
  const ModelWeights split = WithRopePairing(source, RopePairing::kSplitHalf);
  EXPECT_TRUE(SameTensor(model->weights.layers[1].wq, split.layers[1].wq));
  EXPECT_TRUE(SameTensor(model->weights.layers[1].wk, split.layers[1].wk));
  EXPECT_FALSE(SameTensor(model->weights.layers[1].wq, source.layers[1].wq));
  ExpectSameWeights(WithRopePairing(model->weights, RopePairing::kAdjacent), source);
}

INSTANTIATE_TEST_SUITE_P(Layouts, HfRoundTripTest,
                         ::testing::Values(RoundTripCase{false, 1}, RoundTripCase{true, 1},
                                           RoundTripCase{false, 3}, RoundTripCase{true, 3}),
                         [](const auto& info) {
                           return absl::StrFormat("%s_%dshards",
                                                  info.param.tied ? "tied" : "untied",
                                                  info.param.shards);
                         });

TEST(HfModelTest, WritesTransformersConfig) {
  const std::string dir = WriteSmallModel(/*tied=*/false);
  Json config = ReadJson(dir + "/config.json");
  ASSERT_TRUE(config.is_object());
  EXPECT_EQ(config["architectures"], Json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(config["model_type"], "llama");
  EXPECT_EQ(config["hidden_size"], 64);
  EXPECT_EQ(config["intermediate_size"], 96);
  EXPECT_EQ(config["num_hidden_layers"], 2);
  EXPECT_EQ(config["num_attention_heads"], 4);
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["vocab_size"], 300);
  EXPECT_EQ(config["max_position_embeddings"], 128);
  EXPECT_EQ(config["rms_norm_eps"], 1e-5);
  EXPECT_EQ(config["rope_theta"], 10000.0);
  EXPECT_EQ(config["tie_word_embeddings"], false);
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(config["hidden_act"], "silu");
  EXPECT_EQ(config["bos_token_id"], 1);
  EXPECT_EQ(config["eos_token_id"], 2);
  EXPECT_TRUE(ReadJson(dir + "/generation_config.json").is_object());
  Json tokenizer_config = ReadJson(dir + "/tokenizer_config.json");
  EXPECT_EQ(tokenizer_config["tokenizer_class"], "LlamaTokenizer");
  EXPECT_EQ(tokenizer_config["bos_token"], "<s>");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadSentencePieceTokenizer(dir + "/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), 300);
}

TEST(HfModelTest, WritesBf16MatricesAndF32Norms) {
  const std::string dir = TestDir() + "/model";
  const ModelWeights source = MakeRandomModel(SmallConfig(false), 3);
  ASSERT_TRUE(WriteHfModel(dir, source, SyntheticVocabulary(300), {DType::kBF16, 2}).ok());
  EXPECT_EQ(ReadJson(dir + "/config.json")["torch_dtype"], "bfloat16");
  absl::StatusOr<HfModel> model = LoadHfModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelWeights loaded = WithRopePairing(model->weights, RopePairing::kAdjacent);
  ExpectSameWeights(loaded, ConvertWeights(source, DType::kBF16));
  EXPECT_EQ(loaded.layers[0].wq.dtype, DType::kBF16);
  EXPECT_EQ(loaded.layers[0].attn_norm.dtype, DType::kF32);
}

TEST(HfModelTest, RejectsBadWriteArguments) {
  const std::string dir = TestDir();
  const ModelWeights w = MakeRandomModel(SmallConfig(true), 1);
  EXPECT_FALSE(WriteHfModel(dir + "/a", w, SyntheticVocabulary(299), {}).ok());
  EXPECT_FALSE(WriteHfModel(dir + "/b", w, SyntheticVocabulary(300), {DType::kF32, 0}).ok());
  EXPECT_FALSE(WriteHfModel(dir + "/c", w, SyntheticVocabulary(300), {DType::kF32, 100}).ok());
}

// Rewrites config.json of a freshly written model with `edit` and returns the load status.
absl::StatusOr<HfModel> LoadModelWithConfig(const std::function<void(Json&)>& edit) {
  const std::string dir = WriteSmallModel(/*tied=*/false);
  Json config = ReadJson(dir + "/config.json");
  edit(config);
  WriteText(dir + "/config.json", config.dump());
  return LoadHfModel(dir);
}

absl::Status LoadWithConfig(const std::function<void(Json&)>& edit) {
  return LoadModelWithConfig(edit).status();
}

TEST(HfModelTest, RejectsUnsupportedConfigs) {
  struct Case {
    const char* label;
    std::function<void(Json&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"falcon", [](Json& j) { j["model_type"] = "falcon"; },
       "supported: \"llama\", \"mistral\", \"qwen2\", \"qwen3\", \"llama_swiftkv\""},
      {"mistral_window",
       [](Json& j) {
         j["model_type"] = "mistral";
         j["sliding_window"] = 0;
       },
       "sliding_window"},
      {"no_model_type", [](Json& j) { j.erase("model_type"); }, "model_type"},
      {"gelu", [](Json& j) { j["hidden_act"] = "gelu"; }, "hidden_act"},
      {"rope_scaling_linear",
       [](Json& j) {
         j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
       },
       "\"rope_scaling\" has unsupported rope scaling type \"linear\""},
      {"rope_scaling_dynamic",
       [](Json& j) {
         j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
       },
       "unsupported rope scaling type \"dynamic\""},
      {"rope_parameters_yarn",
       [](Json& j) {
         j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 500000.0}};
       },
       "\"rope_parameters\" has unsupported rope scaling type \"yarn\""},
      {"rope_type_number",
       [](Json& j) {
         j["rope_scaling"] = {{"rope_type", 3}};
       },
       "rope_type 3"},
      {"rope_parameters_llama3_without_fields",
       [](Json& j) {
         j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}};
       },
       "rope_parameters (rope_type \"llama3\"): \"factor\" is missing"},
      {"rope_parameters_number", [](Json& j) { j["rope_parameters"] = 5; }, "rope_parameters"},
      {"attention_bias", [](Json& j) { j["attention_bias"] = true; }, "attention_bias"},
      {"mlp_bias", [](Json& j) { j["mlp_bias"] = true; }, "mlp_bias"},
      {"string_size", [](Json& j) { j["hidden_size"] = "64"; }, "hidden_size\" is not an integer"},
      {"float_size", [](Json& j) { j["hidden_size"] = 64.5; }, "hidden_size\" is not an integer"},
      {"huge_size", [](Json& j) { j["hidden_size"] = 1ull << 40; },
       "hidden_size\" is out of range"},
      {"no_layers", [](Json& j) { j.erase("num_hidden_layers"); },
       "num_hidden_layers\" is missing"},
      {"bool_tie", [](Json& j) { j["tie_word_embeddings"] = 1; }, "tie_word_embeddings"},
      {"string_eps", [](Json& j) { j["rms_norm_eps"] = "small"; }, "rms_norm_eps"},
      // A head dim other than hidden_size / heads (16 here) changes the q and o projections'
      // shapes.
      {"head_dim", [](Json& j) { j["head_dim"] = 32; }, "self_attn.q_proj.weight"},
      {"odd_head_dim", [](Json& j) { j["head_dim"] = 7; }, "head dim 7 is odd"},
      {"bad_heads", [](Json& j) { j["num_attention_heads"] = 5; }, "config.json"},
      // With num_key_value_heads absent it defaults to 4 heads: k_proj's 32 rows then disagree.
      {"default_kv_heads", [](Json& j) { j.erase("num_key_value_heads"); }, "k_proj"},
      {"wider",
       [](Json& j) {
         j["hidden_size"] = 128;
         j.erase("head_dim");
       },
       "model.embed_tokens.weight"},
      {"more_layers", [](Json& j) { j["num_hidden_layers"] = 3; }, "model.layers.2."},
      {"fewer_layers", [](Json& j) { j["num_hidden_layers"] = 1; }, "layer 1"},
  };
  for (const Case& c : cases) {
    absl::Status s = LoadWithConfig(c.edit);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.label << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.label;
  }
  EXPECT_TRUE(LoadWithConfig([](Json& j) { j["rope_scaling"] = nullptr; }).ok());
}

// Mistral is Llama's math; a sliding window caps the context, within which attention is full.
TEST(HfModelTest, ReadsMistral) {
  auto plain = LoadModelWithConfig([](Json& j) {
    j["model_type"] = "mistral";
    j["sliding_window"] = nullptr;
    j["max_position_embeddings"] = 64;
  });
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->weights.config.max_seq_len, 64);
  auto windowed = LoadModelWithConfig([](Json& j) {
    j["model_type"] = "mistral";
    j["sliding_window"] = 16;
    j["max_position_embeddings"] = 64;
  });
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  EXPECT_EQ(windowed->weights.config.max_seq_len, 16);
}

TEST(HfModelTest, ReadsRopeThetaFromEitherConfigLayout) {
  // transformers < 5: top-level rope_theta; transformers 5: inside rope_parameters.
  auto top = LoadModelWithConfig([](Json& j) { j["rope_theta"] = 250000.0; });
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_EQ(top->weights.config.rope_theta, 250000.0f);
  auto nested = LoadModelWithConfig([](Json& j) {
    j.erase("rope_theta");
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  });
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->weights.config.rope_theta, 500000.0f);
}

// Llama 3.1's rope_scaling, as transformers < 5 writes it.
Json Llama3RopeScaling() {
  return {{"factor", 8.0},
          {"low_freq_factor", 1.0},
          {"high_freq_factor", 4.0},
          {"original_max_position_embeddings", 64},
          {"rope_type", "llama3"}};
}

void ExpectLlama3Scaling(const absl::StatusOr<HfModel>& model) {
  ASSERT_TRUE(model.ok()) << model.status();
  const kernels::RopeScaling& s = model->weights.config.rope_scaling;
  EXPECT_EQ(s.factor, 8.0f);
  EXPECT_EQ(s.low_freq_factor, 1.0f);
  EXPECT_EQ(s.high_freq_factor, 4.0f);
  EXPECT_EQ(s.original_max_positions, 64);
}

TEST(HfModelTest, ReadsLlama3RopeScalingFromEitherConfigLayout) {
  // transformers < 5: a top-level rope_scaling dict, with "rope_type" or the legacy "type".
  ExpectLlama3Scaling(
      LoadModelWithConfig([](Json& j) { j["rope_scaling"] = Llama3RopeScaling(); }));
  ExpectLlama3Scaling(LoadModelWithConfig([](Json& j) {
    Json scaling = Llama3RopeScaling();
    scaling.erase("rope_type");
    scaling["type"] = "llama3";
    j["rope_scaling"] = scaling;
  }));
  // transformers 5: rope_parameters holding rope_theta too.
  auto nested = LoadModelWithConfig([](Json& j) {
    j.erase("rope_theta");
    j.erase("rope_scaling");
    Json parameters = Llama3RopeScaling();
    parameters["rope_theta"] = 500000.0;
    j["rope_parameters"] = parameters;
  });
  ExpectLlama3Scaling(nested);
  EXPECT_EQ(nested->weights.config.rope_theta, 500000.0f);
  EXPECT_THAT(nested->weights.config.Describe(), HasSubstr("llama3 rope scaling"));
  // Both layouts at once, agreeing.
  ExpectLlama3Scaling(LoadModelWithConfig([](Json& j) {
    j["rope_scaling"] = Llama3RopeScaling();
    j["rope_parameters"] = Llama3RopeScaling();
  }));
  // Plain RoPE stays unscaled.
  auto plain = LoadModelWithConfig([](Json& j) { j["rope_scaling"] = {{"rope_type", "default"}}; });
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->weights.config.rope_scaling.factor, 0.0f);
}

TEST(HfModelTest, RejectsIncompleteOrInvalidLlama3RopeScaling) {
  for (const char* field :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    for (const char* key : {"rope_scaling", "rope_parameters"}) {
      absl::Status s = LoadWithConfig([&](Json& j) {
        Json scaling = Llama3RopeScaling();
        scaling.erase(field);
        j[key] = scaling;
      });
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key << " " << field << ": " << s;
      EXPECT_THAT(s.message(), HasSubstr(absl::StrFormat(
                                   "%s (rope_type \"llama3\"): \"%s\" is missing", key, field)));
    }
  }
  struct Case {
    const char* label;
    std::function<void(Json&)> edit;  // of Llama3RopeScaling()
    const char* message;
  };
  const std::vector<Case> cases = {
      {"string_factor", [](Json& s) { s["factor"] = "8"; }, "\"factor\" is not a number"},
      {"zero_factor", [](Json& s) { s["factor"] = 0.0; }, "\"factor\" is 0"},
      {"factor_below_one", [](Json& s) { s["factor"] = 0.5; }, "rope_scaling.factor 0.5"},
      {"zero_low", [](Json& s) { s["low_freq_factor"] = 0.0; }, "rope_scaling.low_freq_factor"},
      {"high_not_above_low", [](Json& s) { s["high_freq_factor"] = 1.0; },
       "rope_scaling.high_freq_factor"},
      {"zero_original", [](Json& s) { s["original_max_position_embeddings"] = 0; },
       "rope_scaling.original_max_positions"},
      {"float_original", [](Json& s) { s["original_max_position_embeddings"] = 64.5; },
       "\"original_max_position_embeddings\" is not an integer"},
  };
  for (const Case& c : cases) {
    absl::Status s = LoadWithConfig([&](Json& j) {
      Json scaling = Llama3RopeScaling();
      c.edit(scaling);
      j["rope_scaling"] = scaling;
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.label << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.label;
  }
  absl::Status s = LoadWithConfig([](Json& j) {
    j["rope_scaling"] = Llama3RopeScaling();
    j["rope_parameters"] = Llama3RopeScaling();
    j["rope_parameters"]["factor"] = 4.0;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("disagrees"));
}

TEST(HfModelTest, RopeScalingRoundTrips) {
  ModelConfig c = SmallConfig(/*tied=*/false);
  c.rope_scaling = {.factor = 4.0f,
                    .low_freq_factor = 1.5f,
                    .high_freq_factor = 3.0f,
                    .original_max_positions = 32};
  const ModelWeights w = MakeRandomModel(c, 7);
  const std::string dir = TestDir() + "/model";
  ASSERT_TRUE(WriteHfModel(dir, w, SyntheticVocabulary(300), {}).ok());
  EXPECT_EQ(ReadJson(dir + "/config.json")["rope_scaling"]["rope_type"], "llama3");
  auto loaded = LoadHfModel(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const kernels::RopeScaling& s = loaded->weights.config.rope_scaling;
  EXPECT_EQ(s.factor, 4.0f);
  EXPECT_EQ(s.low_freq_factor, 1.5f);
  EXPECT_EQ(s.high_freq_factor, 3.0f);
  EXPECT_EQ(s.original_max_positions, 32);
}

TEST(HfModelTest, RejectsMalformedConfigFiles) {
  const std::string dir = WriteSmallModel(/*tied=*/true);
  const std::string deep = std::string(10000, '[') + std::string(10000, ']');
  for (const std::string& text :
       {std::string("{not json"), std::string("[1, 2, 3]"), std::string("\"llama\""),
        std::string("{\"model_type\": \"llama\"}"), deep}) {
    WriteText(dir + "/config.json", text);
    absl::Status s = LoadHfModel(dir).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text.substr(0, 40);
    EXPECT_THAT(s.message(), HasSubstr("config.json")) << text.substr(0, 40);
  }
  std::filesystem::remove(dir + "/config.json");
  absl::Status s = LoadHfModel(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("config.json"));
  EXPECT_EQ(LoadHfModel(dir + "/absent").status().code(), absl::StatusCode::kNotFound);
}

// Rewrites model.safetensors of the single-file model in `dir` with `edit`.
void EditTensors(const std::string& dir,
                 const std::function<void(std::vector<NamedTensor>&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  std::vector<NamedTensor> tensors;
  {
    absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
    EXPECT_TRUE(file.ok()) << file.status();
    for (const auto& [name, t] : file->tensors) tensors.push_back({name, t});
  }
  edit(tensors);
  // The tensors still point into the old mapping: write a new file and rename it over.
  EXPECT_TRUE(WriteSafetensors(path + ".new", tensors).ok());
  std::filesystem::rename(path + ".new", path);
}

// Rewrites model.safetensors of a freshly written single-file model with `edit` and returns the
// load status.
absl::Status LoadWithTensors(bool tied,
                             const std::function<void(std::vector<NamedTensor>&)>& edit) {
  const std::string dir = WriteSmallModel(tied);
  EditTensors(dir, edit);
  return LoadHfModel(dir).status();
}

void Remove(std::vector<NamedTensor>& tensors, const std::string& name) {
  std::erase_if(tensors, [&](const NamedTensor& t) { return t.name == name; });
}

const Tensor& Find(const std::vector<NamedTensor>& tensors, const std::string& name) {
  for (const NamedTensor& t : tensors) {
    if (t.name == name) return t.tensor;
  }
  static const Tensor kEmpty;
  return kEmpty;
}

TEST(HfModelTest, ChecksTensorSet) {
  absl::Status s = LoadWithTensors(false, [](auto& t) { Remove(t, "lm_head.weight"); });
  EXPECT_THAT(s.message(), HasSubstr("'lm_head.weight' is missing"));
  s = LoadWithTensors(false, [](auto& t) { Remove(t, "model.layers.1.mlp.up_proj.weight"); });
  EXPECT_THAT(s.message(), HasSubstr("model.layers.1.mlp.up_proj.weight"));
  s = LoadWithTensors(false, [](auto& t) {
    t.push_back(
        {"model.layers.2.mlp.gate_proj.weight", Find(t, "model.layers.1.mlp.gate_proj.weight")});
  });
  EXPECT_THAT(s.message(), HasSubstr("'model.layers.2.mlp.gate_proj.weight'"));
  EXPECT_THAT(s.message(), HasSubstr("layer 2"));
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors"));
  s = LoadWithTensors(false, [](auto& t) {
    t.push_back(
        {"model.layers.0.self_attn.q_proj.bias", MakeF32Tensor(std::vector<float>(64), {64})});
  });
  EXPECT_THAT(s.message(), HasSubstr("unexpected tensor 'model.layers.0.self_attn.q_proj.bias'"));
  s = LoadWithTensors(false, [](auto& t) {
    for (NamedTensor& n : t) {
      if (n.name == "model.norm.weight") n.tensor = MakeF32Tensor(std::vector<float>(63), {63});
    }
  });
  EXPECT_THAT(s.message(), HasSubstr("'model.norm.weight' has shape [63]"));
  // Frequency buffers are ignored; a tied model may carry lm_head.weight.
  s = LoadWithTensors(false, [](auto& t) {
    t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq",
                 MakeF32Tensor(std::vector<float>(8), {8})});
  });
  EXPECT_TRUE(s.ok()) << s;
  s = LoadWithTensors(true, [](auto& t) {
    t.push_back({"lm_head.weight", Find(t, "model.embed_tokens.weight")});
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(HfModelTest, ChecksShardIndex) {
  const std::string dir = TestDir() + "/model";
  ASSERT_TRUE(WriteHfModel(dir, MakeRandomModel(SmallConfig(false), 5), SyntheticVocabulary(300),
                           {DType::kF32, 3})
                  .ok());
  const std::string index_path = dir + "/model.safetensors.index.json";
  const Json good = ReadJson(index_path);
  auto load_with = [&](const std::function<void(Json&)>& edit) {
    Json index = good;
    edit(index);
    WriteText(index_path, index.dump());
    return LoadHfModel(dir).status();
  };
  absl::Status s =
      load_with([](Json& j) { j["weight_map"]["lm_head.weight"] = "../x.safetensors"; });
  EXPECT_THAT(s.message(), HasSubstr("not a plain file name"));
  s = load_with([](Json& j) { j["weight_map"]["lm_head.weight"] = ".."; });
  EXPECT_THAT(s.message(), HasSubstr("not a plain file name"));
  s = load_with([](Json& j) { j["weight_map"]["lm_head.weight"] = "absent.safetensors"; });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("absent.safetensors"));
  s = load_with([](Json& j) { j["weight_map"]["lm_head.weight"] = 3; });
  EXPECT_THAT(s.message(), HasSubstr("not a string"));
  s = load_with([](Json& j) { j.erase("weight_map"); });
  EXPECT_THAT(s.message(), HasSubstr("weight_map"));
  s = load_with([](Json& j) {
    j["weight_map"]["lm_head.weight"] = j["weight_map"]["model.embed_tokens.weight"];
  });
  EXPECT_THAT(s.message(), HasSubstr("'lm_head.weight', listed in"));
  s = load_with([](Json& j) { j["weight_map"].erase("model.norm.weight"); });
  EXPECT_THAT(s.message(), HasSubstr("'model.norm.weight' is missing"));
  EXPECT_TRUE(load_with([](Json&) {}).ok());
}

TEST(HfModelTest, RequiresSafetensors) {
  const std::string dir = WriteSmallModel(/*tied=*/true);
  std::filesystem::remove(dir + "/model.safetensors");
  absl::Status s = LoadHfModel(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors"));
  ASSERT_TRUE(
      WriteHfModel(dir, MakeRandomModel(SmallConfig(true), 7), SyntheticVocabulary(300), {}).ok());
  std::filesystem::remove(dir + "/tokenizer.model");
  absl::StatusOr<HfModel> model = LoadHfModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->tokenizer_model_path, "");
}

// ---------------------------------------------------------------------------------------------
// SwiftKV checkpoints (model_type "llama_swiftkv")

// 3 layers, so that both l = 2, G = 1 and l = 1, G = 2 leave SwiftKV layers.
ModelConfig SwiftKvConfig() {
  ModelConfig c = SmallConfig(/*tied=*/false);
  c.n_layers = 3;
  return c;
}

// A random model with SwiftKV tensors rewired from another random model, so that no SwiftKV tensor
// equals a base tensor (a loader that swapped them would be caught).
ModelWeights SwiftKvModel(int layer, int group) {
  ModelWeights w = MakeRandomModel(SwiftKvConfig(), 42);
  absl::StatusOr<SwiftKvWeights> s =
      RewireSwiftKv(MakeRandomModel(SwiftKvConfig(), 43), layer, group);
  EXPECT_TRUE(s.ok()) << s.status();
  w.swiftkv = *s;
  return w;
}

void ExpectSameSwiftKv(const SwiftKvWeights& a, const SwiftKvWeights& b) {
  EXPECT_EQ(a.layer, b.layer);
  EXPECT_EQ(a.group, b.group);
  EXPECT_TRUE(SameTensor(a.norm, b.norm));
  ASSERT_EQ(a.wq.size(), b.wq.size());
  ASSERT_EQ(a.wk.size(), b.wk.size());
  ASSERT_EQ(a.wv.size(), b.wv.size());
  for (size_t i = 0; i < a.wq.size(); ++i) EXPECT_TRUE(SameTensor(a.wq[i], b.wq[i])) << "wq " << i;
  for (size_t i = 0; i < a.wk.size(); ++i) {
    EXPECT_TRUE(SameTensor(a.wk[i], b.wk[i])) << "wk " << i;
    EXPECT_TRUE(SameTensor(a.wv[i], b.wv[i])) << "wv " << i;
  }
}

std::string SwiftKvName(int layer, const char* proj) {
  return absl::StrFormat("model.layers.%d.self_attn.%s_proj_swiftkv.weight", layer, proj);
}

struct SwiftKvRoundTripCase {
  int layer;
  int group;
  int shards;
  DType dtype;
};

class HfSwiftKvRoundTripTest : public ::testing::TestWithParam<SwiftKvRoundTripCase> {};

TEST_P(HfSwiftKvRoundTripTest, LoadsTheSwiftKvTensorsThatWereWritten) {
  const SwiftKvRoundTripCase p = GetParam();
  const std::string dir = TestDir() + "/model";
  const ModelWeights source = SwiftKvModel(p.layer, p.group);
  ASSERT_TRUE(WriteHfModel(dir, source, SyntheticVocabulary(300), {p.dtype, p.shards}).ok());
  Json config = ReadJson(dir + "/config.json");
  EXPECT_EQ(config["architectures"], Json::array({"LlamaSwiftKVForCausalLM"}));
  EXPECT_EQ(config["model_type"], "llama_swiftkv");
  EXPECT_EQ(config["swiftkv"], true);
  EXPECT_EQ(config["num_key_value_layers"], p.layer);
  EXPECT_EQ(config["key_value_group_size"], p.group);
  if (p.shards > 1) {
    const int later = 3 - p.layer;
    Json index = ReadJson(dir + "/model.safetensors.index.json");
    EXPECT_EQ(index["weight_map"].size(), 2u + 9u * 3u + 1u + 1u + later + 2u * later / p.group);
  }
  absl::StatusOr<HfModel> model = LoadHfModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(model->weights.swiftkv.has_value());
  const ModelWeights expected = ConvertWeights(source, p.dtype);
  // Stored as Hugging Face stores them: q/k rows in the split-half order, like q_proj/k_proj.
  const ModelWeights split = WithRopePairing(expected, RopePairing::kSplitHalf);
  EXPECT_TRUE(SameTensor(model->weights.swiftkv->wq.back(), split.swiftkv->wq.back()));
  EXPECT_TRUE(SameTensor(model->weights.swiftkv->wk.back(), split.swiftkv->wk.back()));
  EXPECT_FALSE(SameTensor(model->weights.swiftkv->wk.back(), expected.swiftkv->wk.back()));
  EXPECT_EQ(model->weights.swiftkv->norm.dtype, DType::kF32);
  const ModelWeights loaded = WithRopePairing(model->weights, RopePairing::kAdjacent);
  ExpectSameWeights(loaded, expected);
  ExpectSameSwiftKv(*loaded.swiftkv, *WithRopePairing(expected, RopePairing::kAdjacent).swiftkv);
}

INSTANTIATE_TEST_SUITE_P(Layouts, HfSwiftKvRoundTripTest,
                         ::testing::Values(SwiftKvRoundTripCase{2, 1, 1, DType::kF32},
                                           SwiftKvRoundTripCase{1, 2, 1, DType::kF32},
                                           SwiftKvRoundTripCase{1, 2, 4, DType::kBF16},
                                           SwiftKvRoundTripCase{2, 1, 3, DType::kF16}),
                         [](const auto& info) {
                           return absl::StrFormat("l%d_g%d_%dshards_%s", info.param.layer,
                                                  info.param.group, info.param.shards,
                                                  DTypeName(info.param.dtype));
                         });

TEST(HfSwiftKvTest, WritesLeaderKeyValueProjectionsOnly) {
  const std::string dir = TestDir() + "/model";
  ASSERT_TRUE(WriteHfModel(dir, SwiftKvModel(1, 2), SyntheticVocabulary(300), {}).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(dir + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  auto has = [&](const std::string& name) { return file->tensors.count(name) > 0; };
  EXPECT_TRUE(has("model.norm_swiftkv.weight"));
  EXPECT_FALSE(has(SwiftKvName(0, "q")));
  for (int j : {1, 2}) {
    EXPECT_TRUE(has(SwiftKvName(j, "q"))) << j;
    // The teacher projections stay, as LlamaSwiftKVForCausalLM keeps them.
    EXPECT_TRUE(has(absl::StrFormat("model.layers.%d.self_attn.k_proj.weight", j))) << j;
  }
  EXPECT_TRUE(has(SwiftKvName(1, "k")));
  EXPECT_TRUE(has(SwiftKvName(1, "v")));
  EXPECT_FALSE(has(SwiftKvName(2, "k")));  // layer 2 follows leader 1
  EXPECT_FALSE(has(SwiftKvName(2, "v")));
}

// Writes SwiftKvModel(layer, group), applies the edits and returns what loading gives.
absl::StatusOr<HfModel> LoadSwiftKvWith(
    int layer, int group, const std::function<void(std::vector<NamedTensor>&)>& edit_tensors,
    const std::function<void(Json&)>& edit_config = [](Json&) {}) {
  const std::string dir = TestDir() + "/model";
  absl::Status written =
      WriteHfModel(dir, SwiftKvModel(layer, group), SyntheticVocabulary(300), {});
  EXPECT_TRUE(written.ok()) << written;
  EditTensors(dir, edit_tensors);
  Json config = ReadJson(dir + "/config.json");
  edit_config(config);
  WriteText(dir + "/config.json", config.dump());
  return LoadHfModel(dir);
}

TEST(HfSwiftKvTest, ChecksSwiftKvTensorSet) {
  struct Case {
    const char* label;
    int layer, group;
    std::function<void(std::vector<NamedTensor>&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"no_norm", 1, 2, [](auto& t) { Remove(t, "model.norm_swiftkv.weight"); },
       "'model.norm_swiftkv.weight' is missing"},
      {"no_leader_k", 1, 2, [](auto& t) { Remove(t, SwiftKvName(1, "k")); },
       "'model.layers.1.self_attn.k_proj_swiftkv.weight' is missing"},
      {"no_leader_v", 2, 1, [](auto& t) { Remove(t, SwiftKvName(2, "v")); },
       "'model.layers.2.self_attn.v_proj_swiftkv.weight' is missing"},
      {"no_follower_q", 1, 2, [](auto& t) { Remove(t, SwiftKvName(2, "q")); },
       "'model.layers.2.self_attn.q_proj_swiftkv.weight' is missing"},
      {"follower_k", 1, 2,
       [](auto& t) {
         t.push_back({SwiftKvName(2, "k"), Find(t, SwiftKvName(1, "k"))});
       },
       "unexpected tensor 'model.layers.2.self_attn.k_proj_swiftkv.weight': it is a SwiftKV"},
      {"early_q", 2, 1,
       [](auto& t) {
         t.push_back({SwiftKvName(1, "q"), Find(t, SwiftKvName(2, "q"))});
       },
       "unexpected tensor 'model.layers.1.self_attn.q_proj_swiftkv.weight'"},
      {"k_shape", 1, 2,
       [](auto& t) {
         for (NamedTensor& n : t) {
           if (n.name == SwiftKvName(1, "k")) n.tensor = Find(t, SwiftKvName(1, "q"));
         }
       },
       "'model.layers.1.self_attn.k_proj_swiftkv.weight' has shape [64, 64]"},
      {"norm_shape", 2, 1,
       [](auto& t) {
         for (NamedTensor& n : t) {
           if (n.name == "model.norm_swiftkv.weight") {
             n.tensor = MakeF32Tensor(std::vector<float>(32), {32});
           }
         }
       },
       "'model.norm_swiftkv.weight' has shape [32]"},
  };
  for (const Case& c : cases) {
    absl::Status s = LoadSwiftKvWith(c.layer, c.group, c.edit).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.label << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.label;
  }
}

TEST(HfSwiftKvTest, ChecksSwiftKvConfig) {
  struct Case {
    const char* label;
    int layer, group;  // of the checkpoint written
    std::function<void(Json&)> edit;
    const char* message;
  };
  auto none = [](std::vector<NamedTensor>&) {};
  const std::vector<Case> cases = {
      {"group_not_dividing", 1, 2, [](Json& j) { j["key_value_group_size"] = 3; },
       "\"key_value_group_size\" is 3, which does not divide"},
      {"negative_group", 1, 2, [](Json& j) { j["key_value_group_size"] = -2; },
       "\"key_value_group_size\" is -2"},
      {"layers_past_end", 1, 2, [](Json& j) { j["num_key_value_layers"] = 4; },
       "\"num_key_value_layers\" is 4, outside [0, num_hidden_layers = 3]"},
      {"negative_layers", 1, 2, [](Json& j) { j["num_key_value_layers"] = -1; },
       "\"num_key_value_layers\" is -1"},
      {"string_layers", 1, 2, [](Json& j) { j["num_key_value_layers"] = "1"; },
       "num_key_value_layers"},
      {"string_swiftkv", 1, 2, [](Json& j) { j["swiftkv"] = "yes"; }, "\"swiftkv\""},
      // Tensors and config must agree: a smaller group leaves leaders without k/v...
      {"group_smaller_than_written", 1, 2, [](Json& j) { j["key_value_group_size"] = 1; },
       "'model.layers.2.self_attn.k_proj_swiftkv.weight' is missing"},
      // ...and a larger one leaves k/v on followers, which are rejected, never ignored.
      {"group_larger_than_written", 1, 1, [](Json& j) { j["key_value_group_size"] = 2; },
       "unexpected tensor 'model.layers.2.self_attn.k_proj_swiftkv.weight'"},
      {"layer_later_than_written", 1, 1, [](Json& j) { j["num_key_value_layers"] = 2; },
       "unexpected tensor 'model.layers.1.self_attn.k_proj_swiftkv.weight'"},
      {"plain_model_type", 2, 1, [](Json& j) { j["model_type"] = "llama"; },
       "unexpected tensor 'model.layers.2.self_attn.k_proj_swiftkv.weight'"},
  };
  for (const Case& c : cases) {
    absl::Status s = LoadSwiftKvWith(c.layer, c.group, none, c.edit).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.label << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.label;
  }
}

TEST(HfSwiftKvTest, LoadsAsPlainWhenSwiftKvIsOffOrIdentity) {
  const ModelWeights source = SwiftKvModel(1, 2);
  ModelWeights plain = source;
  plain.swiftkv.reset();
  // "swiftkv": false: the tensors the class defines are present but unused.
  absl::StatusOr<HfModel> model = LoadSwiftKvWith(
      1, 2, [](auto&) {}, [](Json& j) { j["swiftkv"] = false; });
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE(model->weights.swiftkv.has_value());
  ExpectSameWeights(WithRopePairing(model->weights, RopePairing::kAdjacent), plain);
  model = LoadSwiftKvWith(
      1, 2, [](auto&) {}, [](Json& j) { j.erase("swiftkv"); });
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE(model->weights.swiftkv.has_value());
  // Unused tensors are still shape-checked.
  absl::Status s =
      LoadSwiftKvWith(
          1, 2,
          [](auto& t) {
            Remove(t, "model.norm_swiftkv.weight");
            t.push_back({"model.norm_swiftkv.weight", MakeF32Tensor(std::vector<float>(3), {3})});
          },
          [](Json& j) { j["swiftkv"] = false; })
          .status();
  EXPECT_THAT(s.message(), HasSubstr("'model.norm_swiftkv.weight' has shape [3]"));
  // num_key_value_layers absent, null or 0 means all layers: the plain model. Only norm_swiftkv
  // exists then (LlamaSwiftKVModel always defines it).
  for (const std::function<void(Json&)>& edit :
       std::vector<std::function<void(Json&)>>{[](Json& j) { j.erase("num_key_value_layers"); },
                                               [](Json& j) { j["num_key_value_layers"] = nullptr; },
                                               [](Json& j) { j["num_key_value_layers"] = 0; }}) {
    model = LoadSwiftKvWith(
        1, 2,
        [](auto& t) {
          std::erase_if(t, [](const NamedTensor& n) {
            return absl::StrContains(n.name, "_swiftkv") && n.name != "model.norm_swiftkv.weight";
          });
        },
        edit);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_FALSE(model->weights.swiftkv.has_value());
    ExpectSameWeights(WithRopePairing(model->weights, RopePairing::kAdjacent), plain);
  }
  // A plain checkpoint relabelled llama_swiftkv without any SwiftKV field.
  model = LoadModelWithConfig([](Json& j) { j["model_type"] = "llama_swiftkv"; });
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE(model->weights.swiftkv.has_value());
}

TEST(HfSwiftKvTest, WriterChecksSwiftKv) {
  const std::string dir = TestDir();
  const Vocabulary vocab = SyntheticVocabulary(300);
  // num_key_value_layers 0 reads back as "all layers": not writable.
  absl::Status s = WriteHfModel(dir + "/zero", SwiftKvModel(0, 1), vocab, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("layer 0"));
  ModelWeights bad = SwiftKvModel(1, 2);
  bad.swiftkv->wq.pop_back();
  s = WriteHfModel(dir + "/bad", bad, vocab, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("wq"));
  // The shard limit counts the SwiftKV tensors: 30 base + norm + 2 q + 1 k + 1 v.
  EXPECT_TRUE(WriteHfModel(dir + "/35", SwiftKvModel(1, 2), vocab, {DType::kF32, 35}).ok());
  EXPECT_FALSE(WriteHfModel(dir + "/36", SwiftKvModel(1, 2), vocab, {DType::kF32, 36}).ok());
  // l = L is the plain model and is written as one.
  ModelWeights identity = MakeRandomModel(SwiftKvConfig(), 9);
  identity.swiftkv = *RewireSwiftKv(identity, 3, 1);
  ASSERT_TRUE(WriteHfModel(dir + "/identity", identity, vocab, {}).ok());
  Json config = ReadJson(dir + "/identity/config.json");
  EXPECT_EQ(config["model_type"], "llama");
  EXPECT_FALSE(config.contains("swiftkv"));
  absl::StatusOr<HfModel> model = LoadHfModel(dir + "/identity");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE(model->weights.swiftkv.has_value());
}

}  // namespace
}  // namespace pdserve
