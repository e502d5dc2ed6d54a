// The built-in filters, tests, methods and globals of jinja::Template (listed in
// jinja_template.h). Errors are InvalidArgument and name the filter, test or method.
#ifndef PDSERVE_CORE_TEMPLATE_JINJA_BUILTINS_H_
#define PDSERVE_CORE_TEMPLATE_JINJA_BUILTINS_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/template/jinja_value.h"

namespace pdserve::jinja {

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value,
                                  const Arguments& args);
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& value, const Arguments& args);

// `object`'s method `name` bound to it; undefined when it has none.
Value BoundMethod(const Value& object, const std::string& name);

// raise_exception, namespace, range and strftime_now.
Object Globals();

// Python's arithmetic and comparison on values: "+", "-", "*", "/", "//", "%", "<", ">", "<=",
// ">=", "in". InvalidArgument naming the operator and the kinds for unsupported operands.
absl::StatusOr<Value> BinaryOp(const std::string& op, const Value& left, const Value& right);

// value[start:stop:step] for lists and strings (missing parts undefined).
absl::StatusOr<Value> Slice(const Value& value, const Value& start, const Value& stop,
                            const Value& step);

}  // namespace pdserve::jinja

#endif  // PDSERVE_CORE_TEMPLATE_JINJA_BUILTINS_H_
