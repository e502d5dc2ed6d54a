// Request validation: turns a client's GenerateRequest into a ValidatedRequest, or
// INVALID_ARGUMENT saying what is wrong, before anything is dispatched (so a bad request never
// allocates KV). Pure functions; thread-safe as long as the tokenizer is.
#ifndef PDSERVE_SERVICES_ROUTER_REQUEST_VALIDATION_H_
#define PDSERVE_SERVICES_ROUTER_REQUEST_VALIDATION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/engine/sampler.h"
#include "core/tokenizer/tokenizer.h"
#include "pdserve/v1/router.pb.h"

namespace pdserve {

// What the router validates against; the tokenizer must outlive the calls.
struct ValidationLimits {
  const Tokenizer* tokenizer = nullptr;
  int max_context = 0;  // positions the model holds (prompt + generated)
  int vocab_size = 0;
};

inline constexpr int kMaxStopStrings = 16;

struct ValidatedRequest {
  std::vector<int> prompt;  // token ids (text prompts get BOS)
  SamplingParams sampling;  // top_p 0 on the wire → 1.0
  int max_tokens = 0;
  std::vector<int> stop_token_ids;  // the request's, plus EOS and BOS unless ignore_eos
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;
};

// INVALID_ARGUMENT for: no or empty prompt, text that is not valid UTF-8, a prompt that leaves no
// room to generate (prompt + 1 > max_context), token ids outside [0, vocab), max_tokens < 1 or
// > max_context − prompt length, bad sampling values, empty stop strings or more than 16, stop
// token ids outside the vocabulary.
absl::StatusOr<ValidatedRequest> ValidateGenerateRequest(const v1::GenerateRequest& request,
                                                         const ValidationLimits& limits);

// Strict UTF-8: no overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no
// truncated sequences. On failure `*error_offset` (when given) is the offending byte.
bool IsValidUtf8(absl::string_view text, size_t* error_offset = nullptr);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_REQUEST_VALIDATION_H_
