#include "core/tokenizer/pre_tokenizer.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/tokenizer/unicode.h"

namespace pdserve {
namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class CharClass { kLetter, kNumber, kSpace, kNewline, kOther };

// The text as characters with their byte offsets; offsets[size()] is the text's end.
class Chars {
 public:
  explicit Chars(std::string_view text) {
    for (size_t pos = 0; pos < text.size();) {
      const Utf8Char c = DecodeUtf8(text, pos);
      code_points_.push_back(c.code_point);
      classes_.push_back(Classify(c.code_point));
      offsets_.push_back(pos);
      pos += c.length;
    }
    offsets_.push_back(text.size());
  }

  size_t size() const { return code_points_.size(); }
  size_t offset(size_t i) const { return offsets_[i]; }
  char32_t at(size_t i) const { return i < size() ? code_points_[i] : 0; }
  bool Is(size_t i, CharClass c) const { return i < size() && classes_[i] == c; }
  bool IsSpace(size_t i) const { return Is(i, CharClass::kSpace) || Is(i, CharClass::kNewline); }
  // [^\s\p{L}\p{N}]
  bool IsOther(size_t i) const { return Is(i, CharClass::kOther); }
  // [^\r\n\p{L}\p{N}]
  bool IsNotNewlineLetterNumber(size_t i) const { return IsOther(i) || IsSpaceNotNewline(i); }
  bool IsSpaceNotNewline(size_t i) const {
    return IsSpace(i) && code_points_[i] != U'\r' && code_points_[i] != U'\n';
  }
  bool IsCrOrLf(size_t i) const { return i < size() && (at(i) == U'\r' || at(i) == U'\n'); }

  // The end of the run of characters from `i` that satisfy `pred`, at most `limit` long.
  template <typename Pred>
  size_t RunEnd(size_t i, Pred pred, size_t limit = SIZE_MAX) const {
    size_t end = i;
    while (end < size() && end - i < limit && pred(end)) ++end;
    return end;
  }

 private:
  static CharClass Classify(char32_t cp) {
    if (cp == kInvalidUtf8) return CharClass::kOther;
    if (IsLetter(cp)) return CharClass::kLetter;
    if (IsNumber(cp)) return CharClass::kNumber;
    if (IsWhiteSpace(cp)) return CharClass::kSpace;
    return CharClass::kOther;
  }

  std::vector<char32_t> code_points_;
  std::vector<CharClass> classes_;
  std::vector<size_t> offsets_;
};

constexpr size_t kNoMatch = 0;

// '(s|t|re|ve|m|ll|d), ASCII-case-insensitive when `ignore_case`.
size_t MatchContraction(const Chars& c, size_t i, bool ignore_case) {
  if (c.at(i) != U'\'') return kNoMatch;
  const auto lower = [&](size_t j) {
    const char32_t cp = c.at(j);
    return ignore_case && cp >= U'A' && cp <= U'Z' ? cp + 32 : cp;
  };
  const char32_t a = lower(i + 1);
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return i + 2;
  const char32_t b = lower(i + 2);
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) {
    return i + 3;
  }
  return kNoMatch;
}

// ` ?X+` for the class X: an optional space, then one or more of X.
template <typename Pred>
size_t MatchSpaceThenRun(const Chars& c, size_t i, Pred is_x) {
  const size_t start = c.at(i) == U' ' && is_x(i + 1) ? i + 1 : i;
  if (!is_x(start)) return kNoMatch;
  return c.RunEnd(start, is_x);
}

// \s+(?!\S)|\s+ : a whitespace run, less its last character when a non-space follows it.
size_t MatchSpaces(const Chars& c, size_t i) {
  if (!c.IsSpace(i)) return kNoMatch;
  const size_t end = c.RunEnd(i, [&](size_t j) { return c.IsSpace(j); });
  return end == c.size() || end - i == 1 ? end : end - 1;
}

size_t MatchGpt2(const Chars& c, size_t i) {
  if (size_t end = MatchContraction(c, i, /*ignore_case=*/false)) return end;
  const auto letter = [&](size_t j) { return c.Is(j, CharClass::kLetter); };
  if (size_t end = MatchSpaceThenRun(c, i, letter)) return end;
  const auto number = [&](size_t j) { return c.Is(j, CharClass::kNumber); };
  if (size_t end = MatchSpaceThenRun(c, i, number)) return end;
  const auto other = [&](size_t j) { return c.IsOther(j); };
  if (size_t end = MatchSpaceThenRun(c, i, other)) return end;
  return MatchSpaces(c, i);
}

// kLlama3 and kQwen2; `max_digits` is 3 and 1.
size_t MatchLlama3(const Chars& c, size_t i, size_t max_digits) {
  if (size_t end = MatchContraction(c, i, /*ignore_case=*/true)) return end;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  const auto letter = [&](size_t j) { return c.Is(j, CharClass::kLetter); };
  const size_t word = c.IsNotNewlineLetterNumber(i) && letter(i + 1) ? i + 1 : i;
  if (letter(word)) return c.RunEnd(word, letter);
  // \p{N}{1,max_digits}
  const auto number = [&](size_t j) { return c.Is(j, CharClass::kNumber); };
  if (number(i)) return c.RunEnd(i, number, max_digits);
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const auto other = [&](size_t j) { return c.IsOther(j); };
  if (size_t end = MatchSpaceThenRun(c, i, other)) {
    return c.RunEnd(end, [&](size_t j) { return c.IsCrOrLf(j); });
  }
  if (!c.IsSpace(i)) return kNoMatch;
  // \s*[\r\n]+ : through the last CR or LF of the whitespace run.
  const size_t end = c.RunEnd(i, [&](size_t j) { return c.IsSpace(j); });
  for (size_t j = end; j > i; --j) {
    if (c.IsCrOrLf(j - 1)) return j;
  }
  return MatchSpaces(c, i);
}

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizerFromGgufName(std::string_view name) {
  if (name == "gpt-2") return PreTokenizer::kGpt2;
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return PreTokenizer::kLlama3;
  if (name == "qwen2") return PreTokenizer::kQwen2;
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.ggml.pre '", std::string(name),
                   "' is not supported; supported: gpt-2, llama-bpe (llama3), qwen2"));
}

std::string_view GgufName(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kGpt2:
      return "gpt-2";
    case PreTokenizer::kLlama3:
      return "llama-bpe";
    case PreTokenizer::kQwen2:
      return "qwen2";
  }
  return "";
}

absl::StatusOr<PreTokenizer> PreTokenizerFromRegex(std::string_view pattern) {
  if (pattern == kGpt2Regex) return PreTokenizer::kGpt2;
  if (pattern == kLlama3Regex) return PreTokenizer::kLlama3;
  if (pattern == kQwen2Regex) return PreTokenizer::kQwen2;
  return absl::InvalidArgumentError(
      absl::StrCat("pre-tokenizer regex '", std::string(pattern),
                   "' is not one pdserve implements (GPT-2, Llama 3, Qwen2)"));
}

std::vector<std::string_view> PreTokenize(PreTokenizer kind, std::string_view text) {
  const Chars chars(text);
  std::vector<std::string_view> words;
  for (size_t i = 0; i < chars.size();) {
    size_t end = kind == PreTokenizer::kGpt2    ? MatchGpt2(chars, i)
                 : kind == PreTokenizer::kQwen2 ? MatchLlama3(chars, i, 1)
                                                : MatchLlama3(chars, i, 3);
    if (end <= i) end = i + 1;  // unreachable: every character class has an alternative
    words.push_back(text.substr(chars.offset(i), chars.offset(end) - chars.offset(i)));
    i = end;
  }
  return words;
}

}  // namespace pdserve
