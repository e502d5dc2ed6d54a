// Vocabulary: a model's token table, as the tokenizers and the model writers exchange it. Two
// models: SentencePiece-style (llama2.c tokenizer.bin, GGUF "llama" vocabularies, SentencePiece BPE
// models), scored pieces merged by score; and byte-level BPE (GGUF "gpt2" vocabularies, Hugging
// Face tokenizer.json BPE), pieces merged by a ranked merge list. Pieces hold raw bytes: a plain
// space where SentencePiece writes U+2581 ("▁"), the bytes themselves where byte-level files spell
// them in GPT-2's alphabet ("Ġ"); control and user-defined tokens hold their text. A plain value
// type.
#ifndef PDSERVE_CORE_TOKENIZER_VOCABULARY_H_
#define PDSERVE_CORE_TOKENIZER_VOCABULARY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/tokenizer/pre_tokenizer.h"

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

enum class TokenizerModel { kSentencePiece, kByteLevelBpe };

struct Vocabulary {
  TokenizerModel model = TokenizerModel::kSentencePiece;
  std::vector<std::string> pieces;  // bytes; a byte token's piece is "<0xNN>"
  std::vector<float> scores;        // SentencePiece: merge priority, higher first; BPE: empty
  std::vector<TokenType> types;
  int bos_id = 1;  // a model without a BOS token names its EOS here and sets add_bos false
  int eos_id = 2;
  int unk_id = 0;
  bool add_bos = true;        // whether Encode(add_bos=true) prepends bos_id
  std::string chat_template;  // the model's chat template (Jinja); empty when it has none

  // SentencePiece only: encode " " + text, as SentencePiece and llama2.c do.
  bool add_dummy_prefix = true;

  // Byte-level BPE only.
  std::vector<std::pair<std::string, std::string>> merges;  // raw bytes, highest priority first
  PreTokenizer pre_tokenizer = PreTokenizer::kGpt2;
  bool normalize_nfc = false;  // NFC-normalize text before pre-tokenizing (Qwen2)
  bool ignore_merges = false;  // a pre-tokenized word that is a token is not merged (Llama 3)

  int size() const { return static_cast<int>(pieces.size()); }

  // InvalidArgument when the arrays disagree in length, the vocabulary is empty, a special id
  // is out of range, two tokens share a piece, or a "<0xNN>" byte piece is malformed.
  absl::Status Validate() const;
};

// Grows `vocab` to `size` tokens (not below its size) and names every unused token without a piece
// "[PADn]", as llama.cpp's converter fills the ids a vocabulary leaves free (Qwen pads its
// embedding past its tokens).
void PadVocabulary(Vocabulary& vocab, int size);

// Parses "<0xNN>" into its byte value; -1 when `piece` is not a byte token.
int ParseBytePiece(std::string_view piece);

// Converts between SentencePiece's "▁" and a plain space.
std::string SpaceToMetaspace(std::string_view piece);
std::string MetaspaceToSpace(std::string_view piece);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_VOCABULARY_H_
