// CheckTokenizer: what any tokenizer a loader accepted must do with any text, checked by the fuzz
// targets of tokenizer files and of model files that carry a vocabulary (tests/fuzz).
#ifndef PDSERVE_TESTS_FUZZ_TOKENIZER_CHECK_H_
#define PDSERVE_TESTS_FUZZ_TOKENIZER_CHECK_H_

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/text_stream.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

namespace pdserve::fuzz {

// Text for CheckTokenizer: a fixed sample (spaces, digits, UTF-8, a stray byte) and up to 48
// bytes of the fuzz input.
inline std::string SampleText(std::string_view input) {
  std::string text = "Hello wörld 12345 \xe6\x97\xa5\xff  \n";
  text.append(input.substr(input.size() - std::min<size_t>(input.size(), 48)));
  return text;
}

// Encodes `text` with and without BOS and decodes the ids whole and as a stream; aborts when an id
// is outside the vocabulary, BOS is not where add_bos() puts it, an id outside the vocabulary
// decodes to text, or the exported vocabulary is invalid.
inline void CheckTokenizer(const Tokenizer& tokenizer, std::string_view text) {
  const int size = tokenizer.vocab_size();
  const auto in_vocabulary = [size](int id) { return id >= 0 && id < size; };
  Check(size > 0, "a tokenizer has tokens");
  Check(in_vocabulary(tokenizer.bos_id()) && in_vocabulary(tokenizer.eos_id()),
        "BOS and EOS are in the vocabulary");
  for (int id : tokenizer.end_of_generation_ids()) {
    Check(in_vocabulary(id), "end-of-generation ids are in the vocabulary");
  }
  for (bool add_bos : {false, true}) {
    const std::vector<int> ids = tokenizer.Encode(text, add_bos);
    Check(std::all_of(ids.begin(), ids.end(), in_vocabulary), "encoded ids are in the vocabulary");
    if (add_bos && tokenizer.add_bos()) {
      Check(!ids.empty() && ids[0] == tokenizer.bos_id(), "Encode(add_bos) starts with BOS");
    }
    tokenizer.Decode(ids);
    TextStream stream(tokenizer, -1);
    for (int id : ids) stream.Push(id);
    stream.Flush();
  }
  Check(tokenizer.DecodePiece(-1, -1).empty() && tokenizer.DecodePiece(-1, size).empty(),
        "ids outside the vocabulary decode to nothing");
  Check(tokenizer.ExportVocabulary().Validate().ok(), "the exported vocabulary is valid");
}

}  // namespace pdserve::fuzz

#endif  // PDSERVE_TESTS_FUZZ_TOKENIZER_CHECK_H_
