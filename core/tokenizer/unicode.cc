#include "core/tokenizer/unicode.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace pdserve {
namespace {

struct CodePointRange {
  char32_t first;
  char32_t last;
};
struct CombiningClassRange {
  char32_t first;
  char32_t last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t code_point;
  uint8_t length;
  char32_t parts[4];
};
struct Composition {
  char32_t first;
  char32_t second;
  char32_t composite;
};

#include "core/tokenizer/unicode_tables.inc"

// Hangul syllables compose and decompose by arithmetic (Unicode 14.0, section 3.12).
constexpr char32_t kHangulS = 0xAC00, kHangulL = 0x1100, kHangulV = 0x1161, kHangulT = 0x11A7;
constexpr char32_t kHangulLCount = 19, kHangulVCount = 21, kHangulTCount = 28;
constexpr char32_t kHangulNCount = kHangulVCount * kHangulTCount;
constexpr char32_t kHangulSCount = kHangulLCount * kHangulNCount;

template <typename Range>
const Range* FindRange(std::span<const Range> ranges, char32_t cp) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](char32_t c, const Range& r) { return c < r.first; });
  if (it == ranges.begin()) return nullptr;
  --it;
  return cp <= it->last ? &*it : nullptr;
}

int CombiningClass(char32_t cp) {
  const CombiningClassRange* r = FindRange<CombiningClassRange>(kCombiningClasses, cp);
  return r == nullptr ? 0 : r->ccc;
}

void Decompose(char32_t cp, std::vector<char32_t>* out) {
  if (cp >= kHangulS && cp < kHangulS + kHangulSCount) {
    const char32_t s = cp - kHangulS;
    out->push_back(kHangulL + s / kHangulNCount);
    out->push_back(kHangulV + (s % kHangulNCount) / kHangulTCount);
    if (s % kHangulTCount != 0) out->push_back(kHangulT + s % kHangulTCount);
    return;
  }
  const auto* it =
      std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                       [](const Decomposition& d, char32_t c) { return d.code_point < c; });
  if (it != std::end(kDecompositions) && it->code_point == cp) {
    out->insert(out->end(), it->parts, it->parts + it->length);
  } else {
    out->push_back(cp);
  }
}

// The primary composite of `a` followed by `b`, or 0 when there is none.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kHangulL && a < kHangulL + kHangulLCount && b >= kHangulV &&
      b < kHangulV + kHangulVCount) {
    return kHangulS + ((a - kHangulL) * kHangulVCount + (b - kHangulV)) * kHangulTCount;
  }
  if (a >= kHangulS && a < kHangulS + kHangulSCount && (a - kHangulS) % kHangulTCount == 0 &&
      b > kHangulT && b < kHangulT + kHangulTCount) {
    return a + (b - kHangulT);
  }
  const auto* it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions),
                                    std::pair{a, b}, [](const Composition& c, auto key) {
                                      return std::pair{c.first, c.second} < key;
                                    });
  if (it != std::end(kCompositions) && it->first == a && it->second == b) return it->composite;
  return 0;
}

// NFC of a run of valid code points: full canonical decomposition, canonical ordering of
// non-starters, then canonical composition (UAX #15).
void NormalizeRun(const std::vector<char32_t>& run, std::string* out) {
  std::vector<char32_t> chars;
  for (char32_t cp : run) Decompose(cp, &chars);
  for (size_t i = 0; i < chars.size();) {
    if (CombiningClass(chars[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < chars.size() && CombiningClass(chars[end]) != 0) ++end;
    std::stable_sort(chars.begin() + i, chars.begin() + end,
                     [](char32_t a, char32_t b) { return CombiningClass(a) < CombiningClass(b); });
    i = end;
  }
  std::vector<char32_t> composed;
  size_t starter = SIZE_MAX;
  int last_class = 256;  // nothing composes with a leading non-starter
  for (char32_t cp : chars) {
    const int cls = CombiningClass(cp);
    if (starter != SIZE_MAX && (last_class < cls || last_class == 0)) {
      if (const char32_t c = Compose(composed[starter], cp); c != 0) {
        composed[starter] = c;
        continue;
      }
    }
    if (cls == 0) starter = composed.size();
    last_class = cls;
    composed.push_back(cp);
  }
  for (char32_t cp : composed) AppendUtf8(cp, out);
}

}  // namespace

Utf8Char DecodeUtf8(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {lead, 1};
  int length;
  char32_t cp;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, cp = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, cp = lead & 0x07;
  } else {
    return {kInvalidUtf8, 1};
  }
  if (pos + length > text.size()) return {kInvalidUtf8, 1};
  for (int i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return {kInvalidUtf8, 1};
    cp = (cp << 6) | (byte(pos + i) & 0x3F);
  }
  const bool overlong = (length == 3 && cp < 0x800) || (length == 4 && cp < 0x10000);
  if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return {kInvalidUtf8, 1};
  return {cp, length};
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsLetter(char32_t cp) { return FindRange<CodePointRange>(kLetterRanges, cp) != nullptr; }
bool IsNumber(char32_t cp) { return FindRange<CodePointRange>(kNumberRanges, cp) != nullptr; }
bool IsWhiteSpace(char32_t cp) {
  return FindRange<CodePointRange>(kWhiteSpaceRanges, cp) != nullptr;
}

std::string NormalizeNfc(std::string_view text) {
  // Below U+0300 no code point decomposes, composes or has a combining class.
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return std::string(text);
  }
  std::string out;
  out.reserve(text.size());
  std::vector<char32_t> run;
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    if (c.code_point == kInvalidUtf8) {
      NormalizeRun(run, &out);
      run.clear();
      out.push_back(text[pos]);
    } else {
      run.push_back(c.code_point);
    }
    pos += c.length;
  }
  NormalizeRun(run, &out);
  return out;
}

}  // namespace pdserve
