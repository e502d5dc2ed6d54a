// Parses Jinja source into a syntax tree, with the environment Hugging Face renders chat
// templates in: trim_blocks and lstrip_blocks on, `-` whitespace control, loop controls (break,
// continue). Statements: if/elif/else, for (with else and an inline `if`), set (names, tuples,
// namespace attributes), break, continue; comments. Expressions: literals, lists, dicts,
// attributes, subscripts and slices, calls with keyword arguments, filters, tests, not/and/or,
// comparisons, in / not in, + - * / // % ~, and `x if c else y`.
#ifndef PDSERVE_CORE_TEMPLATE_JINJA_PARSER_H_
#define PDSERVE_CORE_TEMPLATE_JINJA_PARSER_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "core/template/jinja_ast.h"

namespace pdserve::jinja {

// InvalidArgument naming the line and the construct for malformed source and for Jinja that is
// not implemented (macros, call and filter blocks, raw, block set, extends/include).
absl::StatusOr<Body> ParseTemplate(std::string_view source);

}  // namespace pdserve::jinja

#endif  // PDSERVE_CORE_TEMPLATE_JINJA_PARSER_H_
