// The vocabulary of a GGUF file (tokenizer.ggml.*), read and written as llama.cpp does: model
// "llama" (SentencePiece-style: tokens with U+2581 for spaces, scores, token types) or "gpt2"
// (byte-level BPE: tokens in GPT-2's byte alphabet, merges, the pre-tokenizer's name in
// tokenizer.ggml.pre).
#ifndef PDSERVE_CORE_FORMATS_GGUF_VOCABULARY_H_
#define PDSERVE_CORE_FORMATS_GGUF_VOCABULARY_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/formats/gguf_file.h"
#include "core/formats/gguf_writer.h"
#include "core/tokenizer/vocabulary.h"

namespace pdserve {

// InvalidArgument naming the file for another tokenizer model or pre-tokenizer, a missing or
// ill-typed key, a per-token array of the wrong length, a token or merge outside the byte-level
// alphabet, or a vocabulary that fails Validate. Defaults as in llama.cpp: special ids 1/2/0
// (SentencePiece) or 11 (BPE); add_bos true for SentencePiece and Llama 3's pre-tokenizer.
absl::StatusOr<Vocabulary> ReadGgufVocabulary(const GgufFile& file);

// Sets the tokenizer.ggml.* metadata of `vocab` on `out`.
absl::Status AddGgufVocabulary(GgufWriter& out, const Vocabulary& vocab);

}  // namespace pdserve

#endif  // PDSERVE_CORE_FORMATS_GGUF_VOCABULARY_H_
