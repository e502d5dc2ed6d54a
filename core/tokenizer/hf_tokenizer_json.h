// Hugging Face tokenizer.json files with a byte-level BPE model (GPT-2, Llama 3, Qwen2/2.5/3):
// vocab and merges (either "a b" strings or [a, b] pairs), added tokens (special ones become
// control tokens, the others user-defined), the normalizer (none or NFC), the pre-tokenizer
// (Split with one of the regexes PreTokenizer implements, then ByteLevel; or ByteLevel with GPT-2's
// regex), ignore_merges, and whether the post-processor's template starts with BOS. The special
// tokens and the chat template come from tokenizer_config.json beside it when present
// (bos_token, eos_token, add_bos_token, chat_template).
#ifndef PDSERVE_CORE_TOKENIZER_HF_TOKENIZER_JSON_H_
#define PDSERVE_CORE_TOKENIZER_HF_TOKENIZER_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/tokenizer/vocabulary.h"

namespace pdserve {

// NotFound when `path` is missing; InvalidArgument naming the file and the field for anything
// pdserve does not implement (another model type, normalizer or pre-tokenizer regex, byte
// fallback, dropout, added tokens that strip spaces), for malformed JSON, and for a vocabulary
// without an EOS token. Ids missing between 0 and the largest become unused "[PADn]" tokens, as
// llama.cpp's converter writes them. A model without a BOS token gets bos_id = eos_id and
// add_bos false.
absl::StatusOr<Vocabulary> ReadHfTokenizerJson(const std::string& path);

// The chat template of the tokenizer_config.json at `path` (a string, or the template named
// "default" in a list); "" when the file is missing or has none. InvalidArgument for a malformed
// file or field.
absl::StatusOr<std::string> ReadHfChatTemplate(const std::string& path);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_HF_TOKENIZER_JSON_H_
