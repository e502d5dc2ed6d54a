// Which tokenizer LoadModel picks for a Hugging Face directory: tokenizer.model (SentencePiece
// models also ship a converted tokenizer.json that BpeTokenizer does not read), else
// tokenizer.json; either way with tokenizer_config.json's chat template.
#include "core/formats/model_loader.h"

#include <filesystem>
#include <fstream>

#include "core/formats/hf_model.h"
#include "core/model/random_model.h"
#include "core/tokenizer/byte_level.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

namespace fs = std::filesystem;

ModelConfig TinyConfig() {
  ModelConfig c;
  c.dim = 16;
  c.hidden_dim = 32;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.vocab_size = 300;
  c.max_seq_len = 32;
  return c;
}

// A byte-level tokenizer.json: the 256 bytes and an end-of-text token.
void WriteByteLevelTokenizerJson(const fs::path& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ToByteLevel(std::string(1, static_cast<char>(b)))] = b;
  const nlohmann::json json = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}, {"add_prefix_space", false}}},
      {"added_tokens", {{{"id", 256}, {"content", "<|endoftext|>"}, {"special", true}}}}};
  std::ofstream(dir / "tokenizer.json") << json.dump();
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|endoftext|>"})";
}

TEST(ModelLoaderTest, HuggingFaceDirectoryPrefersTokenizerModel) {
  const fs::path dir = fs::path(testing::TempDir()) / "loader_hf_dir";
  fs::remove_all(dir);
  const ModelConfig c = TinyConfig();
  Vocabulary vocab = SyntheticVocabulary(c.vocab_size);
  vocab.chat_template = "{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}";
  ASSERT_TRUE(WriteHfModel(dir.string(), MakeRandomModel(c, 1), vocab, {}).ok());
  // tokenizer_config.json's chat template comes with the SentencePiece model.
  absl::StatusOr<LoadedModel> spm = LoadModel(dir.string());
  ASSERT_TRUE(spm.ok()) << spm.status();
  EXPECT_EQ(spm->tokenizer->chat_template(), vocab.chat_template);

  WriteByteLevelTokenizerJson(dir);  // beside tokenizer.model, as Llama 2 and Mistral ship it
  spm = LoadModel(dir.string());
  ASSERT_TRUE(spm.ok()) << spm.status();
  EXPECT_EQ(spm->tokenizer->vocab_size(), c.vocab_size);  // the SentencePiece model's

  fs::remove(dir / "tokenizer.model");  // as Llama 3 and Qwen ship it
  absl::StatusOr<LoadedModel> bpe = LoadModel(dir.string());
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  EXPECT_EQ(bpe->tokenizer->vocab_size(), 257);
  EXPECT_EQ(bpe->tokenizer->Encode("hi", /*add_bos=*/true), (std::vector<int>{'h', 'i'}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pdserve
