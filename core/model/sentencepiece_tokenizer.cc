#include "core/model/sentencepiece_tokenizer.h"

#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/mapped_file.h"
#include "core/base/status_macros.h"

// libsentencepiece's header declares `namespace absl { using std::string_view; }`, which clashes
// with Abseil's absl::string_view class (Debian's Abseil does not alias std::string_view).
// Renaming that namespace while the header is read keeps the two apart; its alias still names
// std::string_view, so the library's symbols link as usual.
#define absl pdserve_sentencepiece_absl
#include <sentencepiece_processor.h>
#undef absl

namespace pdserve {
namespace {

// Field numbers in sentencepiece_model.proto: ModelProto.normalizer_spec and
// NormalizerSpec.add_dummy_prefix.
constexpr uint64_t kNormalizerSpecField = 3;
constexpr uint64_t kAddDummyPrefixField = 3;

// A minimal protobuf wire-format cursor, enough to find one scalar field.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return pos_ >= bytes_.size(); }

  bool Varint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64 && pos_ < bytes_.size(); shift += 7) {
      const auto byte = static_cast<uint8_t>(bytes_[pos_++]);
      *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  // Reads the payload of a field of `wire_type`; `sub` receives a length-delimited one.
  bool Payload(uint64_t wire_type, uint64_t* varint, std::string_view* sub) {
    uint64_t size = 0;
    switch (wire_type) {
      case 0:
        return Varint(varint);
      case 1:
        size = 8;
        break;
      case 5:
        size = 4;
        break;
      case 2:
        if (!Varint(&size)) return false;
        break;
      default:
        return false;  // groups: not used by sentencepiece_model.proto
    }
    if (size > bytes_.size() - pos_) return false;
    *sub = bytes_.substr(pos_, size);
    pos_ += size;
    return true;
  }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

// NormalizerSpec.add_dummy_prefix of a serialized ModelProto; true (the proto default) when unset.
// The last occurrence wins, as protobuf merges repeated embedded messages.
bool ReadAddDummyPrefix(std::string_view model) {
  bool result = true;
  WireReader top(model);
  while (!top.done()) {
    uint64_t tag = 0, varint = 0;
    std::string_view sub;
    if (!top.Varint(&tag) || !top.Payload(tag & 7, &varint, &sub)) break;
    if ((tag >> 3) != kNormalizerSpecField || (tag & 7) != 2) continue;
    WireReader spec(sub);
    while (!spec.done()) {
      uint64_t field_tag = 0, value = 0;
      std::string_view ignored;
      if (!spec.Varint(&field_tag) || !spec.Payload(field_tag & 7, &value, &ignored)) break;
      if ((field_tag >> 3) == kAddDummyPrefixField && (field_tag & 7) == 0) result = value != 0;
    }
  }
  return result;
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> processor,
                         bool add_dummy_prefix)
      : processor_(std::move(processor)),
        bos_id_(processor_->bos_id()),
        eos_id_(processor_->eos_id()),
        add_dummy_prefix_(add_dummy_prefix) {
    for (int id = 0; id < processor_->GetPieceSize(); ++id) text_.push_back(PieceBytes(id));
  }

  int vocab_size() const override { return static_cast<int>(text_.size()); }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }

  std::vector<int> Encode(std::string_view text, bool add_bos) const override {
    std::vector<int> out;
    if (add_bos) out.push_back(bos_id());
    std::vector<int> ids = processor_->EncodeAsIds(text);
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  std::string DecodePiece(int prev, int id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    const std::string& text = text_[id];
    if (prev == bos_id() && !text.empty() && text[0] == ' ' && !processor_->IsByte(id)) {
      return text.substr(1);
    }
    return text;
  }

  Vocabulary ExportVocabulary() const override;

 private:
  // The bytes token `id` stands for, whatever precedes it.
  std::string PieceBytes(int id) const {
    const std::string& piece = processor_->IdToPiece(id);
    if (processor_->IsByte(id)) {
      const int byte = ParseBytePiece(piece);
      return byte < 0 ? "" : std::string(1, static_cast<char>(byte));
    }
    if (processor_->IsControl(id) || processor_->IsUnknown(id) || processor_->IsUnused(id)) {
      return "";
    }
    return MetaspaceToSpace(piece);
  }

  TokenType TypeOf(int id) const {
    if (processor_->IsUnknown(id)) return TokenType::kUnknown;
    if (processor_->IsControl(id)) return TokenType::kControl;
    if (processor_->IsUnused(id)) return TokenType::kUnused;
    if (processor_->IsByte(id)) return TokenType::kByte;
    return TokenType::kNormal;
  }

  std::unique_ptr<const sentencepiece::SentencePieceProcessor> processor_;
  int bos_id_;
  int eos_id_;
  bool add_dummy_prefix_;
  std::vector<std::string> text_;  // PieceBytes of every id
};

Vocabulary SentencePieceTokenizer::ExportVocabulary() const {
  Vocabulary vocab;
  for (int id = 0; id < vocab_size(); ++id) {
    const std::string& piece = processor_->IdToPiece(id);
    vocab.types.push_back(TypeOf(id));
    vocab.pieces.push_back(processor_->IsByte(id) ? piece : MetaspaceToSpace(piece));
    vocab.scores.push_back(processor_->GetScore(id));
  }
  vocab.bos_id = bos_id();
  vocab.eos_id = eos_id();
  vocab.unk_id = processor_->unk_id();
  vocab.add_dummy_prefix = add_dummy_prefix_;
  return vocab;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  const std::string_view bytes(reinterpret_cast<const char*>(file->data()), file->size());
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const sentencepiece::util::Status status = processor->LoadFromSerializedProto(bytes);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a usable SentencePiece model: ", status.ToString()));
  }
  if (processor->GetPieceSize() <= 0 || processor->bos_id() < 0 || processor->eos_id() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the SentencePiece model has ", processor->GetPieceSize(),
                     " pieces and BOS id ", processor->bos_id(), ", EOS id ", processor->eos_id(),
                     "; BOS and EOS control tokens are required"));
  }
  return std::unique_ptr<Tokenizer>(
      new SentencePieceTokenizer(std::move(processor), ReadAddDummyPrefix(bytes)));
}

}  // namespace pdserve
