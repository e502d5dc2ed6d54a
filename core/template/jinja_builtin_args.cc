#include "core/template/jinja_builtin_args.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace pdserve::jinja {

absl::Status Error(std::string what) { return absl::InvalidArgumentError(std::move(what)); }

Value KeywordArg(const Arguments& args, const std::string& name, Value fallback) {
  for (const auto& [key, value] : args.keyword) {
    if (key == name) return value;
  }
  return fallback;
}

Value Arg(const Arguments& args, size_t i, const std::string& name, Value fallback) {
  if (i < args.positional.size()) return args.positional[i];
  return KeywordArg(args, name, std::move(fallback));
}

absl::StatusOr<std::string> StringArg(const Arguments& args, size_t i, const std::string& name,
                                      const std::string& where) {
  const Value v = Arg(args, i, name);
  if (!v.is_string()) return Error(absl::StrCat(where, ": argument '", name, "' must be a string"));
  return v.AsString();
}

absl::Status Read(const Value& v, Budget& budget) { return budget.Work(v.WorkBytes()); }

absl::Status CheckSize(const Value& v, Budget& budget) {
  if (v.is_string()) return budget.CheckString(static_cast<int64_t>(v.AsString().size()));
  if (v.is_array() || v.is_object()) return budget.CheckItems(v.WorkBytes() / kWorkBytesPerItem);
  return absl::OkStatus();
}

absl::StatusOr<Value> New(Value v, Budget& budget) {
  PDSERVE_RETURN_IF_ERROR(CheckSize(v, budget));
  PDSERVE_RETURN_IF_ERROR(budget.Work(v.WorkBytes()));
  return v;
}

absl::Status Append(std::string_view piece, Budget& budget, std::string* out) {
  PDSERVE_RETURN_IF_ERROR(budget.CheckString(static_cast<int64_t>(out->size() + piece.size())));
  out->append(piece);
  return absl::OkStatus();
}

}  // namespace pdserve::jinja
