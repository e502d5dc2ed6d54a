#include "core/tokenizer/sentencepiece_tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/mapped_file.h"
#include "core/base/status_macros.h"
#include "core/tokenizer/sentencepiece_shim/spm_shim.h"

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

// libsentencepiece lives in pdserve_spm_shim (sentencepiece_shim/spm_shim.h), loaded into a link
// namespace of its own so that its builtin protobuf-lite never meets the libprotobuf of the gRPC
// services. These are the module's functions.
struct SpmShim {
  int (*abi_version)();
  pdserve_spm* (*load)(const char*, size_t, char*, size_t);
  void (*free)(pdserve_spm*);
  int (*piece_size)(const pdserve_spm*);
  int (*bos_id)(const pdserve_spm*);
  int (*eos_id)(const pdserve_spm*);
  int (*unk_id)(const pdserve_spm*);
  void (*piece)(const pdserve_spm*, int, const char**, size_t*);
  float (*score)(const pdserve_spm*, int);
  int (*piece_flags)(const pdserve_spm*, int);
  int (*encode)(const pdserve_spm*, const char*, size_t, int**, size_t*, char*, size_t);
  void (*free_ids)(int*);
};

constexpr size_t kErrorSize = 1024;

// The directory of the running executable, with a trailing '/'; empty when unknown.
std::string ExecutableDir() {
  std::vector<char> buffer(4096);
  const ssize_t n = readlink("/proc/self/exe", buffer.data(), buffer.size());
  if (n <= 0 || static_cast<size_t>(n) >= buffer.size()) return "";
  const std::string exe(buffer.data(), static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash + 1);
}

std::string DlError() {
  const char* error = dlerror();
  return error == nullptr ? "unknown error" : error;
}

template <typename F>
bool Resolve(void* handle, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(handle, name));
  return *fn != nullptr;
}

absl::StatusOr<SpmShim> OpenShim(const std::string& path) {
  void* handle = dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the SentencePiece module ", path, ": ", DlError()));
  }
  // The namespace stays loaded for the life of the process.
  SpmShim shim{};
  const bool ok = Resolve(handle, "pdserve_spm_abi_version", &shim.abi_version) &&
                  Resolve(handle, "pdserve_spm_load", &shim.load) &&
                  Resolve(handle, "pdserve_spm_free", &shim.free) &&
                  Resolve(handle, "pdserve_spm_piece_size", &shim.piece_size) &&
                  Resolve(handle, "pdserve_spm_bos_id", &shim.bos_id) &&
                  Resolve(handle, "pdserve_spm_eos_id", &shim.eos_id) &&
                  Resolve(handle, "pdserve_spm_unk_id", &shim.unk_id) &&
                  Resolve(handle, "pdserve_spm_piece", &shim.piece) &&
                  Resolve(handle, "pdserve_spm_score", &shim.score) &&
                  Resolve(handle, "pdserve_spm_piece_flags", &shim.piece_flags) &&
                  Resolve(handle, "pdserve_spm_encode", &shim.encode) &&
                  Resolve(handle, "pdserve_spm_free_ids", &shim.free_ids);
  if (!ok || shim.abi_version() != PDSERVE_SPM_ABI_VERSION) {
    return absl::FailedPreconditionError(
        absl::StrCat("the SentencePiece module ", path, " is not pdserve_spm_shim ABI version ",
                     PDSERVE_SPM_ABI_VERSION, ok ? "" : absl::StrCat(" (", DlError(), ")")));
  }
  return shim;
}

// Loads the module once per process: first next to the executable (an installed or copied binary),
// then at the build tree's path.
const absl::StatusOr<SpmShim>& GetShim() {
  static const absl::StatusOr<SpmShim>* const shim = [] {
    std::vector<std::string> candidates;
    if (const std::string dir = ExecutableDir(); !dir.empty()) {
      candidates.push_back(dir + PDSERVE_SPM_SHIM_NAME);
    }
    candidates.push_back(PDSERVE_SPM_SHIM_PATH);
    std::vector<std::string> errors;
    for (const std::string& path : candidates) {
      if (access(path.c_str(), F_OK) != 0) {
        errors.push_back(absl::StrCat(path, " does not exist"));
        continue;
      }
      absl::StatusOr<SpmShim> opened = OpenShim(path);
      if (opened.ok()) return new absl::StatusOr<SpmShim>(std::move(opened));
      errors.push_back(std::string(opened.status().message()));
    }
    return new absl::StatusOr<SpmShim>(absl::FailedPreconditionError(
        absl::StrCat("cannot load the SentencePiece module " PDSERVE_SPM_SHIM_NAME
                     " (needed for SentencePiece tokenizer.model files): ",
                     absl::StrJoin(errors, "; "))));
  }();
  return *shim;
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Takes ownership of `spm`.
  SentencePieceTokenizer(const SpmShim& shim, pdserve_spm* spm, bool add_dummy_prefix,
                         std::string chat_template)
      : shim_(shim),
        spm_(spm),
        bos_id_(shim.bos_id(spm)),
        eos_id_(shim.eos_id(spm)),
        unk_id_(shim.unk_id(spm)),
        add_dummy_prefix_(add_dummy_prefix),
        chat_template_(std::move(chat_template)) {
    const int size = shim.piece_size(spm);
    for (int id = 0; id < size; ++id) {
      const char* data = nullptr;
      size_t length = 0;
      shim.piece(spm, id, &data, &length);
      pieces_.emplace_back(data, length);
      scores_.push_back(shim.score(spm, id));
      flags_.push_back(shim.piece_flags(spm, id));
    }
    for (int id = 0; id < size; ++id) text_.push_back(PieceBytes(id));
  }
  ~SentencePieceTokenizer() override { shim_.free(spm_); }
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  int vocab_size() const override { return static_cast<int>(text_.size()); }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  const std::string& chat_template() const override { return chat_template_; }

  std::vector<int> Encode(std::string_view text, bool add_bos) const override {
    std::vector<int> out;
    if (add_bos) out.push_back(bos_id());
    int* ids = nullptr;
    size_t count = 0;
    char error[kErrorSize];
    if (shim_.encode(spm_, text.data(), text.size(), &ids, &count, error, sizeof(error)) != 0) {
      return out;  // as EncodeAsIds: nothing when the library fails
    }
    out.insert(out.end(), ids, ids + count);
    shim_.free_ids(ids);
    return out;
  }

  std::string DecodePiece(int prev, int id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    const std::string& text = text_[id];
    if (prev == bos_id() && !text.empty() && text[0] == ' ' && !IsByte(id)) {
      return text.substr(1);
    }
    return text;
  }

  Vocabulary ExportVocabulary() const override;

 private:
  bool IsByte(int id) const { return (flags_[id] & PDSERVE_SPM_BYTE) != 0; }

  // The bytes token `id` stands for, whatever precedes it.
  std::string PieceBytes(int id) const {
    const std::string& piece = pieces_[id];
    if (IsByte(id)) {
      const int byte = ParseBytePiece(piece);
      return byte < 0 ? "" : std::string(1, static_cast<char>(byte));
    }
    if ((flags_[id] & (PDSERVE_SPM_CONTROL | PDSERVE_SPM_UNKNOWN | PDSERVE_SPM_UNUSED)) != 0) {
      return "";
    }
    return MetaspaceToSpace(piece);
  }

  TokenType TypeOf(int id) const {
    if ((flags_[id] & PDSERVE_SPM_UNKNOWN) != 0) return TokenType::kUnknown;
    if ((flags_[id] & PDSERVE_SPM_CONTROL) != 0) return TokenType::kControl;
    if ((flags_[id] & PDSERVE_SPM_UNUSED) != 0) return TokenType::kUnused;
    if (IsByte(id)) return TokenType::kByte;
    return TokenType::kNormal;
  }

  const SpmShim& shim_;
  pdserve_spm* const spm_;
  int bos_id_;
  int eos_id_;
  int unk_id_;
  bool add_dummy_prefix_;
  std::vector<std::string> pieces_;  // libsentencepiece's piece of every id
  std::vector<float> scores_;
  std::vector<int> flags_;         // PDSERVE_SPM_* bits of every id
  std::vector<std::string> text_;  // PieceBytes of every id
  std::string chat_template_;
};

Vocabulary SentencePieceTokenizer::ExportVocabulary() const {
  Vocabulary vocab;
  for (int id = 0; id < vocab_size(); ++id) {
    vocab.types.push_back(TypeOf(id));
    vocab.pieces.push_back(IsByte(id) ? pieces_[id] : MetaspaceToSpace(pieces_[id]));
    vocab.scores.push_back(scores_[id]);
  }
  vocab.bos_id = bos_id();
  vocab.eos_id = eos_id();
  vocab.unk_id = unk_id_;
  vocab.add_dummy_prefix = add_dummy_prefix_;
  vocab.chat_template = chat_template_;
  return vocab;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path,
                                                                      std::string chat_template) {
  PDSERVE_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  const std::string_view bytes(reinterpret_cast<const char*>(file->data()), file->size());
  const absl::StatusOr<SpmShim>& shim = GetShim();
  if (!shim.ok()) {
    return absl::Status(shim.status().code(), absl::StrCat(path, ": ", shim.status().message()));
  }
  char error[kErrorSize] = "";
  pdserve_spm* spm = shim->load(bytes.data(), bytes.size(), error, sizeof(error));
  if (spm == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a usable SentencePiece model: ", error));
  }
  const int pieces = shim->piece_size(spm);
  const int bos = shim->bos_id(spm);
  const int eos = shim->eos_id(spm);
  if (pieces <= 0 || bos < 0 || eos < 0) {
    shim->free(spm);
    return absl::InvalidArgumentError(absl::StrCat(path, ": the SentencePiece model has ", pieces,
                                                   " pieces and BOS id ", bos, ", EOS id ", eos,
                                                   "; BOS and EOS control tokens are required"));
  }
  return std::unique_ptr<Tokenizer>(
      new SentencePieceTokenizer(*shim, spm, ReadAddDummyPrefix(bytes), std::move(chat_template)));
}

}  // namespace pdserve
