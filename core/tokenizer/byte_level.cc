#include "core/tokenizer/byte_level.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/unicode.h"

namespace pdserve {
namespace {

constexpr bool PrintsAsItself(int byte) {
  return (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
}

// The code point that spells each byte.
constexpr std::array<char32_t, 256> kByteToCodePoint = [] {
  std::array<char32_t, 256> table{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) table[b] = PrintsAsItself(b) ? b : next++;
  return table;
}();

// The byte each code point below U+0144 spells, -1 for none.
constexpr std::array<int, 0x144> kCodePointToByte = [] {
  std::array<int, 0x144> table{};
  table.fill(-1);
  for (int b = 0; b < 256; ++b) table[kByteToCodePoint[b]] = b;
  return table;
}();

}  // namespace

std::string ToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(kByteToCodePoint[static_cast<unsigned char>(c)], &out);
  return out;
}

absl::StatusOr<std::string> FromByteLevel(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    const int byte = c.code_point < kCodePointToByte.size() ? kCodePointToByte[c.code_point] : -1;
    if (byte < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", std::string(text),
                       "' has a character outside the byte-level alphabet at byte ", pos));
    }
    out.push_back(static_cast<char>(byte));
    pos += c.length;
  }
  return out;
}

}  // namespace pdserve
