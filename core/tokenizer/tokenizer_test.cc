// MergeTokenizer with llama2.c's tokenizer (encodings must equal run.c's), TextStream.
#include <filesystem>
#include <fstream>

#include "core/tokenizer/llama2c_tokenizer.h"
#include "core/tokenizer/merge_tokenizer.h"
#include "core/tokenizer/text_stream.h"
#include "gtest/gtest.h"
#include "tests/golden/reference_file.h"

namespace pdserve {
namespace {

const std::string kShared = PDSERVE_SHARED_DIR;

std::unique_ptr<Tokenizer> Tok512() {
  auto tokenizer = LoadLlama2cTokenizer(kShared + "/models/stories260K/tok512.bin", 512);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return std::move(*tokenizer);
}

TEST(MergeTokenizerTest, EncodesLikeLlama2c) {
  auto tokenizer = Tok512();
  auto cases = testing::ReadGoldenCases(kShared + "/reference/stories260K-greedy.txt");
  ASSERT_EQ(cases.size(), 5u);
  for (const auto& c : cases)
    EXPECT_EQ(tokenizer->Encode(c.prompt, true), c.prompt_ids) << c.prompt;
}

TEST(MergeTokenizerTest, RoundTripsTextIncludingBytesOutsideTheVocabulary) {
  auto tokenizer = Tok512();
  for (std::string text :
       {"Once upon a time", "Lily said, \"Hi!\"\nBye.", "café ☃ 日本 🚀", "  two  spaces", "x"}) {
    std::vector<int> ids = tokenizer->Encode(text, true);
    EXPECT_EQ(ids.front(), 1);
    EXPECT_EQ(tokenizer->Decode(ids), text) << text;
  }
  EXPECT_EQ(tokenizer->Encode("", true), std::vector<int>{1});
  EXPECT_TRUE(tokenizer->Encode("", false).empty());
}

TEST(MergeTokenizerTest, DecodePieceDropsTheSpaceAfterBosOnlyAndSkipsControls) {
  auto tokenizer = Tok512();
  std::vector<int> ids = tokenizer->Encode("Once", false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(tokenizer->DecodePiece(1, ids[0])[0], 'O');
  EXPECT_EQ(tokenizer->DecodePiece(5, ids[0])[0], ' ');
  EXPECT_EQ(tokenizer->DecodePiece(-1, 1), "");
  EXPECT_EQ(tokenizer->DecodePiece(-1, 2), "");
  EXPECT_EQ(tokenizer->DecodePiece(-1, 3 + 'A'), "A");  // byte token <0x41>
  EXPECT_EQ(tokenizer->DecodePiece(-1, 9999), "");
}

TEST(VocabularyTest, PadVocabularyAppendsNamedUnusedTokens) {
  Vocabulary v = Tok512()->ExportVocabulary();
  PadVocabulary(v, 515);
  ASSERT_EQ(v.size(), 515);
  EXPECT_EQ(v.scores.size(), 515u);
  EXPECT_EQ(v.pieces[514], "[PAD514]");
  EXPECT_EQ(v.types[513], TokenType::kUnused);
  EXPECT_TRUE(v.Validate().ok());
  PadVocabulary(v, 10);  // never shrinks
  EXPECT_EQ(v.size(), 515);
}

TEST(MergeTokenizerTest, RejectsInconsistentVocabularies) {
  Vocabulary v;
  v.pieces = {"<unk>", "<s>"};
  v.scores = {0};
  v.types = {TokenType::kUnknown, TokenType::kControl};
  EXPECT_EQ(MergeTokenizer::Create(v).status().code(), absl::StatusCode::kInvalidArgument);
  v.scores = {0, 0};
  v.eos_id = 5;
  EXPECT_EQ(MergeTokenizer::Create(v).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Llama2cTokenizerTest, MalformedFilesGiveClearErrors) {
  const std::string path = ::testing::TempDir() + "/bad_tokenizer.bin";
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; };
  std::ifstream in(kShared + "/models/stories260K/tok512.bin", std::ios::binary);
  std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (size_t cut : {size_t{2}, size_t{6}, size_t{13}, good.size() / 2, good.size() - 1}) {
    write(good.substr(0, cut));
    auto result = LoadLlama2cVocabulary(path);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << cut;
    EXPECT_NE(std::string(result.status().message()).find(path), std::string::npos);
  }
  std::string negative = good;
  int32_t minus = -5;
  std::memcpy(negative.data() + 8, &minus, 4);  // first token's length
  write(negative);
  EXPECT_EQ(LoadLlama2cVocabulary(path).status().code(), absl::StatusCode::kInvalidArgument);
  write(good);
  EXPECT_EQ(LoadLlama2cVocabulary(path, 32000).status().code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove(path);
}

TEST(TextStreamTest, HoldsBackSplitCodePointsAndReplacesInvalidBytes) {
  auto tokenizer = Tok512();
  const int e2 = 3 + 0xE2, x98 = 3 + 0x98, x83 = 3 + 0x83;  // ☃ = E2 98 83 as byte tokens
  TextStream stream(*tokenizer, -1);
  EXPECT_EQ(stream.Push(e2), "");
  EXPECT_EQ(stream.Push(x98), "");
  EXPECT_EQ(stream.Push(x83), "☃");
  EXPECT_EQ(stream.Push(3 + 'a'), "a");
  EXPECT_EQ(stream.Push(3 + 0xFF), "\xEF\xBF\xBD");  // never valid
  EXPECT_EQ(stream.Push(e2), "");
  EXPECT_EQ(stream.Push(3 + 'b'),
            "\xEF\xBF\xBD"
            "b");  // broken sequence
  EXPECT_EQ(stream.Push(e2), "");
  EXPECT_EQ(stream.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(stream.Flush(), "");
}

TEST(TextStreamTest, RejectsOverlongAndSurrogateForms) {
  std::string out, bytes =
                       "\xC0\xAF"
                       "\xED\xA0\x80"
                       "ok";
  TakeCompleteUtf8(bytes, out);
  EXPECT_EQ(bytes, "");
  EXPECT_EQ(out.substr(out.size() - 2), "ok");
  EXPECT_EQ(out.find("\xC0"), std::string::npos);
  EXPECT_EQ(out.find("\xED"), std::string::npos);
}

}  // namespace
}  // namespace pdserve
