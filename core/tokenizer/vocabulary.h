// Vocabulary: the token table shared by the SentencePiece-style tokenizers (llama2.c tokenizer.bin,
// GGUF "llama" vocabularies, SentencePiece BPE models). Pieces hold raw bytes with a plain space
// where SentencePiece writes U+2581 ("▁"). A plain value type.
#ifndef PDSERVE_CORE_TOKENIZER_VOCABULARY_H_
#define PDSERVE_CORE_TOKENIZER_VOCABULARY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace pdserve {

// Token kinds, numbered as GGUF's tokenizer.ggml.token_type. DO NOT RENUMBER.
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocabulary {
  std::vector<std::string> pieces;  // bytes; a byte token's piece is "<0xNN>"
  std::vector<float> scores;        // merge priority: higher merges first
  std::vector<TokenType> types;
  int bos_id = 1;
  int eos_id = 2;
  int unk_id = 0;
  bool add_dummy_prefix = true;  // encode " " + text, as SentencePiece and llama2.c do

  int size() const { return static_cast<int>(pieces.size()); }

  // InvalidArgument when the three arrays disagree in length, the vocabulary is empty, a special id
  // is out of range, two tokens share a piece, or a "<0xNN>" byte piece is malformed.
  absl::Status Validate() const;
};

// Parses "<0xNN>" into its byte value; -1 when `piece` is not a byte token.
int ParseBytePiece(std::string_view piece);

// Converts between SentencePiece's "▁" and a plain space.
std::string SpaceToMetaspace(std::string_view piece);
std::string MetaspaceToSpace(std::string_view piece);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_VOCABULARY_H_
