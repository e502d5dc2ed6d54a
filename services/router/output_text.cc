#include "services/router/output_text.h"

#include <algorithm>
#include <utility>

namespace pdserve {

OutputText::OutputText(const Tokenizer& tokenizer, int prev_token,
                       std::vector<std::string> stop_strings)
    : stream_(tokenizer, prev_token), stop_strings_(std::move(stop_strings)) {
  for (const std::string& s : stop_strings_) longest_stop_ = std::max(longest_stop_, s.size());
}

OutputText::Step OutputText::Push(int token) {
  text_ += stream_.Push(token);
  return Release(/*final=*/false);
}

OutputText::Step OutputText::Flush() {
  text_ += stream_.Flush();
  return Release(/*final=*/true);
}

OutputText::Step OutputText::Release(bool final) {
  Step step;
  // A match may start up to longest_stop_ − 1 bytes before the unreleased text; earlier starts
  // were ruled out when that text was released.
  const size_t from = emitted_ >= longest_stop_ ? emitted_ - longest_stop_ + 1 : 0;
  size_t match = std::string::npos;
  for (const std::string& s : stop_strings_) match = std::min(match, text_.find(s, from));
  size_t end = text_.size();
  if (match != std::string::npos) {
    end = std::max(match, emitted_);
    step.stopped = true;
  } else if (!final) {
    // Hold back the longest tail that is a proper prefix of a stop string. Such a tail starts
    // with a stop string's first byte, so it starts on a character boundary.
    for (size_t hold =
             std::min(longest_stop_ - (longest_stop_ > 0 ? 1 : 0), text_.size() - emitted_);
         hold > 0; --hold) {
      const std::string_view tail(text_.data() + text_.size() - hold, hold);
      const bool is_prefix = std::any_of(stop_strings_.begin(), stop_strings_.end(),
                                         [&](const std::string& s) { return s.starts_with(tail); });
      if (is_prefix) {
        end -= hold;
        break;
      }
    }
  }
  step.text = text_.substr(emitted_, end - emitted_);
  released_ += step.text;
  emitted_ = end;
  return step;
}

}  // namespace pdserve
