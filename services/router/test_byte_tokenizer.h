// ByteTokenizer (tests only): a tiny deterministic Tokenizer with one token per byte, so that
// tests control exactly which bytes each token contributes. Ids: 0 = unk, 1 = BOS, 2 = EOS,
// 3 + b = byte b. Immutable; thread-safe.
#ifndef PDSERVE_SERVICES_ROUTER_TEST_BYTE_TOKENIZER_H_
#define PDSERVE_SERVICES_ROUTER_TEST_BYTE_TOKENIZER_H_

#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace pdserve {

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int kVocab = 3 + 256;
  static int Id(unsigned char byte) { return 3 + byte; }
  static std::vector<int> Ids(std::string_view text) {
    std::vector<int> ids;
    for (char c : text) ids.push_back(Id(static_cast<unsigned char>(c)));
    return ids;
  }

  int vocab_size() const override { return kVocab; }
  int bos_id() const override { return 1; }
  int eos_id() const override { return 2; }
  std::vector<int> Encode(std::string_view text, bool add_bos) const override {
    std::vector<int> ids;
    if (add_bos) ids.push_back(bos_id());
    for (int id : Ids(text)) ids.push_back(id);
    return ids;
  }
  std::string DecodePiece(int /*prev*/, int id) const override {
    if (id < 3 || id >= kVocab) return "";
    return std::string(1, static_cast<char>(id - 3));
  }
  Vocabulary ExportVocabulary() const override { return Vocabulary{}; }
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_TEST_BYTE_TOKENIZER_H_
