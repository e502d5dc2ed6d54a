#include "core/tokenizer/sentencepiece_model_writer.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace pdserve {
namespace {

// Field numbers of sentencepiece_model.proto (proto2, package sentencepiece).
namespace model_proto {
constexpr int kPieces = 1;
constexpr int kTrainerSpec = 2;
constexpr int kNormalizerSpec = 3;
}  // namespace model_proto
namespace piece_proto {
constexpr int kPiece = 1;
constexpr int kScore = 2;
constexpr int kType = 3;
}  // namespace piece_proto
namespace trainer_proto {
constexpr int kModelType = 3;
constexpr int kVocabSize = 4;
constexpr int kByteFallback = 35;
constexpr int kUnkId = 40;
constexpr int kBosId = 41;
constexpr int kEosId = 42;
constexpr int kPadId = 43;
constexpr int kUnkPiece = 45;
constexpr int kBosPiece = 46;
constexpr int kEosPiece = 47;
constexpr int kModelTypeBpe = 2;
}  // namespace trainer_proto
namespace normalizer_proto {
constexpr int kName = 1;
constexpr int kAddDummyPrefix = 3;
constexpr int kRemoveExtraWhitespaces = 4;
constexpr int kEscapeWhitespaces = 5;
}  // namespace normalizer_proto

enum WireType : uint32_t { kVarint = 0, kLengthDelimited = 2, kFixed32 = 5 };

// Appends protobuf wire-format fields to a string.
class ProtoWriter {
 public:
  void Varint(int field, uint64_t value) {
    Tag(field, kVarint);
    PutVarint(value);
  }
  // int32 and enum fields: negative values are sign-extended to 64 bits (10 bytes).
  void Int32(int field, int32_t value) { Varint(field, static_cast<uint64_t>(int64_t{value})); }
  void Bool(int field, bool value) { Varint(field, value ? 1 : 0); }
  void Float(int field, float value) {
    Tag(field, kFixed32);
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
  }
  // Strings, bytes and embedded messages.
  void Bytes(int field, const std::string& bytes) {
    Tag(field, kLengthDelimited);
    PutVarint(bytes.size());
    out_.append(bytes);
  }
  std::string Take() { return std::move(out_); }

 private:
  void Tag(int field, WireType type) { PutVarint((static_cast<uint64_t>(field) << 3) | type); }
  void PutVarint(uint64_t value) {
    while (value >= 0x80) {
      out_.push_back(static_cast<char>((value & 0x7F) | 0x80));
      value >>= 7;
    }
    out_.push_back(static_cast<char>(value));
  }

  std::string out_;
};

// The piece as SentencePiece spells it: "▁" for spaces, byte tokens as "<0xNN>" in upper case.
std::string PieceText(const Vocabulary& vocab, int id) {
  if (id < 0 || id >= vocab.size() || id >= static_cast<int>(vocab.types.size())) return "";
  const int byte = ParseBytePiece(vocab.pieces[id]);
  if (vocab.types[id] == TokenType::kByte && byte >= 0) {
    constexpr char kHex[] = "0123456789ABCDEF";
    return {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
  }
  return SpaceToMetaspace(vocab.pieces[id]);
}

std::string EncodePiece(const Vocabulary& vocab, int id) {
  ProtoWriter piece;
  piece.Bytes(piece_proto::kPiece, PieceText(vocab, id));
  piece.Float(piece_proto::kScore, vocab.scores[id]);
  // TokenType is numbered as ModelProto.SentencePiece.Type (NORMAL 1 ... BYTE 6).
  piece.Int32(piece_proto::kType, static_cast<int32_t>(vocab.types[id]));
  return piece.Take();
}

std::string EncodeTrainerSpec(const Vocabulary& vocab) {
  namespace t = trainer_proto;
  ProtoWriter spec;
  spec.Int32(t::kModelType, t::kModelTypeBpe);
  spec.Int32(t::kVocabSize, vocab.size());
  spec.Bool(t::kByteFallback, true);
  spec.Int32(t::kUnkId, vocab.unk_id);
  spec.Int32(t::kBosId, vocab.bos_id);
  spec.Int32(t::kEosId, vocab.eos_id);
  spec.Int32(t::kPadId, -1);
  // libsentencepiece finds the special ids by these pieces, not by the ids above.
  spec.Bytes(t::kUnkPiece, PieceText(vocab, vocab.unk_id));
  spec.Bytes(t::kBosPiece, PieceText(vocab, vocab.bos_id));
  spec.Bytes(t::kEosPiece, PieceText(vocab, vocab.eos_id));
  return spec.Take();
}

std::string EncodeNormalizerSpec(const Vocabulary& vocab) {
  namespace n = normalizer_proto;
  ProtoWriter spec;
  spec.Bytes(n::kName, "identity");
  spec.Bool(n::kAddDummyPrefix, vocab.add_dummy_prefix);
  spec.Bool(n::kRemoveExtraWhitespaces, false);
  spec.Bool(n::kEscapeWhitespaces, true);
  return spec.Take();
}

}  // namespace

std::string EncodeSentencePieceModel(const Vocabulary& vocab) {
  ProtoWriter model;
  const size_t n = std::min({vocab.pieces.size(), vocab.scores.size(), vocab.types.size()});
  for (int id = 0; id < static_cast<int>(n); ++id) {
    model.Bytes(model_proto::kPieces, EncodePiece(vocab, id));
  }
  model.Bytes(model_proto::kTrainerSpec, EncodeTrainerSpec(vocab));
  model.Bytes(model_proto::kNormalizerSpec, EncodeNormalizerSpec(vocab));
  return model.Take();
}

}  // namespace pdserve
