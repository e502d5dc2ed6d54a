// MergeTokenizer: SentencePiece-BPE-style tokenization by score-ordered merges over a Vocabulary,
// bit-compatible with llama2.c's run.c encoder and llama.cpp's SPM tokenizer: start from UTF-8
// code points (unknown ones fall back to byte tokens), then repeatedly merge the adjacent pair
// whose concatenation is a piece with the highest score, the leftmost pair on ties. O(n log n).
// Immutable after construction; thread-safe.
#ifndef PDSERVE_CORE_TOKENIZER_MERGE_TOKENIZER_H_
#define PDSERVE_CORE_TOKENIZER_MERGE_TOKENIZER_H_

#include <memory>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "core/tokenizer/tokenizer.h"

namespace pdserve {

class MergeTokenizer : public Tokenizer {
 public:
  // Validates `vocabulary`; InvalidArgument when it is inconsistent.
  static absl::StatusOr<std::unique_ptr<MergeTokenizer>> Create(Vocabulary vocabulary);

  int vocab_size() const override { return vocab_.size(); }
  int bos_id() const override { return vocab_.bos_id; }
  int eos_id() const override { return vocab_.eos_id; }
  bool add_bos() const override { return vocab_.add_bos; }
  std::vector<int> Encode(std::string_view text, bool add_bos) const override;
  std::string DecodePiece(int prev, int id) const override;
  Vocabulary ExportVocabulary() const override { return vocab_; }
  const std::string& chat_template() const override { return vocab_.chat_template; }

 private:
  explicit MergeTokenizer(Vocabulary vocabulary);
  int Lookup(std::string_view piece) const;

  Vocabulary vocab_;
  std::unordered_map<std::string, int> piece_to_id_;  // first id of each normal/user piece
  int byte_to_id_[256];                               // -1 where the byte has no token
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_MERGE_TOKENIZER_H_
