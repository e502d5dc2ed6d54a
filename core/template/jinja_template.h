// jinja::Template: a Jinja template parsed once (jinja_parser.h) and rendered many times, with
// the built-ins chat templates use. Globals: raise_exception(message) (rendering fails with the
// message), namespace(...), range(...), strftime_now(format). Filters: trim, length/count,
// tojson(indent), upper, lower, capitalize, title, first, last, join, default/d, list, string,
// int, float, replace, items, reverse, safe, abs, map(attribute=), selectattr, rejectattr.
// Tests: defined, undefined, none, string, number, integer, float, boolean, mapping, iterable,
// sequence, callable, true, false, odd, even, divisibleby, eq/equalto, ne, in, lower, upper.
// String methods: strip, lstrip, rstrip, split, startswith, endswith, upper, lower, replace,
// title, capitalize, count, find; mapping methods: items, keys, values, get. Undefined values
// print as "" and are false; their attributes are an error, as in Jinja. There are no macros or
// recursive loops (the parser refuses them), so a template cannot recurse.
//
// Templates are untrusted input: every render runs under RenderLimits (jinja_limits.h) and fails
// with InvalidArgument "template line N: render limit <name> (<value>) exceeded" rather than
// running long, growing without bound or overflowing the stack. Only a namespace() the render
// made can be changed ({% set ns.x = ... %}); a template can put one inside itself, which prints
// as Python does ({...}), fails tojson and == (max_depth) and is freed when the render ends.
//
// Immutable after Parse; Render is thread-safe.
#ifndef PDSERVE_CORE_TEMPLATE_JINJA_TEMPLATE_H_
#define PDSERVE_CORE_TEMPLATE_JINJA_TEMPLATE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/template/jinja_ast.h"
#include "core/template/jinja_limits.h"
#include "core/template/jinja_value.h"

namespace pdserve::jinja {

class Template {
 public:
  // InvalidArgument naming the line and construct (see ParseTemplate).
  static absl::StatusOr<Template> Parse(std::string_view source);

  // Renders with `context`'s entries as variables, under `limits`. InvalidArgument naming the
  // line for a type error, an unsupported filter, test or method, raise_exception, or a limit
  // exceeded (naming the limit and its value).
  absl::StatusOr<std::string> Render(const Object& context,
                                     const RenderLimits& limits = RenderLimits()) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace pdserve::jinja

#endif  // PDSERVE_CORE_TEMPLATE_JINJA_TEMPLATE_H_
