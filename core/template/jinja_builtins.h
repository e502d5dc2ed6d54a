// The built-in filters, tests, methods and globals of jinja::Template (listed in
// jinja_template.h). Errors are InvalidArgument and name the filter, test or method. Each takes
// the render's Budget (jinja_limits.h): what it builds is checked against max_string_bytes and
// max_items before it is built, and its data work beyond its operands and result (which the
// renderer charges) is charged as it goes (==, `in`, tojson, printing, methods' bound values).
#ifndef PDSERVE_CORE_TEMPLATE_JINJA_BUILTINS_H_
#define PDSERVE_CORE_TEMPLATE_JINJA_BUILTINS_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/template/jinja_limits.h"
#include "core/template/jinja_value.h"

namespace pdserve::jinja {

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value,
                                  const Arguments& args, Budget& budget);
absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& value, const Arguments& args,
                               Budget& budget);

// `object`'s method `name` bound to it; undefined when it has none. The method refers to
// `budget`: call it only while `budget` lives (within the render).
Value BoundMethod(const Value& object, const std::string& name, Budget& budget);

// raise_exception, range and strftime_now, referring to `budget` as BoundMethod does.
// (namespace() is the renderer's: it keeps the namespaces it makes, jinja_template.h.)
Object Globals(Budget& budget);

// Python's arithmetic and comparison on values: "+", "-", "*", "/", "//", "%", "<", ">", "<=",
// ">=", "in". InvalidArgument naming the operator and the kinds for unsupported operands, and
// for integer overflow.
absl::StatusOr<Value> BinaryOp(const std::string& op, const Value& left, const Value& right,
                               Budget& budget);

// sequence[index] for lists and strings (index < 0 counts from the end); undefined when out of
// range or for other kinds.
absl::StatusOr<Value> Index(const Value& sequence, int64_t index, Budget& budget);

// value[start:stop:step] for lists and strings (missing parts undefined).
absl::StatusOr<Value> Slice(const Value& value, const Value& start, const Value& stop,
                            const Value& step, Budget& budget);

}  // namespace pdserve::jinja

#endif  // PDSERVE_CORE_TEMPLATE_JINJA_BUILTINS_H_
