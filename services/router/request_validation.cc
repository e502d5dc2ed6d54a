#include "services/router/request_validation.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "services/common/sampling_proto.h"

namespace pdserve {

bool IsValidUtf8(absl::string_view text, size_t* error_offset) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  auto fail = [&] {
    if (error_offset != nullptr) *error_offset = i;
    return false;
  };
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    int length;
    uint32_t min;
    uint32_t cp;
    if ((b & 0xE0) == 0xC0) {
      length = 2, min = 0x80, cp = b & 0x1F;
    } else if ((b & 0xF0) == 0xE0) {
      length = 3, min = 0x800, cp = b & 0x0F;
    } else if ((b & 0xF8) == 0xF0) {
      length = 4, min = 0x10000, cp = b & 0x07;
    } else {
      return fail();  // a continuation byte or 0xF8..0xFF
    }
    if (i + length > n) return fail();
    for (int k = 1; k < length; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return fail();
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return fail();
    i += length;
  }
  return true;
}

namespace {

absl::Status Invalid(absl::string_view what) { return absl::InvalidArgumentError(what); }

absl::StatusOr<std::vector<int>> ValidatePrompt(const v1::GenerateRequest& request,
                                                const ValidationLimits& limits) {
  std::vector<int> prompt;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText: {
      const std::string& text = request.text();
      if (text.empty()) return Invalid("empty prompt: text is \"\"");
      size_t offset = 0;
      if (!IsValidUtf8(text, &offset)) {
        return Invalid(absl::StrCat("prompt text is not valid UTF-8 (byte offset ", offset, ")"));
      }
      prompt = limits.tokenizer->Encode(text, /*add_bos=*/!request.text_has_special_tokens());
      break;
    }
    case v1::GenerateRequest::kTokenIds: {
      const auto& ids = request.token_ids().ids();
      if (ids.empty()) return Invalid("empty prompt: token_ids has no ids");
      for (int i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= limits.vocab_size) {
          return Invalid(absl::StrCat("prompt token_ids[", i, "] = ", ids[i],
                                      " is outside the vocabulary [0, ", limits.vocab_size, ")"));
        }
      }
      prompt.assign(ids.begin(), ids.end());
      break;
    }
    default:
      return Invalid("empty prompt: set text or token_ids");
  }
  if (static_cast<int64_t>(prompt.size()) + 1 > limits.max_context) {
    return Invalid(absl::StrCat("prompt of ", prompt.size(),
                                " tokens leaves no room to generate in the model's context of ",
                                limits.max_context, " tokens"));
  }
  return prompt;
}

absl::StatusOr<SamplingParams> ValidateSampling(const v1::SamplingParams& wire) {
  SamplingParams sampling = SamplingFromProto(wire);
  absl::Status status = sampling.Validate();
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: ", status.message()));
  }
  return sampling;
}

}  // namespace

absl::StatusOr<ValidatedRequest> ValidateGenerateRequest(const v1::GenerateRequest& request,
                                                         const ValidationLimits& limits) {
  ValidatedRequest out;
  auto prompt = ValidatePrompt(request, limits);
  if (!prompt.ok()) return prompt.status();
  out.prompt = *std::move(prompt);
  const int room = limits.max_context - static_cast<int>(out.prompt.size());
  if (request.max_tokens() < 1 || request.max_tokens() > room) {
    return Invalid(absl::StrCat("max_tokens = ", request.max_tokens(), " must be in [1, ", room,
                                "] (context ", limits.max_context, " − prompt ", out.prompt.size(),
                                " tokens)"));
  }
  out.max_tokens = request.max_tokens();
  auto sampling = ValidateSampling(request.sampling());
  if (!sampling.ok()) return sampling.status();
  out.sampling = *sampling;

  const v1::StopConditions& stop = request.stop();
  if (stop.stop_strings_size() > kMaxStopStrings) {
    return Invalid(absl::StrCat(stop.stop_strings_size(), " stop strings; at most ",
                                kMaxStopStrings, " are allowed"));
  }
  for (int i = 0; i < stop.stop_strings_size(); ++i) {
    const std::string& s = stop.stop_strings(i);
    if (s.empty()) return Invalid(absl::StrCat("stop_strings[", i, "] is empty"));
    if (!IsValidUtf8(s)) return Invalid(absl::StrCat("stop_strings[", i, "] is not valid UTF-8"));
    out.stop_strings.push_back(s);
  }
  for (int i = 0; i < stop.stop_token_ids_size(); ++i) {
    const int id = stop.stop_token_ids(i);
    if (id < 0 || id >= limits.vocab_size) {
      return Invalid(absl::StrCat("stop_token_ids[", i, "] = ", id,
                                  " is outside the vocabulary [0, ", limits.vocab_size, ")"));
    }
    if (std::find(out.stop_token_ids.begin(), out.stop_token_ids.end(), id) ==
        out.stop_token_ids.end()) {
      out.stop_token_ids.push_back(id);
    }
  }
  out.ignore_eos = stop.ignore_eos();
  // The end of a text or turn (Tokenizer::end_of_generation_ids; what `pdserve generate` stops at).
  if (!out.ignore_eos && limits.tokenizer != nullptr) {
    for (const int end : limits.tokenizer->end_of_generation_ids()) {
      if (end >= 0 && std::find(out.stop_token_ids.begin(), out.stop_token_ids.end(), end) ==
                          out.stop_token_ids.end()) {
        out.stop_token_ids.push_back(end);
      }
    }
  }
  return out;
}

}  // namespace pdserve
