// GPT-2's byte-level alphabet: byte-level BPE vocabularies (GGUF "gpt2" models, tokenizer.json
// ByteLevel) spell each byte as a printable code point — bytes 0x21..0x7E, 0xA1..0xAC and
// 0xAE..0xFF as themselves, the other 68 as U+0100.. in byte order (so a space is "Ġ", U+0120).
#ifndef PDSERVE_CORE_TOKENIZER_BYTE_LEVEL_H_
#define PDSERVE_CORE_TOKENIZER_BYTE_LEVEL_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pdserve {

// Raw bytes → their byte-level spelling (UTF-8).
std::string ToByteLevel(std::string_view bytes);

// A byte-level spelling → its raw bytes; InvalidArgument when `text` holds a character outside
// the alphabet.
absl::StatusOr<std::string> FromByteLevel(std::string_view text);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_BYTE_LEVEL_H_
