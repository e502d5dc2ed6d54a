// TextStream: turns a stream of token ids into text deltas that are always whole UTF-8. A code
// point whose bytes arrive in several byte tokens is held back until complete; bytes that can never
// form valid UTF-8 are emitted as U+FFFD. Not thread-safe: one per output stream.
#ifndef PDSERVE_CORE_TOKENIZER_TEXT_STREAM_H_
#define PDSERVE_CORE_TOKENIZER_TEXT_STREAM_H_

#include <string>

#include "core/tokenizer/tokenizer.h"

namespace pdserve {

class TextStream {
 public:
  // `prev` is the token before the first one pushed (BOS after a prompt of just BOS, or the last
  // prompt token), so that the first piece is decoded in context. `tokenizer` must outlive this.
  TextStream(const Tokenizer& tokenizer, int prev) : tokenizer_(tokenizer), prev_(prev) {}

  // Appends `token` and returns the text that became complete (possibly empty).
  std::string Push(int token);

  // Returns whatever is still held back (an unfinished sequence as U+FFFD) and clears it.
  std::string Flush();

 private:
  const Tokenizer& tokenizer_;
  int prev_;
  std::string pending_;  // bytes not yet emitted
};

// Length of the longest prefix of `bytes` that is complete UTF-8 ending at a code point boundary,
// after replacing invalid bytes with U+FFFD; the replaced text goes to `out`, the incomplete tail
// (at most 3 bytes of a code point still in progress) stays in `bytes`.
void TakeCompleteUtf8(std::string& bytes, std::string& out);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_TEXT_STREAM_H_
