// Bounded, non-throwing reading of JSON files and typed access to their fields, with errors that
// name the file and the key (config.json, model.safetensors.index.json, ...). Stateless helpers.
#ifndef PDSERVE_CORE_BASE_JSON_FIELDS_H_
#define PDSERVE_CORE_BASE_JSON_FIELDS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace pdserve {

using Json = nlohmann::json;

// Parses `path` as a JSON object, nested at most 64 deep; InvalidArgument names the file.
absl::StatusOr<Json> ReadJsonFile(const std::string& path);

// The member `key` of `json`, or nullptr when it is absent or null.
const Json* Member(const Json& json, const char* key);

// InvalidArgument "<path>: "<key>" <problem>".
absl::Status FieldError(const std::string& path, const char* key, absl::string_view problem);

// Typed fields: the fallback when absent or null (an error when there is none), InvalidArgument
// when present with another type (or, for integers, outside int's range).
absl::StatusOr<int> IntField(const Json& json, const std::string& path, const char* key,
                             std::optional<int> fallback = std::nullopt);
absl::StatusOr<double> NumberField(const Json& json, const std::string& path, const char* key,
                                   double fallback);
absl::StatusOr<bool> BoolField(const Json& json, const std::string& path, const char* key,
                               bool fallback);
absl::StatusOr<std::string> StringField(const Json& json, const std::string& path, const char* key,
                                        const char* fallback);

// Writes `json` indented, invalid UTF-8 replaced.
absl::Status WriteJsonFile(const std::string& path, const nlohmann::ordered_json& json);

}  // namespace pdserve

#endif  // PDSERVE_CORE_BASE_JSON_FIELDS_H_
