// The pre-tokenizers on cases that exercise each alternative of their regexes. The real
// tokenizers' test vectors (tests/tokenizers) check them on llama.cpp's corpus end to end.
#include "core/tokenizer/pre_tokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/tokenizer/unicode.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

std::vector<std::string> Words(PreTokenizer kind, std::string_view text) {
  std::vector<std::string> words;
  for (std::string_view w : PreTokenize(kind, text)) words.emplace_back(w);
  EXPECT_EQ(absl::StrJoin(words, ""), text);
  return words;
}

using W = std::vector<std::string>;

TEST(PreTokenizerTest, Llama3) {
  const auto k = PreTokenizer::kLlama3;
  EXPECT_EQ(Words(k, "Hello world"), (W{"Hello", " world"}));
  EXPECT_EQ(Words(k, "1234567"), (W{"123", "456", "7"}));
  EXPECT_EQ(Words(k, "I'M here'S"), (W{"I", "'M", " here", "'S"}));
  EXPECT_EQ(Words(k, "x  \n  y"), (W{"x", "  \n", " ", " y"}));
  EXPECT_EQ(Words(k, "a\n\nb"), (W{"a", "\n\n", "b"}));
  EXPECT_EQ(Words(k, "(hi)...\n\nok"), (W{"(hi", ")...\n\n", "ok"}));
  EXPECT_EQ(Words(k, "  end  "), (W{" ", " end", "  "}));
  EXPECT_EQ(Words(k, " 🦙.cpp"), (W{" 🦙.", "cpp"}));
  EXPECT_EQ(Words(k, "\tword"), (W{"\tword"}));
  EXPECT_EQ(Words(k, "'x"), (W{"'x"}));
  EXPECT_EQ(Words(k,
                  "a\xFF"
                  "b"),
            (W{"a",
               "\xFF"
               "b"}));
  EXPECT_TRUE(PreTokenize(k, "").empty());
}

TEST(PreTokenizerTest, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(Words(PreTokenizer::kQwen2, "x 2024!"), (W{"x", " ", "2", "0", "2", "4", "!"}));
}

TEST(PreTokenizerTest, Gpt2) {
  const auto k = PreTokenizer::kGpt2;
  EXPECT_EQ(Words(k, "Hello  world 123"), (W{"Hello", " ", " world", " 123"}));
  EXPECT_EQ(Words(k, "I'M i'm"), (W{"I", "'", "M", " i", "'m"}));
  EXPECT_EQ(Words(k, "a\n\nb"), (W{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Words(k, "x ...\n"), (W{"x", " ...", "\n"}));
}

// On random text (ASCII, letters and digits of other scripts, whitespace of every kind, emoji,
// combining marks and stray bytes) every kind splits into non-empty words that concatenate to the
// text and never start inside a character.
TEST(PreTokenizerTest, RandomTextSplitsIntoWholeWords) {
  const std::vector<std::string> pieces = {
      "a",  "Z", "'", "'s", "'LL", " ",  "  ",   "\t",     "\n", "\r\n", "\u00A0", "\u3000", "7",
      "42", "٣", "½", "é",  "ж",   "日", "🦙", "\u0301", "!",  "...",  "\xFF",   "\x80",   "x"};
  std::mt19937 rng(11);
  for (PreTokenizer kind : {PreTokenizer::kGpt2, PreTokenizer::kLlama3, PreTokenizer::kQwen2}) {
    for (int i = 0; i < 3000; ++i) {
      std::string text;
      const int n = static_cast<int>(rng() % 12);
      for (int j = 0; j < n; ++j) text += pieces[rng() % pieces.size()];
      std::vector<bool> boundary(text.size() + 1, false);
      for (size_t pos = 0; pos < text.size(); pos += DecodeUtf8(text, pos).length) {
        boundary[pos] = true;
      }
      std::string joined;
      for (std::string_view w : PreTokenize(kind, text)) {
        ASSERT_FALSE(w.empty()) << text;
        ASSERT_TRUE(boundary[joined.size()])
            << "a word starts inside a character: " << testing::PrintToString(text);
        joined += w;
      }
      ASSERT_EQ(joined, text);
    }
  }
}

TEST(PreTokenizerTest, KindsByNameAndRegex) {
  EXPECT_EQ(*PreTokenizerFromGgufName("llama-bpe"), PreTokenizer::kLlama3);
  EXPECT_EQ(*PreTokenizerFromGgufName("qwen2"), PreTokenizer::kQwen2);
  EXPECT_EQ(*PreTokenizerFromGgufName(GgufName(PreTokenizer::kGpt2)), PreTokenizer::kGpt2);
  EXPECT_NE(PreTokenizerFromGgufName("deepseek-llm").status().message().find("deepseek-llm"),
            std::string::npos);
  EXPECT_EQ(
      *PreTokenizerFromRegex(
          R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"),
      PreTokenizer::kQwen2);
  EXPECT_FALSE(PreTokenizerFromRegex(R"(\w+)").ok());
}

}  // namespace
}  // namespace pdserve
