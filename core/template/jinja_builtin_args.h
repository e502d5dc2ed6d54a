// What the built-ins share (jinja_builtins.cc, jinja_strings.cc): their arguments, their errors
// and their charges to the render's Budget (jinja_limits.h) — the size checks and charges also
// serve the renderer (jinja_template.cc) for the values it builds itself.
#ifndef PDSERVE_CORE_TEMPLATE_JINJA_BUILTIN_ARGS_H_
#define PDSERVE_CORE_TEMPLATE_JINJA_BUILTIN_ARGS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/template/jinja_limits.h"
#include "core/template/jinja_value.h"

namespace pdserve::jinja {

// A built-in's error: InvalidArgument `what` (naming the filter, test or method).
absl::Status Error(std::string what);

// Keyword argument `name`, else `fallback`.
Value KeywordArg(const Arguments& args, const std::string& name, Value fallback = Value());

// Positional argument `i`, else keyword `name`, else `fallback`.
Value Arg(const Arguments& args, size_t i, const std::string& name, Value fallback = Value());

// Arg(args, i, name) as a string; an error naming `where` and the argument otherwise.
absl::StatusOr<std::string> StringArg(const Arguments& args, size_t i, const std::string& name,
                                      const std::string& where);

// Charges reading `v` (its WorkBytes).
absl::Status Read(const Value& v, Budget& budget);

// `v`'s size against max_string_bytes (a string) or max_items (a list or mapping).
absl::Status CheckSize(const Value& v, Budget& budget);

// `v`, just built: CheckSize, and charged.
absl::StatusOr<Value> New(Value v, Budget& budget);

// Appends `piece` to `*out` unless that makes it longer than max_string_bytes.
absl::Status Append(std::string_view piece, Budget& budget, std::string* out);

}  // namespace pdserve::jinja

#endif  // PDSERVE_CORE_TEMPLATE_JINJA_BUILTIN_ARGS_H_
