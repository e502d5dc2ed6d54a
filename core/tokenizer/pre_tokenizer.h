// Pre-tokenizers of byte-level BPE models: the regexes that split text into the words BPE merges
// within, as Hugging Face tokenizers' Split(behavior Isolated) applies them. Each kind is a
// hand-written matcher of one regex, exact for every input (alternatives in order, greedy
// quantifiers with backtracking, the lookahead of `\s+(?!\S)`):
//   kGpt2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kLlama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   kQwen2   kLlama3 with \p{N} in place of \p{N}{1,3}
// \s is the White_Space property. Bytes that are not well-formed UTF-8 count as [^\s\p{L}\p{N}].
#ifndef PDSERVE_CORE_TOKENIZER_PRE_TOKENIZER_H_
#define PDSERVE_CORE_TOKENIZER_PRE_TOKENIZER_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve {

enum class PreTokenizer { kGpt2, kLlama3, kQwen2 };

// GGUF's tokenizer.ggml.pre names: "gpt-2"; "llama-bpe", "llama3", "llama-v3"; "qwen2".
// InvalidArgument naming `name` and the supported names otherwise.
absl::StatusOr<PreTokenizer> PreTokenizerFromGgufName(std::string_view name);
// The name written to GGUF files.
std::string_view GgufName(PreTokenizer kind);

// The kind whose regex is `pattern` (a tokenizer.json Split pattern), InvalidArgument otherwise.
absl::StatusOr<PreTokenizer> PreTokenizerFromRegex(std::string_view pattern);

// Splits `text` into consecutive, non-empty words that concatenate to `text`.
std::vector<std::string_view> PreTokenize(PreTokenizer kind, std::string_view text);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_PRE_TOKENIZER_H_
