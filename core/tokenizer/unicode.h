// Unicode for tokenizers: UTF-8 decoding that never fails, the code point classes the pre-tokenizer
// regexes test (\p{L}, \p{N}, \s), and NFC normalization. Tables are generated from the Unicode
// Character Database 14.0 by scripts/gen_unicode_tables.py.
#ifndef PDSERVE_CORE_TOKENIZER_UNICODE_H_
#define PDSERVE_CORE_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace pdserve {

// A code point, or a byte that does not start a well-formed UTF-8 sequence.
struct Utf8Char {
  char32_t code_point;  // kInvalidUtf8 for a stray byte
  int length;           // bytes it spans, 1..4
};
inline constexpr char32_t kInvalidUtf8 = 0xFFFFFFFF;

// Decodes the character at `pos` (< text.size()). Overlong forms, surrogates and code points
// above U+10FFFF are invalid: they decode as one stray byte each.
Utf8Char DecodeUtf8(std::string_view text, size_t pos);

// Appends `cp` (a valid code point) as UTF-8.
void AppendUtf8(char32_t cp, std::string* out);

bool IsLetter(char32_t cp);      // general category L*
bool IsNumber(char32_t cp);      // general category N*
bool IsWhiteSpace(char32_t cp);  // the White_Space property

// The text in Normalization Form C. Stray bytes pass through unchanged and block composition
// across them.
std::string NormalizeNfc(std::string_view text);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_UNICODE_H_
