#include "core/base/json_fields.h"

#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/base/mapped_file.h"
#include "core/base/status_macros.h"

namespace pdserve {
namespace {

constexpr int kMaxJsonDepth = 64;

}  // namespace

absl::StatusOr<Json> ReadJsonFile(const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  const auto* text = reinterpret_cast<const char*>(file->data());
  bool too_deep = false;
  // Values nested too deeply are dropped as they are parsed, bounding memory; then rejected.
  Json::parser_callback_t limit_depth = [&too_deep](int depth, Json::parse_event_t, Json&) {
    if (depth <= kMaxJsonDepth) return true;
    too_deep = true;
    return false;
  };
  Json json = Json::parse(text, text + file->size(), limit_depth, /*allow_exceptions=*/false);
  if (json.is_discarded() || too_deep) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return json;
}

// The member `key` of `json`, or nullptr when it is absent or null.
const Json* Member(const Json& json, const char* key) {
  auto it = json.find(key);
  return it == json.end() || it->is_null() ? nullptr : &*it;
}

absl::Status FieldError(const std::string& path, const char* key, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": \"", key, "\" ", problem));
}

absl::StatusOr<int> IntField(const Json& json, const std::string& path, const char* key,
                             std::optional<int> fallback) {
  const Json* value = Member(json, key);
  if (value == nullptr) {
    if (fallback) return *fallback;
    return FieldError(path, key, "is missing");
  }
  if (!value->is_number_integer()) return FieldError(path, key, "is not an integer");
  constexpr int64_t kMin = std::numeric_limits<int>::min(), kMax = std::numeric_limits<int>::max();
  const bool in_range = value->is_number_unsigned()
                            ? value->get<uint64_t>() <= static_cast<uint64_t>(kMax)
                            : value->get<int64_t>() >= kMin && value->get<int64_t>() <= kMax;
  if (!in_range) {
    return FieldError(path, key, "is out of range");
  }
  return static_cast<int>(value->get<int64_t>());
}

absl::StatusOr<double> NumberField(const Json& json, const std::string& path, const char* key,
                                   double fallback) {
  const Json* value = Member(json, key);
  if (value == nullptr) return fallback;
  if (!value->is_number()) return FieldError(path, key, "is not a number");
  return value->get<double>();
}

absl::StatusOr<bool> BoolField(const Json& json, const std::string& path, const char* key,
                               bool fallback) {
  const Json* value = Member(json, key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) return FieldError(path, key, "is not a boolean");
  return value->get<bool>();
}

absl::StatusOr<std::string> StringField(const Json& json, const std::string& path, const char* key,
                                        const char* fallback) {
  const Json* value = Member(json, key);
  if (value == nullptr) {
    if (fallback != nullptr) return std::string(fallback);
    return FieldError(path, key, "is missing");
  }
  if (!value->is_string()) return FieldError(path, key, "is not a string");
  return value->get<std::string>();
}

absl::Status WriteJsonFile(const std::string& path, const nlohmann::ordered_json& json) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot create '", path, "'"));
  out << json.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("failed writing '", path, "'"));
  return absl::OkStatus();
}

}  // namespace pdserve
