// BpeTokenizer: byte-level BPE, as Hugging Face tokenizers and llama.cpp run the GPT-2, Llama 3
// and Qwen2 tokenizers. Encode: control and user-defined tokens are matched in the text first
// (longest at each position, as HF's added-token splitting does) and never merged into; the text
// between them is NFC-normalized when the vocabulary asks, split by the pre-tokenizer, and each
// word is merged from single bytes by the ranked merge list (lowest rank first, leftmost among
// equals). Immutable after construction; thread-safe.
#ifndef PDSERVE_CORE_TOKENIZER_BPE_TOKENIZER_H_
#define PDSERVE_CORE_TOKENIZER_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/tokenizer/tokenizer.h"

namespace pdserve {

class BpeTokenizer : public Tokenizer {
 public:
  // InvalidArgument when `vocabulary` is not byte-level BPE or is inconsistent: a byte without a
  // single-byte token, a merge whose sides or result are not tokens.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Create(Vocabulary vocabulary);

  int vocab_size() const override { return vocab_.size(); }
  int bos_id() const override { return vocab_.bos_id; }
  int eos_id() const override { return vocab_.eos_id; }
  bool add_bos() const override { return vocab_.add_bos; }
  std::vector<int> end_of_generation_ids() const override { return end_of_generation_ids_; }
  // Prepends BOS only when `add_bos` and the vocabulary's add_bos are both set.
  std::vector<int> Encode(std::string_view text, bool add_bos) const override;
  // Normal and user-defined tokens decode to their bytes, all others to nothing.
  std::string DecodePiece(int prev, int id) const override;
  Vocabulary ExportVocabulary() const override { return vocab_; }
  const std::string& chat_template() const override { return vocab_.chat_template; }

 private:
  struct Merge {
    int rank;
    int result;
  };

  explicit BpeTokenizer(Vocabulary vocabulary) : vocab_(std::move(vocabulary)) {}
  absl::Status Index();
  void FindEndsOfGeneration();
  void EncodeText(std::string_view text, std::vector<int>* out) const;
  void EncodeWord(std::string_view word, std::vector<int>* out) const;
  const Merge* FindMerge(int left, int right) const;

  Vocabulary vocab_;
  absl::flat_hash_map<std::string, int> piece_to_id_;         // normal tokens
  std::array<std::vector<int>, 256> specials_by_first_byte_;  // control and user-defined tokens
  std::array<int, 256> byte_to_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) → merge
  std::vector<int> end_of_generation_ids_;       // computed once by Index
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_BPE_TOKENIZER_H_
