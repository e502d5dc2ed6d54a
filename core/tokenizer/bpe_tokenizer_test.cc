// BpeTokenizer's merge semantics and special tokens on small vocabularies, and tokenizer.json
// reading. The real GPT-2, Llama 3 and Qwen vocabularies are checked against their tokenizers'
// outputs in core/formats (GGUF) and tests/tokenizers (tokenizer.json, @lenml/tokenizers).
#include "core/tokenizer/bpe_tokenizer.h"

#include <filesystem>
#include <fstream>

#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/hf_tokenizer_json.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

// Tokens 0..255 are the bytes; `extra` follow from id 256.
Vocabulary SmallVocabulary(const std::vector<std::string>& extra,
                           std::vector<std::pair<std::string, std::string>> merges) {
  Vocabulary v;
  v.model = TokenizerModel::kByteLevelBpe;
  for (int b = 0; b < 256; ++b) v.pieces.push_back(std::string(1, static_cast<char>(b)));
  for (const std::string& piece : extra) v.pieces.push_back(piece);
  v.types.assign(v.pieces.size(), TokenType::kNormal);
  v.merges = std::move(merges);
  v.bos_id = v.eos_id = 0;
  v.add_bos = false;
  return v;
}

std::vector<int> Encode(const Vocabulary& v, std::string_view text) {
  auto tokenizer = BpeTokenizer::Create(v);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? (*tokenizer)->Encode(text, /*add_bos=*/true) : std::vector<int>{};
}

TEST(BpeTokenizerTest, MergesByRankNotByLength) {
  // ids: ab 256, bc 257, abc 258
  EXPECT_EQ(
      Encode(SmallVocabulary({"ab", "bc", "abc"}, {{"b", "c"}, {"a", "b"}, {"a", "bc"}}), "abc"),
      (std::vector<int>{258}));
  EXPECT_EQ(
      Encode(SmallVocabulary({"ab", "bc", "abc"}, {{"a", "b"}, {"b", "c"}, {"a", "bc"}}), "abc"),
      (std::vector<int>{256, 'c'}));
}

TEST(BpeTokenizerTest, EqualRanksMergeLeftmostFirst) {
  EXPECT_EQ(Encode(SmallVocabulary({"aa"}, {{"a", "a"}}), "aaa"), (std::vector<int>{256, 'a'}));
  EXPECT_EQ(Encode(SmallVocabulary({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}), "aaaaa"),
            (std::vector<int>{257, 'a'}));
}

TEST(BpeTokenizerTest, MergesStayWithinPreTokenizedWords) {
  EXPECT_EQ(Encode(SmallVocabulary({"a ", " a"}, {{"a", " "}, {" ", "a"}}), "a a"),
            (std::vector<int>{'a', 257}));
}

TEST(BpeTokenizerTest, IgnoreMergesTakesWholeWords) {
  Vocabulary v = SmallVocabulary({"xyz"}, {});
  EXPECT_EQ(Encode(v, "xyz"), (std::vector<int>{'x', 'y', 'z'}));
  v.ignore_merges = true;
  EXPECT_EQ(Encode(v, "xyz"), (std::vector<int>{256}));
}

TEST(BpeTokenizerTest, SpecialTokensMatchLongestFirstAndDecode) {
  Vocabulary v = SmallVocabulary({"<|a|>", "<|a|>b", "<|eot|>"}, {});
  v.types[256] = TokenType::kControl;
  v.types[257] = TokenType::kUserDefined;
  v.types[258] = TokenType::kControl;
  v.bos_id = 256;
  v.eos_id = 258;
  auto tokenizer = BpeTokenizer::Create(v);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<int> ids = (*tokenizer)->Encode("q<|a|>bc<|a|><|eot|>", false);
  EXPECT_EQ(ids, (std::vector<int>{'q', 257, 'c', 256, 258}));
  EXPECT_EQ((*tokenizer)->Decode(ids), "q<|a|>bc");
  EXPECT_EQ((*tokenizer)->Encode("", true), std::vector<int>{});  // add_bos is false
  v.add_bos = true;
  EXPECT_EQ((*BpeTokenizer::Create(v))->Encode("x", true), (std::vector<int>{256, 'x'}));
  EXPECT_EQ((*BpeTokenizer::Create(v))->Encode("x", false), (std::vector<int>{'x'}));
}

TEST(BpeTokenizerTest, TurnEndsEndGenerations) {
  Vocabulary v =
      SmallVocabulary({"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>"}, {});
  for (int id = 256; id < 260; ++id) v.types[id] = TokenType::kControl;
  v.types[259] = TokenType::kUserDefined;  // not a control token: not an end
  v.bos_id = 256;
  v.eos_id = 257;
  auto tokenizer = BpeTokenizer::Create(v);
  ASSERT_TRUE(tokenizer.ok());
  EXPECT_EQ((*tokenizer)->end_of_generation_ids(), (std::vector<int>{257, 256, 258}));
}

TEST(BpeTokenizerTest, RoundTripsAnyBytes) {
  auto tokenizer = BpeTokenizer::Create(
      SmallVocabulary({"he", "hel", "ll"}, {{"h", "e"}, {"he", "l"}, {"l", "l"}}));
  ASSERT_TRUE(tokenizer.ok());
  for (const std::string& text :
       std::vector<std::string>{"hello hello", "caf\xC3\xA9 \xF0\x9F\xA6\x99", "\xFF\xFE\x80",
                                std::string("nul\0byte", 8), "  \n\t x"}) {
    EXPECT_EQ((*tokenizer)->Decode((*tokenizer)->Encode(text, false)), text);
  }
}

TEST(BpeTokenizerTest, RefusesInconsistentVocabularies) {
  Vocabulary no_byte = SmallVocabulary({}, {});
  no_byte.pieces[7] = "seven";
  EXPECT_NE(BpeTokenizer::Create(no_byte).status().message().find("byte 0x7"), std::string::npos);
  EXPECT_NE(
      BpeTokenizer::Create(SmallVocabulary({}, {{"a", "b"}})).status().message().find("'a' + 'b'"),
      std::string::npos);
  Vocabulary spm = SmallVocabulary({}, {});
  spm.model = TokenizerModel::kSentencePiece;
  EXPECT_FALSE(BpeTokenizer::Create(spm).ok());
}

class HfTokenizerJsonTest : public testing::Test {
 protected:
  void SetUp() override {
    // One folder per test: ctest runs the tests of this fixture in parallel processes.
    dir_ = std::filesystem::path(testing::TempDir()) /
           (std::string("hf_tokenizer_json_") +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[ToByteLevel(std::string(1, static_cast<char>(b)))] = b;
    vocab[ToByteLevel(" h")] = 256;
    vocab[ToByteLevel(" hi")] = 257;
    json_ = {
        {"version", "1.0"},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern",
              {{"Regex",
                R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"post_processor",
         {{"type", "TemplateProcessing"},
          {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"ignore_merges", true},
          {"vocab", vocab},
          {"merges", {ToByteLevel(" ") + " h", {ToByteLevel(" h"), "i"}}}}},
        {"added_tokens",
         {{{"id", 260}, {"content", "<s>"}, {"special", true}},
          {{"id", 261}, {"content", "</s>"}, {"special", true}},
          {{"id", 262}, {"content", "<think>"}, {"special", false}}}}};
    config_ = {{"bos_token", "<s>"}, {"eos_token", {{"content", "</s>"}}}};
  }

  absl::StatusOr<Vocabulary> Read() {
    std::ofstream(dir_ / "tokenizer.json") << json_.dump();
    std::ofstream(dir_ / "tokenizer_config.json") << config_.dump();
    return ReadHfTokenizerJson((dir_ / "tokenizer.json").string());
  }

  std::string ErrorOf(const absl::StatusOr<Vocabulary>& v) {
    return v.ok() ? "ok" : std::string(v.status().message());
  }

  std::filesystem::path dir_;
  nlohmann::json json_, config_;
};

TEST_F(HfTokenizerJsonTest, ReadsEveryPart) {
  absl::StatusOr<Vocabulary> v = Read();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->size(), 263);
  EXPECT_EQ(v->pieces[' '], " ");
  EXPECT_EQ(v->pieces[257], " hi");
  EXPECT_EQ(v->types[258], TokenType::kUnused);
  EXPECT_EQ(v->pieces[258], "[PAD258]");
  EXPECT_EQ(v->types[260], TokenType::kControl);
  EXPECT_EQ(v->types[262], TokenType::kUserDefined);
  EXPECT_EQ(v->merges, (std::vector<std::pair<std::string, std::string>>{{" ", "h"}, {" h", "i"}}));
  EXPECT_EQ(v->pre_tokenizer, PreTokenizer::kLlama3);
  EXPECT_TRUE(v->normalize_nfc);
  EXPECT_TRUE(v->ignore_merges);
  EXPECT_EQ(v->bos_id, 260);
  EXPECT_EQ(v->eos_id, 261);
  EXPECT_TRUE(v->add_bos);
  auto tokenizer = BpeTokenizer::Create(*v);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->Encode("a hi<think>", true), (std::vector<int>{260, 'a', 257, 262}));

  config_ = {{"eos_token", "</s>"}, {"bos_token", nullptr}};
  v = Read();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->bos_id, 261);
  EXPECT_FALSE(v->add_bos);
}

TEST_F(HfTokenizerJsonTest, NamesWhatItDoesNotImplement) {
  json_["model"]["type"] = "WordPiece";
  EXPECT_NE(ErrorOf(Read()).find("model.type"), std::string::npos);
  SetUp();
  json_["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(ErrorOf(Read()).find("Lowercase"), std::string::npos);
  SetUp();
  json_["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  EXPECT_NE(ErrorOf(Read()).find("\\w+"), std::string::npos);
  SetUp();
  json_["added_tokens"][2]["lstrip"] = true;
  EXPECT_NE(ErrorOf(Read()).find("<think>"), std::string::npos);
  SetUp();
  json_["model"]["merges"].push_back("lonely");
  EXPECT_NE(ErrorOf(Read()).find("lonely"), std::string::npos);
  SetUp();
  config_ = {{"eos_token", "<nope>"}};
  EXPECT_NE(ErrorOf(Read()).find("eos_token"), std::string::npos);
  SetUp();
  std::ofstream(dir_ / "tokenizer.json") << "{ not json";
  EXPECT_NE(ErrorOf(ReadHfTokenizerJson((dir_ / "tokenizer.json").string())).find("not valid JSON"),
            std::string::npos);
  EXPECT_EQ(ReadHfTokenizerJson((dir_ / "missing.json").string()).status().code(),
            absl::StatusCode::kNotFound);
}

// Fields of the wrong JSON type (found by tests/fuzz/tokenizer_fuzzer.cc: they used to throw out
// of the loader and abort the process) are InvalidArgument naming the file.
TEST_F(HfTokenizerJsonTest, FieldsOfTheWrongTypeAreRefusedNotThrown) {
  json_["pre_tokenizer"] = nullptr;
  absl::StatusOr<Vocabulary> v = Read();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
  EXPECT_NE(ErrorOf(v).find("tokenizer.json"), std::string::npos);
  SetUp();
  json_["model"]["byte_fallback"] = "no";
  EXPECT_EQ(Read().status().code(), absl::StatusCode::kInvalidArgument);
}

// A vocabulary is sized by its largest id: a small file may not claim a huge one (found by the
// tokenizer fuzzer's memory limit: 170 bytes asked for 16 million padded tokens).
TEST_F(HfTokenizerJsonTest, ASmallFileCannotClaimAHugeId) {
  json_["added_tokens"][2]["id"] = 15'999'999;
  absl::StatusOr<Vocabulary> v = Read();
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
  EXPECT_NE(ErrorOf(v).find("<think>"), std::string::npos);
  SetUp();
  json_["added_tokens"][2]["id"] = 262 + 1000;  // a reserved range within reason
  v = Read();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->size(), 1263);
}

}  // namespace
}  // namespace pdserve
