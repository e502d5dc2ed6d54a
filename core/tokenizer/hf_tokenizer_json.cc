#include "core/tokenizer/hf_tokenizer_json.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/base/json_fields.h"
#include "core/base/status_macros.h"
#include "core/tokenizer/byte_level.h"

namespace pdserve {
namespace {

// A parsed JSON file whose errors name the file and the field.
class JsonFile {
 public:
  static absl::StatusOr<JsonFile> Open(const std::string& path) {
    PDSERVE_ASSIGN_OR_RETURN(Json json, ReadJsonFile(path));
    return JsonFile(path, std::move(json));
  }

  const std::string& path() const { return path_; }
  const Json& json() const { return json_; }
  absl::Status Error(const char* field, absl::string_view what) const {
    return FieldError(path_, field, what);
  }

 private:
  JsonFile(std::string path, Json json) : path_(std::move(path)), json_(std::move(json)) {}
  std::string path_;
  Json json_;
};

// Ids above this are refused: no vocabulary is near it, and a vocabulary is sized by its ids.
constexpr int64_t kMaxTokenId = 16'000'000;

// The largest id the file may name: a vocabulary is sized by its largest id (gaps padded), so a
// small file must not claim a huge one. Real vocabularies are dense: twice the entries the file
// holds, plus room for reserved ranges, is far beyond any of them.
int64_t MaxTokenId(const JsonFile& file) {
  const Json& model = file.json().value("model", Json());
  const Json& pieces = model.is_object() ? model.value("vocab", Json()) : Json();
  const Json& added = file.json().value("added_tokens", Json());
  const int64_t entries = static_cast<int64_t>((pieces.is_object() ? pieces.size() : 0) +
                                               (added.is_array() ? added.size() : 0));
  return std::min(kMaxTokenId, 2 * entries + 1024);
}

// Sets token `id` (grown into the vocabulary, gaps unused); false when `id` is out of [0, max_id].
bool SetToken(const Json& id_json, int64_t max_id, std::string piece, TokenType type,
              Vocabulary& vocab) {
  if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
      id_json.get<int64_t>() > max_id) {
    return false;
  }
  const size_t id = id_json.get<size_t>();
  if (id >= vocab.pieces.size()) {
    vocab.pieces.resize(id + 1);
    vocab.types.resize(id + 1, TokenType::kUnused);
  }
  vocab.pieces[id] = std::move(piece);
  vocab.types[id] = type;
  return true;
}

bool IsNullOrEmpty(const Json& j, const char* key) {
  return !j.contains(key) || j[key].is_null() ||
         (j[key].is_string() && j[key].get<std::string>().empty());
}

absl::Status ReadNormalizer(const JsonFile& file, Vocabulary& vocab) {
  const Json& n = file.json().value("normalizer", Json());
  if (n.is_null()) return absl::OkStatus();
  const std::string type = n.value("type", "");
  if (type == "NFC") {
    vocab.normalize_nfc = true;
    return absl::OkStatus();
  }
  return file.Error("normalizer",
                    absl::StrCat("of type '", type, "' is not supported (none or NFC)"));
}

absl::Status ReadPreTokenizer(const JsonFile& file, Vocabulary& vocab) {
  const Json& p = file.json().value("pre_tokenizer", Json());
  const auto is_byte_level = [](const Json& j, bool use_regex) {
    return j.is_object() && j.value("type", "") == "ByteLevel" &&
           j.value("use_regex", true) == use_regex && !j.value("add_prefix_space", false);
  };
  if (is_byte_level(p, /*use_regex=*/true)) {
    vocab.pre_tokenizer = PreTokenizer::kGpt2;
    return absl::OkStatus();
  }
  const Json& steps = p.is_object() ? p.value("pretokenizers", Json()) : Json();
  if (p.value("type", "") == "Sequence" && steps.is_array() && steps.size() == 2 &&
      steps[0].value("type", "") == "Split" && steps[0].value("behavior", "") == "Isolated" &&
      !steps[0].value("invert", false) && steps[0].contains("pattern") &&
      steps[0]["pattern"].value("Regex", Json()).is_string() &&
      is_byte_level(steps[1], /*use_regex=*/false)) {
    absl::StatusOr<PreTokenizer> kind =
        PreTokenizerFromRegex(steps[0]["pattern"]["Regex"].get<std::string>());
    if (!kind.ok()) return file.Error("pre_tokenizer", kind.status().message());
    vocab.pre_tokenizer = *kind;
    return absl::OkStatus();
  }
  return file.Error("pre_tokenizer", absl::StrCat(p.dump().substr(0, 200),
                                                  " is not Split(regex)+ByteLevel or ByteLevel"));
}

absl::Status ReadModel(const JsonFile& file, int64_t max_id, Vocabulary& vocab) {
  const Json& m = file.json().value("model", Json());
  if (!m.is_object() || m.value("type", "") != "BPE") {
    return file.Error("model.type", "is not 'BPE'");
  }
  if (m.value("byte_fallback", false)) return file.Error("model.byte_fallback", "is not supported");
  if (!m.value("dropout", Json()).is_null()) return file.Error("model.dropout", "is not supported");
  if (!IsNullOrEmpty(m, "continuing_subword_prefix") || !IsNullOrEmpty(m, "end_of_word_suffix")) {
    return file.Error("model", "has a subword prefix or suffix, which is not supported");
  }
  vocab.ignore_merges = m.value("ignore_merges", false);
  const Json& pieces = m.value("vocab", Json());
  if (!pieces.is_object()) return file.Error("model.vocab", "is not an object");
  for (const auto& [spelled, id_json] : pieces.items()) {
    absl::StatusOr<std::string> bytes = FromByteLevel(spelled);
    if (!bytes.ok()) return file.Error("model.vocab", bytes.status().message());
    if (!SetToken(id_json, max_id, std::move(*bytes), TokenType::kNormal, vocab)) {
      return file.Error("model.vocab", absl::StrCat("entry '", spelled, "' has a bad id"));
    }
  }
  const Json& merges = m.value("merges", Json());
  if (!merges.is_array()) return file.Error("model.merges", "is not an array");
  for (const Json& merge : merges) {
    std::string left, right;
    if (merge.is_string()) {
      const std::string s = merge.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos)
        left = s;
      else
        left = s.substr(0, space), right = s.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>(), right = merge[1].get<std::string>();
    }
    absl::StatusOr<std::string> l = FromByteLevel(left), r = FromByteLevel(right);
    if (left.empty() || right.empty() || !l.ok() || !r.ok()) {
      return file.Error("model.merges", absl::StrCat("entry ", vocab.merges.size(), " ",
                                                     merge.dump(), " is not two pieces"));
    }
    vocab.merges.emplace_back(std::move(*l), std::move(*r));
  }
  return absl::OkStatus();
}

absl::Status ReadAddedTokens(const JsonFile& file, int64_t max_id, Vocabulary& vocab) {
  const Json& added = file.json().value("added_tokens", Json::array());
  if (!added.is_array()) return file.Error("added_tokens", "is not an array");
  for (const Json& t : added) {
    const auto malformed = [&] {
      return file.Error("added_tokens", absl::StrCat("entry ", t.dump(), " is malformed"));
    };
    if (!t.is_object() || !t.value("content", Json()).is_string()) return malformed();
    const std::string content = t["content"].get<std::string>();
    if (t.value("lstrip", false) || t.value("rstrip", false) || t.value("single_word", false)) {
      return file.Error("added_tokens", absl::StrCat("token '", content,
                                                     "' strips spaces or matches whole words, "
                                                     "which is not supported"));
    }
    const TokenType type =
        t.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
    if (!SetToken(t.value("id", Json()), max_id, content, type, vocab)) return malformed();
  }
  return absl::OkStatus();
}

// A template that starts with a special token starts every encoding with it.
bool PostProcessorAddsBos(const Json& p) {
  if (!p.is_object()) return false;
  if (p.value("type", "") == "Sequence") {
    for (const Json& step : p.value("processors", Json::array())) {
      if (PostProcessorAddsBos(step)) return true;
    }
    return false;
  }
  if (p.value("type", "") != "TemplateProcessing") return false;
  const Json& single = p.value("single", Json::array());
  return single.is_array() && !single.empty() && single[0].contains("SpecialToken");
}

// A tokenizer_config.json special token: a string, {"content": ...}, or null.
std::string SpecialTokenText(const Json& config, const char* key) {
  const Json& v = config.value(key, Json());
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.value("content", Json()).is_string()) return v["content"];
  return "";
}

// tokenizer_config.json's chat_template: a string, or a list of {name, template} of which the
// one named "default" is taken.
absl::StatusOr<std::string> ChatTemplateOf(const JsonFile& file) {
  const Json& t = file.json().value("chat_template", Json());
  if (t.is_null()) return std::string();
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const Json& named : t) {
      if (named.is_object() && named.value("name", "") == "default" &&
          named.value("template", Json()).is_string()) {
        return named["template"].get<std::string>();
      }
    }
  }
  return file.Error("chat_template",
                    "is neither a string nor a list with a template named "
                    "'default'");
}

// The special tokens tokenizer_config.json (`config`, an empty object when there is none) names.
absl::Status ReadSpecialIds(const JsonFile& file, const Json& config,
                            const std::string& config_path, Vocabulary& vocab) {
  const auto find = [&](const std::string& text) {
    for (int id = 0; id < vocab.size(); ++id) {
      if (!text.empty() && vocab.pieces[id] == text && vocab.types[id] != TokenType::kNormal) {
        return id;
      }
    }
    return -1;
  };
  vocab.eos_id = find(SpecialTokenText(config, "eos_token"));
  if (vocab.eos_id < 0) {
    return file.Error("eos_token", absl::StrCat("is not an added token named in '", config_path,
                                                "' (eos_token)"));
  }
  vocab.bos_id = find(SpecialTokenText(config, "bos_token"));
  vocab.add_bos =
      vocab.bos_id >= 0 && PostProcessorAddsBos(file.json().value("post_processor", Json()));
  if (config.value("add_bos_token", Json()).is_boolean()) {
    vocab.add_bos = vocab.bos_id >= 0 && config["add_bos_token"].get<bool>();
  }
  if (vocab.bos_id < 0) vocab.bos_id = vocab.eos_id;
  vocab.unk_id = vocab.eos_id;  // byte-level BPE has no unknown token
  return absl::OkStatus();
}

// The readers above call nlohmann's value(), which throws type_error when the JSON it looks in is
// not an object or the key holds another type than the default's: a malformed file.
absl::Status MalformedJson(const std::string& path, const nlohmann::json::exception& e) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": malformed: ", e.what()));
}

}  // namespace

absl::StatusOr<std::string> ReadHfChatTemplate(const std::string& path) try {
  if (!std::filesystem::exists(path)) return std::string();
  PDSERVE_ASSIGN_OR_RETURN(JsonFile config, JsonFile::Open(path));
  return ChatTemplateOf(config);
} catch (const nlohmann::json::exception& e) {
  return MalformedJson(path, e);
}

absl::StatusOr<Vocabulary> ReadHfTokenizerJson(const std::string& path) try {
  PDSERVE_ASSIGN_OR_RETURN(JsonFile file, JsonFile::Open(path));
  Vocabulary vocab;
  vocab.model = TokenizerModel::kByteLevelBpe;
  vocab.add_dummy_prefix = false;
  const int64_t max_id = MaxTokenId(file);
  PDSERVE_RETURN_IF_ERROR(ReadModel(file, max_id, vocab));
  PDSERVE_RETURN_IF_ERROR(ReadAddedTokens(file, max_id, vocab));
  PDSERVE_RETURN_IF_ERROR(ReadNormalizer(file, vocab));
  PDSERVE_RETURN_IF_ERROR(ReadPreTokenizer(file, vocab));
  PadVocabulary(vocab, vocab.size());  // names the ids the file leaves free
  const std::string config_path =
      (std::filesystem::path(path).parent_path() / "tokenizer_config.json").string();
  if (!std::filesystem::exists(config_path)) {
    PDSERVE_RETURN_IF_ERROR(ReadSpecialIds(file, Json::object(), config_path, vocab));
  } else {
    PDSERVE_ASSIGN_OR_RETURN(JsonFile config, JsonFile::Open(config_path));
    PDSERVE_RETURN_IF_ERROR(ReadSpecialIds(file, config.json(), config_path, vocab));
    PDSERVE_ASSIGN_OR_RETURN(vocab.chat_template, ChatTemplateOf(config));
  }
  if (absl::Status s = vocab.Validate(); !s.ok()) return file.Error("vocabulary", s.message());
  return vocab;
} catch (const nlohmann::json::exception& e) {
  return MalformedJson(path, e);
}

}  // namespace pdserve
