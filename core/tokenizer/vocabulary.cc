#include "core/tokenizer/vocabulary.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace pdserve {
namespace {

constexpr absl::string_view kMetaspace = "\xE2\x96\x81";  // U+2581

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

void PadVocabulary(Vocabulary& vocab, int size) {
  if (size > vocab.size()) {
    vocab.pieces.resize(size);
    vocab.types.resize(size, TokenType::kUnused);
    if (vocab.model == TokenizerModel::kSentencePiece) vocab.scores.resize(size, 0.0f);
  }
  for (int id = 0; id < vocab.size(); ++id) {
    if (vocab.types[id] == TokenType::kUnused && vocab.pieces[id].empty()) {
      vocab.pieces[id] = absl::StrCat("[PAD", id, "]");
    }
  }
}

int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') {
    return -1;
  }
  int hi = HexDigit(piece[3]);
  int lo = HexDigit(piece[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

std::string SpaceToMetaspace(std::string_view piece) {
  return absl::StrReplaceAll(std::string(piece), {{" ", kMetaspace}});
}

std::string MetaspaceToSpace(std::string_view piece) {
  return absl::StrReplaceAll(std::string(piece), {{kMetaspace, " "}});
}

absl::Status Vocabulary::Validate() const {
  if (pieces.empty()) {
    return absl::InvalidArgumentError("vocabulary is empty");
  }
  const size_t want_scores = model == TokenizerModel::kSentencePiece ? pieces.size() : 0;
  if (scores.size() != want_scores || types.size() != pieces.size()) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary has ", pieces.size(), " pieces, ",
                                                   scores.size(), " scores and ", types.size(),
                                                   " token types"));
  }
  for (auto [name, id] :
       {std::pair{"bos", bos_id}, std::pair{"eos", eos_id}, std::pair{"unk", unk_id}}) {
    if (id < 0 || id >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocabulary: ", name, " id ", id, " is outside [0, ", size(), ")"));
    }
  }
  absl::flat_hash_map<std::string, int> seen;
  for (int i = 0; i < size(); ++i) {
    if (auto [it, inserted] = seen.emplace(pieces[i], i); !inserted) {
      return absl::InvalidArgumentError(absl::StrCat("vocabulary: tokens ", it->second, " and ", i,
                                                     " are both '", pieces[i], "'"));
    }
    if (types[i] == TokenType::kByte && ParseBytePiece(pieces[i]) < 0) {
      return absl::InvalidArgumentError(absl::StrCat("vocabulary: byte token ", i, " has piece '",
                                                     pieces[i], "', expected <0xNN>"));
    }
  }
  return absl::OkStatus();
}

}  // namespace pdserve
