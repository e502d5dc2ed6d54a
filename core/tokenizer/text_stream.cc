#include "core/tokenizer/text_stream.h"

namespace pdserve {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Bytes in the sequence a lead byte starts, 0 when `lead` cannot start one.
int SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Whether byte `i` (≥ 1) of a sequence starting with `lead` is a valid continuation (this also
// rejects overlong forms, surrogates and code points above U+10FFFF via the second byte).
bool ValidContinuation(uint8_t lead, int i, uint8_t byte) {
  if ((byte & 0xC0) != 0x80) return false;
  if (i != 1) return true;
  if (lead == 0xE0) return byte >= 0xA0;
  if (lead == 0xED) return byte <= 0x9F;
  if (lead == 0xF0) return byte >= 0x90;
  if (lead == 0xF4) return byte <= 0x8F;
  return true;
}

}  // namespace

void TakeCompleteUtf8(std::string& bytes, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const uint8_t lead = static_cast<uint8_t>(bytes[i]);
    const int length = SequenceLength(lead);
    if (length == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    int have = 1;
    while (have < length && i + have < bytes.size() &&
           ValidContinuation(lead, have, static_cast<uint8_t>(bytes[i + have]))) {
      ++have;
    }
    if (have == length) {
      out.append(bytes, i, length);
      i += length;
    } else if (i + have == bytes.size()) {
      break;  // still arriving
    } else {
      out += kReplacement;  // broken by an invalid byte
      i += have;
    }
  }
  bytes.erase(0, i);
}

std::string TextStream::Push(int token) {
  pending_ += tokenizer_.DecodePiece(prev_, token);
  prev_ = token;
  std::string out;
  TakeCompleteUtf8(pending_, out);
  return out;
}

std::string TextStream::Flush() {
  std::string out;
  TakeCompleteUtf8(pending_, out);
  if (!pending_.empty()) out += kReplacement;
  pending_.clear();
  return out;
}

}  // namespace pdserve
