// GGUF vocabularies of both tokenizer models: GPT-2's real vocabulary (a vocab-only GGUF from
// llama.cpp) tokenizes llama.cpp's test strings to the ids of the real GPT-2 tokenizer, and a
// byte-level BPE vocabulary survives writing and reading back.
#include "core/formats/gguf_vocabulary.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/tokenizer/create_tokenizer.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

const std::string kVectors = std::string(PDSERVE_SHARED_DIR) + "/reference/tokenizers/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// llama.cpp's test-tokenizer format: inputs separated by "\n__ggml_vocab_test__\n", one line of
// ids per input.
std::vector<std::pair<std::string, std::vector<int>>> ReadVectors(const std::string& name) {
  std::vector<std::string> inputs =
      absl::StrSplit(ReadFile(kVectors + name + ".inp"), "\n__ggml_vocab_test__\n");
  if (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  const std::vector<std::string> lines = absl::StrSplit(ReadFile(kVectors + name + ".out"), '\n');
  std::vector<std::pair<std::string, std::vector<int>>> cases;
  for (size_t i = 0; i < inputs.size() && i < lines.size(); ++i) {
    std::vector<int> ids;
    for (absl::string_view field : absl::StrSplit(lines[i], ' ', absl::SkipEmpty())) {
      int id;
      EXPECT_TRUE(absl::SimpleAtoi(field, &id)) << field;
      ids.push_back(id);
    }
    cases.emplace_back(inputs[i], ids);
  }
  EXPECT_EQ(cases.size(), inputs.size());
  return cases;
}

absl::StatusOr<Vocabulary> ReadVocabularyFile(const std::string& path) {
  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return ReadGgufVocabulary(*file);
}

TEST(GgufVocabularyTest, Gpt2TokenizesAsTheRealTokenizer) {
  absl::StatusOr<Vocabulary> vocab = ReadVocabularyFile(kVectors + "ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->model, TokenizerModel::kByteLevelBpe);
  EXPECT_EQ(vocab->pre_tokenizer, PreTokenizer::kGpt2);
  EXPECT_EQ(vocab->size(), 50257);
  auto tokenizer = CreateTokenizer(*vocab);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const auto cases = ReadVectors("ggml-vocab-gpt-2.gguf");
  ASSERT_GE(cases.size(), 40u);
  for (const auto& [text, ids] : cases) {
    const std::vector<int> got = (*tokenizer)->Encode(text, /*add_bos=*/false);
    EXPECT_EQ(got, ids) << "'" << text << "'";
    EXPECT_EQ((*tokenizer)->Decode(got), text);
  }
}

TEST(GgufVocabularyTest, ByteLevelBpeRoundTrips) {
  absl::StatusOr<Vocabulary> vocab = ReadVocabularyFile(kVectors + "ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  vocab->pre_tokenizer = PreTokenizer::kLlama3;  // to see it written
  vocab->add_bos = true;
  vocab->types[50256] = TokenType::kControl;
  vocab->chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}";
  GgufWriter writer;
  ASSERT_TRUE(writer.SetMetadata("general.architecture", GgufValue::Of(std::string("llama"))).ok());
  ASSERT_TRUE(AddGgufVocabulary(writer, *vocab).ok());
  const std::string path = testing::TempDir() + "/bpe_vocab.gguf";
  ASSERT_TRUE(writer.WriteFile(path).ok());
  absl::StatusOr<Vocabulary> back = ReadVocabularyFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pieces, vocab->pieces);
  EXPECT_EQ(back->types, vocab->types);
  EXPECT_EQ(back->merges, vocab->merges);
  EXPECT_EQ(back->pre_tokenizer, PreTokenizer::kLlama3);
  EXPECT_TRUE(back->ignore_merges);  // implied by Llama 3's pre-tokenizer, as in llama.cpp
  EXPECT_EQ(back->bos_id, vocab->bos_id);
  EXPECT_EQ(back->eos_id, vocab->eos_id);
  EXPECT_TRUE(back->add_bos);
  EXPECT_EQ(back->chat_template, vocab->chat_template);
}

TEST(GgufVocabularyTest, RefusesUnknownModelsAndPreTokenizers) {
  for (const auto& [key, value, expected] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"tokenizer.ggml.model", "bert", "'bert'"},
           {"tokenizer.ggml.pre", "deepseek-llm", "deepseek-llm"}}) {
    absl::StatusOr<Vocabulary> vocab = ReadVocabularyFile(kVectors + "ggml-vocab-gpt-2.gguf");
    ASSERT_TRUE(vocab.ok());
    GgufWriter writer;
    ASSERT_TRUE(AddGgufVocabulary(writer, *vocab).ok());
    ASSERT_TRUE(writer.SetMetadata(key, GgufValue::Of(value)).ok());
    const std::string path = testing::TempDir() + "/bad_vocab.gguf";
    ASSERT_TRUE(writer.WriteFile(path).ok());
    absl::StatusOr<Vocabulary> bad = ReadVocabularyFile(path);
    ASSERT_FALSE(bad.ok()) << key;
    EXPECT_NE(bad.status().message().find(expected), std::string::npos) << bad.status();
    EXPECT_NE(bad.status().message().find("bad_vocab.gguf"), std::string::npos) << bad.status();
  }
}

}  // namespace
}  // namespace pdserve
