// Tokenizer: text ↔ token ids for one model. Implementations: MergeTokenizer (llama2.c
// tokenizer.bin and GGUF vocabularies) and SentencePieceTokenizer (tokenizer.model files).
// Immutable after construction; safe to use from many threads.
#ifndef PDSERVE_CORE_TOKENIZER_TOKENIZER_H_
#define PDSERVE_CORE_TOKENIZER_TOKENIZER_H_

#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/vocabulary.h"

namespace pdserve {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  // Whether Encode(text, add_bos=true) starts with BOS (Qwen and some Llama 3 files add none).
  virtual bool add_bos() const { return true; }
  // The tokens that end a generation: EOS and BOS (which starts the next text: llama2.c's
  // convention), and for byte-level BPE the control tokens chat models end a turn with
  // (<|eot_id|>, <|im_end|>, ..., as llama.cpp's end-of-generation set), whatever the file names
  // as EOS.
  virtual std::vector<int> end_of_generation_ids() const { return {eos_id(), bos_id()}; }

  // Encodes `text` (any bytes; invalid UTF-8 falls back to byte tokens), prepending BOS when
  // `add_bos` and the model adds one (add_bos()). Follows the model's conventions, e.g. a dummy
  // leading space.
  virtual std::vector<int> Encode(std::string_view text, bool add_bos) const = 0;

  // The bytes that token `id` contributes to the text when it follows token `prev` (-1 for none):
  // a byte token gives its byte, a control token nothing, and the leading space of the first
  // piece after BOS is dropped. Ids outside the vocabulary give "".
  virtual std::string DecodePiece(int prev, int id) const = 0;

  // The token table, for writing the model in another format.
  virtual Vocabulary ExportVocabulary() const = 0;

  // The model's chat template (Jinja source); empty when the tokenizer file carries none.
  virtual const std::string& chat_template() const;

  // Decodes a whole sequence by concatenating DecodePiece over consecutive pairs.
  std::string Decode(const std::vector<int>& ids) const;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_TOKENIZER_H_
