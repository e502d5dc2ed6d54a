#include "core/tokenizer/llama2c_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/base/byte_reader.h"
#include "core/base/mapped_file.h"
#include "core/base/status_macros.h"
#include "core/tokenizer/merge_tokenizer.h"

namespace pdserve {
namespace {

constexpr int32_t kMaxPieceBytes = 1 << 16;
constexpr int kUnkId = 0, kBosId = 1, kEosId = 2;
constexpr const char* kSpecialPieces[] = {"<unk>", "<s>", "</s>"};

TokenType TypeOf(int id, const std::string& piece) {
  if (id == kUnkId) return TokenType::kUnknown;
  if (id == kBosId || id == kEosId) return TokenType::kControl;
  return ParseBytePiece(piece) >= 0 ? TokenType::kByte : TokenType::kNormal;
}

}  // namespace

absl::StatusOr<Vocabulary> LoadLlama2cVocabulary(const std::string& path, int expected_vocab_size) {
  PDSERVE_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  ByteReader reader(file->bytes(), path);
  PDSERVE_ASSIGN_OR_RETURN(int32_t max_len, reader.Read<int32_t>("max_token_length"));
  if (max_len <= 0 || max_len > kMaxPieceBytes) {
    return reader.Error(absl::StrCat("not a llama2.c tokenizer: max_token_length ", max_len));
  }
  Vocabulary vocab;
  while (reader.remaining() > 0) {
    const std::string what = absl::StrCat("token ", vocab.size());
    PDSERVE_ASSIGN_OR_RETURN(float score, reader.Read<float>(what + " score"));
    PDSERVE_ASSIGN_OR_RETURN(int32_t len, reader.Read<int32_t>(what + " length"));
    if (len < 0 || len > max_len || !std::isfinite(score)) {
      return reader.Error(absl::StrCat(what, " has length ", len, " and score ", score,
                                       " (max_token_length ", max_len, ")"));
    }
    PDSERVE_ASSIGN_OR_RETURN(std::string piece, reader.ReadString(len, what + " bytes"));
    vocab.types.push_back(TypeOf(vocab.size(), piece));
    if (vocab.types.back() != TokenType::kNormal && vocab.types.back() != TokenType::kByte) {
      piece = kSpecialPieces[vocab.size()];  // llama2.c writes "\n<s>\n"; other formats "<s>"
    }
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
  }
  if (expected_vocab_size > 0 && vocab.size() != expected_vocab_size) {
    return reader.Error(
        absl::StrCat("holds ", vocab.size(), " tokens, the model expects ", expected_vocab_size));
  }
  if (vocab.size() <= kEosId) {
    return reader.Error(absl::StrCat("holds only ", vocab.size(), " tokens"));
  }
  vocab.unk_id = kUnkId;
  vocab.bos_id = kBosId;
  vocab.eos_id = kEosId;
  PDSERVE_RETURN_IF_ERROR(vocab.Validate());
  return vocab;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::string& path,
                                                                int expected_vocab_size) {
  PDSERVE_ASSIGN_OR_RETURN(Vocabulary vocab, LoadLlama2cVocabulary(path, expected_vocab_size));
  PDSERVE_ASSIGN_OR_RETURN(auto tokenizer, MergeTokenizer::Create(std::move(vocab)));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

absl::Status WriteLlama2cTokenizer(const std::string& path, const Vocabulary& vocab) {
  PDSERVE_RETURN_IF_ERROR(vocab.Validate());
  if (vocab.model != TokenizerModel::kSentencePiece) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path,
        "': a byte-level BPE vocabulary has no llama2.c tokenizer.bin form (no merges)"));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot create '", path, "'"));
  int32_t max_len = 1;
  for (const std::string& p : vocab.pieces) max_len = std::max<int32_t>(max_len, p.size());
  out.write(reinterpret_cast<const char*>(&max_len), sizeof(max_len));
  for (int i = 0; i < vocab.size(); ++i) {
    int32_t len = static_cast<int32_t>(vocab.pieces[i].size());
    out.write(reinterpret_cast<const char*>(&vocab.scores[i]), sizeof(float));
    out.write(reinterpret_cast<const char*>(&len), sizeof(len));
    out.write(vocab.pieces[i].data(), len);
  }
  out.close();
  return out ? absl::OkStatus() : absl::InternalError(absl::StrCat("failed writing '", path, "'"));
}

}  // namespace pdserve
