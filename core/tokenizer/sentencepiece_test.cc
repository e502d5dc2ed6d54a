#include <filesystem>
#include <fstream>

#include "core/tokenizer/llama2c_tokenizer.h"
#include "core/tokenizer/merge_tokenizer.h"
#include "core/tokenizer/sentencepiece_model_writer.h"
#include "core/tokenizer/sentencepiece_tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kTok512 = std::string(PDSERVE_SHARED_DIR) + "/models/stories260K/tok512.bin";

std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = std::string(::testing::TempDir()) + "sentencepiece_test/" +
                    info->test_suite_name() + "." + info->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Writes `vocab` as a tokenizer.model and loads it back.
std::unique_ptr<Tokenizer> RoundTrip(const Vocabulary& vocab, const std::string& dir) {
  const std::string path = dir + "/tokenizer.model";
  WriteBytes(path, EncodeSentencePieceModel(vocab));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadSentencePieceTokenizer(path);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

// unk, bos, eos, 256 byte tokens, then a few merges over "ab" and spaces.
Vocabulary SmallVocabulary(bool add_dummy_prefix) {
  Vocabulary v;
  auto add = [&v](std::string piece, float score, TokenType type) {
    v.pieces.push_back(std::move(piece));
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    add(piece, 0, TokenType::kByte);
  }
  add(" ", -1, TokenType::kNormal);
  add("a", -2, TokenType::kNormal);
  add("b", -3, TokenType::kNormal);
  add("ab", -4, TokenType::kNormal);
  add(" ab", -5, TokenType::kNormal);
  add("<extra>", 0, TokenType::kUnused);
  v.add_dummy_prefix = add_dummy_prefix;
  return v;
}

const char* const kTexts[] = {
    "Once upon a time",
    "The little dog",
    "Lily wanted to",
    "One day, a boy named Tom",
    "caf\xC3\xA9 \xE2\x98\x83 \xE6\x97\xA5\xE6\x9C\xAC",  // "café ☃ 日本"
    "  two leading spaces and a trailing one ",
    "tabs\tand\nnewlines\n",
    "",
};

TEST(SentencePieceTest, MatchesMergeTokenizerOnTok512) {
  absl::StatusOr<Vocabulary> vocab = LoadLlama2cVocabulary(kTok512);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  auto merge = MergeTokenizer::Create(*vocab);
  ASSERT_TRUE(merge.ok()) << merge.status();
  std::unique_ptr<Tokenizer> sp = RoundTrip(*vocab, TestDir());
  ASSERT_NE(sp, nullptr);
  EXPECT_EQ(sp->vocab_size(), 512);
  EXPECT_EQ(sp->bos_id(), 1);
  EXPECT_EQ(sp->eos_id(), 2);
  EXPECT_THAT(sp->Encode("Once upon a time", true), ElementsAre(1, 403, 407, 261, 378));
  for (const char* text : kTexts) {
    for (bool bos : {true, false}) {
      const std::vector<int> ids = sp->Encode(text, bos);
      EXPECT_EQ(ids, (*merge)->Encode(text, bos)) << "'" << text << "' bos " << bos;
      std::string expected(text);
      if (!bos && !expected.empty()) expected.insert(expected.begin(), ' ');
      EXPECT_EQ(sp->Decode(ids), expected) << "'" << text << "'";
    }
  }
}

TEST(SentencePieceTest, ExportsTheVocabularyItWasWrittenFrom) {
  absl::StatusOr<Vocabulary> vocab = LoadLlama2cVocabulary(kTok512);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  std::unique_ptr<Tokenizer> sp = RoundTrip(*vocab, TestDir());
  ASSERT_NE(sp, nullptr);
  Vocabulary exported = sp->ExportVocabulary();
  EXPECT_EQ(exported.pieces, vocab->pieces);
  EXPECT_EQ(exported.scores, vocab->scores);
  EXPECT_EQ(exported.types, vocab->types);
  EXPECT_EQ(exported.unk_id, vocab->unk_id);
  EXPECT_EQ(exported.bos_id, vocab->bos_id);
  EXPECT_EQ(exported.eos_id, vocab->eos_id);
  EXPECT_TRUE(exported.add_dummy_prefix);
}

TEST(SentencePieceTest, DecodePieceFollowsTheTokenizerContract) {
  Vocabulary vocab = SmallVocabulary(true);
  std::unique_ptr<Tokenizer> sp = RoundTrip(vocab, TestDir());
  ASSERT_NE(sp, nullptr);
  const int space_ab = vocab.size() - 2, unused = vocab.size() - 1;
  EXPECT_EQ(sp->DecodePiece(-1, space_ab), " ab");
  EXPECT_EQ(sp->DecodePiece(sp->bos_id(), space_ab), "ab");
  EXPECT_EQ(sp->DecodePiece(sp->bos_id(), 3 + ' '), " ");  // a byte token keeps its space
  EXPECT_EQ(sp->DecodePiece(-1, 3 + 0x41), "A");
  EXPECT_EQ(sp->DecodePiece(-1, sp->bos_id()), "");
  EXPECT_EQ(sp->DecodePiece(-1, 0), "");
  EXPECT_EQ(sp->DecodePiece(-1, unused), "");
  EXPECT_EQ(sp->DecodePiece(-1, -1), "");
  EXPECT_EQ(sp->DecodePiece(-1, vocab.size()), "");
  EXPECT_EQ(sp->ExportVocabulary().types, vocab.types);
}

TEST(SentencePieceTest, HonoursAddDummyPrefix) {
  for (bool prefix : {true, false}) {
    Vocabulary vocab = SmallVocabulary(prefix);
    auto merge = MergeTokenizer::Create(vocab);
    ASSERT_TRUE(merge.ok());
    std::unique_ptr<Tokenizer> sp = RoundTrip(vocab, TestDir());
    ASSERT_NE(sp, nullptr);
    EXPECT_EQ(sp->ExportVocabulary().add_dummy_prefix, prefix);
    for (const char* text : {"ab ab", "abba", "a b Z", "xyz"}) {
      EXPECT_EQ(sp->Encode(text, true), (*merge)->Encode(text, true))
          << "'" << text << "' prefix " << prefix;
    }
  }
}

TEST(SentencePieceTest, RejectsBadFiles) {
  const std::string dir = TestDir();
  const std::string garbage = dir + "/garbage.model";
  WriteBytes(garbage, "\xff\xff\xff\xff this is not a protobuf");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadSentencePieceTokenizer(garbage);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(garbage));

  const std::string llama2c = dir + "/tok512.model";  // a tokenizer.bin is not a ModelProto
  std::filesystem::copy_file(kTok512, llama2c);
  t = LoadSentencePieceTokenizer(llama2c);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(llama2c));

  const std::string empty = dir + "/empty.model";
  WriteBytes(empty, "");
  EXPECT_FALSE(LoadSentencePieceTokenizer(empty).ok());
  EXPECT_EQ(LoadSentencePieceTokenizer(dir + "/absent.model").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SentencePieceTest, RejectsModelsWithoutBos) {
  Vocabulary vocab = SmallVocabulary(true);
  vocab.types[1] = TokenType::kNormal;  // "<s>" is no longer a control token
  const std::string path = TestDir() + "/no_bos.model";
  WriteBytes(path, EncodeSentencePieceModel(vocab));
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadSentencePieceTokenizer(path);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr("BOS"));
}

}  // namespace
}  // namespace pdserve
