#include "core/model/gguf_vocabulary.h"

#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"

namespace pdserve {
namespace {

constexpr char kTokenizerModel[] = "llama";

absl::StatusOr<TokenType> ToTokenType(const GgufFile& file, size_t id, int64_t value) {
  if (value == 0) return TokenType::kNormal;  // llama.cpp's "undefined"
  if (value < static_cast<int>(TokenType::kNormal) || value > static_cast<int>(TokenType::kByte)) {
    return file.Error(absl::StrCat("token ", id, " has token type ", value));
  }
  return static_cast<TokenType>(value);
}

// The optional per-token array `key`, which must have `n` elements when present.
absl::StatusOr<const GgufValue*> FindTokenArray(const GgufFile& file, const std::string& key,
                                                size_t n) {
  const GgufValue* v = file.FindValue(key);
  if (v != nullptr && (!v->is_array() || v->size() != n)) {
    return file.Error(
        absl::StrCat("metadata key '", key, "' is ", v->Describe(), ", expected an array of ", n));
  }
  return v;
}

absl::Status ReadTokenArrays(const GgufFile& file, Vocabulary& vocab) {
  const size_t n = vocab.pieces.size();
  vocab.scores.assign(n, 0.0f);
  vocab.types.assign(n, TokenType::kNormal);
  PDSERVE_ASSIGN_OR_RETURN(const GgufValue* scores,
                           FindTokenArray(file, "tokenizer.ggml.scores", n));
  if (scores != nullptr) {
    std::optional<std::vector<float>> values = scores->AsFloatArray();
    if (!values) return file.Error("tokenizer.ggml.scores is not an array of floats");
    vocab.scores = std::move(*values);
  }
  PDSERVE_ASSIGN_OR_RETURN(const GgufValue* types,
                           FindTokenArray(file, "tokenizer.ggml.token_type", n));
  if (types != nullptr) {
    std::optional<std::vector<int64_t>> values = types->AsIntArray();
    if (!values) return file.Error("tokenizer.ggml.token_type is not an array of integers");
    for (size_t i = 0; i < n; ++i) {
      PDSERVE_ASSIGN_OR_RETURN(vocab.types[i], ToTokenType(file, i, (*values)[i]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> GetTokenId(const GgufFile& file, const std::string& key, int fallback) {
  if (file.FindValue(key) == nullptr) return fallback;
  PDSERVE_ASSIGN_OR_RETURN(int64_t id, file.GetInt(key));
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
    return file.Error(absl::StrCat("metadata key '", key, "' = ", id, " is out of range"));
  }
  return static_cast<int>(id);
}

}  // namespace

absl::StatusOr<Vocabulary> ReadGgufVocabulary(const GgufFile& file) {
  PDSERVE_ASSIGN_OR_RETURN(std::string model, file.GetString("tokenizer.ggml.model"));
  if (model != kTokenizerModel) {
    return file.Error(absl::StrCat("tokenizer.ggml.model is '", model, "'; only '", kTokenizerModel,
                                   "' (SentencePiece-style) is supported"));
  }
  const GgufValue* tokens = file.FindValue("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->AsStringArray() == nullptr) {
    return file.Error("metadata key 'tokenizer.ggml.tokens' is missing or not an array of strings");
  }
  Vocabulary vocab;
  for (const std::string& piece : *tokens->AsStringArray()) {
    vocab.pieces.push_back(MetaspaceToSpace(piece));
  }
  PDSERVE_RETURN_IF_ERROR(ReadTokenArrays(file, vocab));
  PDSERVE_ASSIGN_OR_RETURN(vocab.bos_id, GetTokenId(file, "tokenizer.ggml.bos_token_id", 1));
  PDSERVE_ASSIGN_OR_RETURN(vocab.eos_id, GetTokenId(file, "tokenizer.ggml.eos_token_id", 2));
  PDSERVE_ASSIGN_OR_RETURN(vocab.unk_id, GetTokenId(file, "tokenizer.ggml.unknown_token_id", 0));
  if (file.FindValue("tokenizer.ggml.add_space_prefix") != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(vocab.add_dummy_prefix,
                             file.GetBool("tokenizer.ggml.add_space_prefix"));
  }
  if (absl::Status s = vocab.Validate(); !s.ok()) return file.Error(s.message());
  return vocab;
}

absl::Status AddGgufVocabulary(GgufWriter& out, const Vocabulary& vocab) {
  std::vector<std::string> pieces;
  std::vector<int32_t> types;
  for (int i = 0; i < vocab.size(); ++i) {
    // Byte tokens in llama.cpp's spelling ("<0x0A>", upper case): it looks them up by that name.
    pieces.push_back(vocab.types[i] == TokenType::kByte
                         ? absl::StrFormat("<0x%02X>", ParseBytePiece(vocab.pieces[i]))
                         : SpaceToMetaspace(vocab.pieces[i]));
    types.push_back(static_cast<int32_t>(vocab.types[i]));
  }
  auto u32 = [](int v) { return GgufValue::Of(static_cast<uint32_t>(v)); };
  for (auto& [key, value] : std::vector<std::pair<std::string, GgufValue>>{
           {"tokenizer.ggml.model", GgufValue::Of(std::string(kTokenizerModel))},
           {"tokenizer.ggml.tokens", GgufValue::ArrayOf(std::move(pieces))},
           {"tokenizer.ggml.scores", GgufValue::ArrayOf(vocab.scores)},
           {"tokenizer.ggml.token_type", GgufValue::ArrayOf(types)},
           {"tokenizer.ggml.bos_token_id", u32(vocab.bos_id)},
           {"tokenizer.ggml.eos_token_id", u32(vocab.eos_id)},
           {"tokenizer.ggml.unknown_token_id", u32(vocab.unk_id)},
           {"tokenizer.ggml.add_bos_token", GgufValue::Of(true)},
           {"tokenizer.ggml.add_space_prefix", GgufValue::Of(vocab.add_dummy_prefix)}}) {
    PDSERVE_RETURN_IF_ERROR(out.SetMetadata(std::move(key), std::move(value)));
  }
  return absl::OkStatus();
}

}  // namespace pdserve
