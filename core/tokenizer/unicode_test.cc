// UTF-8 decoding, code point classes and NFC against the Unicode standard's own examples.
#include "core/tokenizer/unicode.h"

#include <random>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(Utf8Test, DecodesWellFormedSequences) {
  const std::string text = "a\xC3\xA9\xE6\x97\xA5\xF0\x9F\xA6\x99";  // a é 日 🦙
  EXPECT_EQ(DecodeUtf8(text, 0).code_point, U'a');
  EXPECT_EQ(DecodeUtf8(text, 1).code_point, U'é');
  EXPECT_EQ(DecodeUtf8(text, 1).length, 2);
  EXPECT_EQ(DecodeUtf8(text, 3).code_point, U'日');
  EXPECT_EQ(DecodeUtf8(text, 6).code_point, U'\U0001F999');
  EXPECT_EQ(DecodeUtf8(text, 6).length, 4);
  std::string round_trip;
  for (char32_t cp : {U'a', U'é', U'日', U'\U0001F999'}) AppendUtf8(cp, &round_trip);
  EXPECT_EQ(round_trip, text);
}

TEST(Utf8Test, IllFormedBytesDecodeOneAtATime) {
  for (const std::string bad : {"\x80", "\xC0\x80", "\xE0\x80\x80", "\xED\xA0\x80",
                                "\xF4\x90\x80\x80", "\xF8\x88\x80\x80\x80", "\xE6\x97", "\xFF"}) {
    const Utf8Char c = DecodeUtf8(bad, 0);
    EXPECT_EQ(c.code_point, kInvalidUtf8) << testing::PrintToString(bad);
    EXPECT_EQ(c.length, 1);
  }
}

TEST(UnicodeClassesTest, FollowTheGeneralCategories) {
  for (char32_t letter : {U'a', U'Z', U'é', U'ж', U'日', U'ا', U'ǅ', U'ʰ', U'\U00020000'}) {
    EXPECT_TRUE(IsLetter(letter)) << static_cast<uint32_t>(letter);
    EXPECT_FALSE(IsNumber(letter));
  }
  for (char32_t number : {U'0', U'9', U'٣', U'½', U'Ⅻ', U'²', U'\U0001D7CE'}) {
    EXPECT_TRUE(IsNumber(number)) << static_cast<uint32_t>(number);
    EXPECT_FALSE(IsLetter(number));
  }
  for (char32_t space : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', U'\u0085', U'\u00A0', U'\u2028',
                         U'\u3000', U'\u202F'}) {
    EXPECT_TRUE(IsWhiteSpace(space)) << static_cast<uint32_t>(space);
  }
  for (char32_t other : {U'_', U'-', U'\u200B', U'\u001F', U'\U0001F999', U'\u0301'}) {
    EXPECT_FALSE(IsLetter(other) || IsNumber(other) || IsWhiteSpace(other))
        << static_cast<uint32_t>(other);
  }
}

TEST(NfcTest, ComposesReordersAndExcludes) {
  EXPECT_EQ(NormalizeNfc("e\u0301"), "\u00E9");              // é
  EXPECT_EQ(NormalizeNfc("\u212B"), "\u00C5");               // Ångström sign → Å (singleton)
  EXPECT_EQ(NormalizeNfc("\u2126"), "\u03A9");               // Ohm sign → Omega
  EXPECT_EQ(NormalizeNfc("\u1100\u1161\u11A8"), "\uAC01");   // Hangul jamo → 각
  EXPECT_EQ(NormalizeNfc("\uAC00\u11A8"), "\uAC01");         // LV + T → LVT
  EXPECT_EQ(NormalizeNfc("d\u0307\u0323"), "\u1E0D\u0307");  // canonical order, then compose
  EXPECT_EQ(NormalizeNfc("\u0958"), "\u0915\u093C");         // composition exclusion
  EXPECT_EQ(NormalizeNfc("\u1E69"), "\u1E69");               // ṩ stays composed
  EXPECT_EQ(NormalizeNfc("s\u0323\u0307"), "\u1E69");        // s + dot below + dot above → ṩ
  EXPECT_EQ(NormalizeNfc("\u0301e"), "\u0301e");             // a leading mark stays
  EXPECT_EQ(NormalizeNfc("a\u0301\u0301"), "\u00E1\u0301");  // the second acute is blocked
  EXPECT_EQ(NormalizeNfc("plain ascii"), "plain ascii");
  EXPECT_EQ(NormalizeNfc("e\xFF\u0301"), "e\xFF\u0301");  // a stray byte blocks composition
}

TEST(NfcTest, IsIdempotentOnRandomText) {
  const char32_t alphabet[] = {U'a',      U'e',      U'o',      U's',      U'd',      U'\u0301',
                               U'\u0300', U'\u0323', U'\u0307', U'\u0308', U'\u1100', U'\u1161',
                               U'\u11A8', U'\uAC00', U'\u212B', U'\u0958', U'\u00E9', U' '};
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string text;
    for (int j = 0; j < 12; ++j) AppendUtf8(alphabet[rng() % std::size(alphabet)], &text);
    const std::string once = NormalizeNfc(text);
    EXPECT_EQ(NormalizeNfc(once), once) << text;
  }
}

}  // namespace
}  // namespace pdserve
