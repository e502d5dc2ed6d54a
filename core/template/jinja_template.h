// jinja::Template: a Jinja template parsed once (jinja_parser.h) and rendered many times, with
// the built-ins chat templates use. Globals: raise_exception(message) (rendering fails with the
// message), namespace(...), range(...), strftime_now(format). Filters: trim, length/count,
// tojson(indent), upper, lower, capitalize, title, first, last, join, default/d, list, string,
// int, float, replace, items, reverse, safe, abs, map(attribute=), selectattr, rejectattr.
// Tests: defined, undefined, none, string, number, integer, float, boolean, mapping, iterable,
// sequence, callable, true, false, odd, even, divisibleby, eq/equalto, ne, in, lower, upper.
// String methods: strip, lstrip, rstrip, split, startswith, endswith, upper, lower, replace,
// title, capitalize, count, find; mapping methods: items, keys, values, get. Undefined values
// print as "" and are false; their attributes are an error, as in Jinja. Immutable after Parse;
// Render is thread-safe.
#ifndef PDSERVE_CORE_TEMPLATE_JINJA_TEMPLATE_H_
#define PDSERVE_CORE_TEMPLATE_JINJA_TEMPLATE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/template/jinja_ast.h"
#include "core/template/jinja_value.h"

namespace pdserve::jinja {

class Template {
 public:
  // InvalidArgument naming the line and construct (see ParseTemplate).
  static absl::StatusOr<Template> Parse(std::string_view source);

  // Renders with `context`'s entries as variables. InvalidArgument naming the line for a type
  // error, an unsupported filter, test or method, raise_exception, or output over 16 MiB.
  absl::StatusOr<std::string> Render(const Object& context) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace pdserve::jinja

#endif  // PDSERVE_CORE_TEMPLATE_JINJA_TEMPLATE_H_
