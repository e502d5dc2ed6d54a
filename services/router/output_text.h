// OutputText: the text side of one generated stream. Turns token ids into text deltas that never
// split a UTF-8 character (core/tokenizer/text_stream.h) and matches stop strings on the
// accumulated text. Text that could still become the start of a stop string is held back until it
// cannot, so a matched stop string (and anything after it) is never sent. No gRPC types; not
// thread-safe: one per request.
#ifndef PDSERVE_SERVICES_ROUTER_OUTPUT_TEXT_H_
#define PDSERVE_SERVICES_ROUTER_OUTPUT_TEXT_H_

#include <string>
#include <vector>

#include "core/tokenizer/text_stream.h"
#include "core/tokenizer/tokenizer.h"

namespace pdserve {

class OutputText {
 public:
  // `prev_token` is the last prompt token. `tokenizer` must outlive this.
  OutputText(const Tokenizer& tokenizer, int prev_token, std::vector<std::string> stop_strings);

  struct Step {
    std::string text;      // newly releasable text (may be empty)
    bool stopped = false;  // a stop string matched; `text` ends right before it
  };
  // Appends a token. Do not push after a Step with `stopped`.
  Step Push(int token);
  // End of stream: releases everything still held back (cut at a stop string if one matches).
  Step Flush();

  // All text released so far.
  const std::string& released() const { return released_; }

 private:
  Step Release(bool final);

  TextStream stream_;
  std::vector<std::string> stop_strings_;
  size_t longest_stop_ = 0;
  std::string text_;      // everything decoded
  size_t emitted_ = 0;    // bytes of text_ released
  std::string released_;  // text_[0, emitted_) (or up to the match)
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_OUTPUT_TEXT_H_
