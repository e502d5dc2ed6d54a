#include "core/formats/gguf_vocabulary.h"

#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "core/tokenizer/byte_level.h"

namespace pdserve {
namespace {

constexpr char kSentencePieceModel[] = "llama";
constexpr char kByteLevelBpeModel[] = "gpt2";

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

// Model "gpt2": tokens in the byte-level alphabet (control and user-defined ones as text),
// merges "left right" in priority order; ignore_merges and NFC follow from tokenizer.ggml.pre
// (Llama 3 and Qwen2 respectively, as their Hugging Face tokenizers run).
absl::Status ReadByteLevelBpe(const GgufFile& file, Vocabulary& vocab) {
  vocab.model = TokenizerModel::kByteLevelBpe;
  vocab.scores.clear();
  for (int id = 0; id < vocab.size(); ++id) {
    if (vocab.types[id] != TokenType::kNormal) continue;
    absl::StatusOr<std::string> bytes = FromByteLevel(vocab.pieces[id]);
    if (!bytes.ok()) return file.Error(absl::StrCat("token ", id, ": ", bytes.status().message()));
    vocab.pieces[id] = std::move(*bytes);
  }
  const GgufValue* merges = file.FindValue("tokenizer.ggml.merges");
  if (merges == nullptr || merges->AsStringArray() == nullptr) {
    return file.Error("metadata key 'tokenizer.ggml.merges' is missing or not an array of strings");
  }
  for (const std::string& merge : *merges->AsStringArray()) {
    const size_t space = merge.find(' ', 1);
    absl::StatusOr<std::string> left = FromByteLevel(merge.substr(0, space));
    absl::StatusOr<std::string> right = space == std::string::npos
                                            ? absl::InvalidArgumentError("no space")
                                            : FromByteLevel(merge.substr(space + 1));
    if (!left.ok() || !right.ok()) {
      return file.Error(absl::StrCat("tokenizer.ggml.merges entry ", vocab.merges.size(), " '",
                                     merge, "' is not two byte-level pieces"));
    }
    vocab.merges.emplace_back(std::move(*left), std::move(*right));
  }
  std::string pre = "gpt-2";
  if (file.FindValue("tokenizer.ggml.pre") != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(pre, file.GetString("tokenizer.ggml.pre"));
  }
  absl::StatusOr<PreTokenizer> kind = PreTokenizerFromGgufName(pre);
  if (!kind.ok()) return file.Error(kind.status().message());
  vocab.pre_tokenizer = *kind;
  vocab.ignore_merges = *kind == PreTokenizer::kLlama3;
  vocab.normalize_nfc = *kind == PreTokenizer::kQwen2;
  vocab.add_dummy_prefix = false;
  vocab.add_bos = *kind == PreTokenizer::kLlama3;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Vocabulary> ReadGgufVocabulary(const GgufFile& file) {
  PDSERVE_ASSIGN_OR_RETURN(std::string model, file.GetString("tokenizer.ggml.model"));
  if (model != kSentencePieceModel && model != kByteLevelBpeModel) {
    return file.Error(absl::StrCat("tokenizer.ggml.model is '", model, "'; supported: '",
                                   kSentencePieceModel, "' (SentencePiece-style), '",
                                   kByteLevelBpeModel, "' (byte-level BPE)"));
  }
  const GgufValue* tokens = file.FindValue("tokenizer.ggml.tokens");
  if (tokens == nullptr || tokens->AsStringArray() == nullptr) {
    return file.Error("metadata key 'tokenizer.ggml.tokens' is missing or not an array of strings");
  }
  Vocabulary vocab;
  vocab.pieces = *tokens->AsStringArray();
  PDSERVE_RETURN_IF_ERROR(ReadTokenArrays(file, vocab));
  // llama.cpp's defaults: 1/2/0 for SentencePiece, 11 (GPT-2's "," ) for byte-level BPE.
  const bool bpe = model == kByteLevelBpeModel;
  PDSERVE_ASSIGN_OR_RETURN(vocab.bos_id,
                           GetTokenId(file, "tokenizer.ggml.bos_token_id", bpe ? 11 : 1));
  PDSERVE_ASSIGN_OR_RETURN(vocab.eos_id,
                           GetTokenId(file, "tokenizer.ggml.eos_token_id", bpe ? 11 : 2));
  PDSERVE_ASSIGN_OR_RETURN(vocab.unk_id, GetTokenId(file, "tokenizer.ggml.unknown_token_id", 0));
  if (bpe) {
    PDSERVE_RETURN_IF_ERROR(ReadByteLevelBpe(file, vocab));
  } else {
    for (std::string& piece : vocab.pieces) piece = MetaspaceToSpace(piece);
  }
  if (file.FindValue("tokenizer.ggml.add_space_prefix") != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(vocab.add_dummy_prefix,
                             file.GetBool("tokenizer.ggml.add_space_prefix"));
  }
  if (file.FindValue("tokenizer.ggml.add_bos_token") != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(vocab.add_bos, file.GetBool("tokenizer.ggml.add_bos_token"));
  }
  if (file.FindValue("tokenizer.chat_template") != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(vocab.chat_template, file.GetString("tokenizer.chat_template"));
  }
  if (absl::Status s = vocab.Validate(); !s.ok()) return file.Error(s.message());
  return vocab;
}

absl::Status AddGgufVocabulary(GgufWriter& out, const Vocabulary& vocab) {
  const bool bpe = vocab.model == TokenizerModel::kByteLevelBpe;
  std::vector<std::string> pieces;
  std::vector<int32_t> types;
  for (int i = 0; i < vocab.size(); ++i) {
    const std::string& piece = vocab.pieces[i];
    if (bpe) {
      pieces.push_back(vocab.types[i] == TokenType::kNormal ? ToByteLevel(piece) : piece);
    } else if (vocab.types[i] == TokenType::kByte) {
      // llama.cpp's spelling ("<0x0A>", upper case): it looks byte tokens up by that name.
      pieces.push_back(absl::StrFormat("<0x%02X>", ParseBytePiece(piece)));
    } else {
      pieces.push_back(SpaceToMetaspace(piece));
    }
    types.push_back(static_cast<int32_t>(vocab.types[i]));
  }
  auto u32 = [](int v) { return GgufValue::Of(static_cast<uint32_t>(v)); };
  // In llama.cpp's order.
  std::vector<std::pair<std::string, GgufValue>> keys;
  keys.emplace_back("tokenizer.ggml.model",
                    GgufValue::Of(std::string(bpe ? kByteLevelBpeModel : kSentencePieceModel)));
  if (bpe) {
    keys.emplace_back("tokenizer.ggml.pre",
                      GgufValue::Of(std::string(GgufName(vocab.pre_tokenizer))));
  }
  keys.emplace_back("tokenizer.ggml.tokens", GgufValue::ArrayOf(std::move(pieces)));
  if (!bpe) keys.emplace_back("tokenizer.ggml.scores", GgufValue::ArrayOf(vocab.scores));
  keys.emplace_back("tokenizer.ggml.token_type", GgufValue::ArrayOf(types));
  if (bpe) {
    std::vector<std::string> merges;
    for (const auto& [left, right] : vocab.merges) {
      merges.push_back(absl::StrCat(ToByteLevel(left), " ", ToByteLevel(right)));
    }
    keys.emplace_back("tokenizer.ggml.merges", GgufValue::ArrayOf(std::move(merges)));
  }
  keys.emplace_back("tokenizer.ggml.bos_token_id", u32(vocab.bos_id));
  keys.emplace_back("tokenizer.ggml.eos_token_id", u32(vocab.eos_id));
  if (!bpe) keys.emplace_back("tokenizer.ggml.unknown_token_id", u32(vocab.unk_id));
  keys.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::Of(vocab.add_bos));
  if (!bpe) {
    keys.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::Of(vocab.add_dummy_prefix));
  }
  if (!vocab.chat_template.empty()) {
    keys.emplace_back("tokenizer.chat_template", GgufValue::Of(vocab.chat_template));
  }
  for (auto& [key, value] : keys) {
    PDSERVE_RETURN_IF_ERROR(out.SetMetadata(std::move(key), std::move(value)));
  }
  return absl::OkStatus();
}

}  // namespace pdserve
