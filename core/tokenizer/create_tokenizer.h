// The tokenizer that runs a Vocabulary: MergeTokenizer for SentencePiece-style vocabularies,
// BpeTokenizer for byte-level BPE ones.
#ifndef PDSERVE_CORE_TOKENIZER_CREATE_TOKENIZER_H_
#define PDSERVE_CORE_TOKENIZER_CREATE_TOKENIZER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocabulary.h"

namespace pdserve {

// InvalidArgument when the vocabulary is inconsistent (see the tokenizers' Create).
absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(Vocabulary vocabulary);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_CREATE_TOKENIZER_H_
