// The syntax tree of a parsed Jinja template (jinja_parser.h builds it, jinja_template.h runs it).
#ifndef PDSERVE_CORE_TEMPLATE_JINJA_AST_H_
#define PDSERVE_CORE_TEMPLATE_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/template/jinja_value.h"

namespace pdserve::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kDict,       // items as key, value pairs
    kAttribute,  // object.name
    kSubscript,  // object[items[0]]
    kSlice,      // object[items[0]:items[1]:items[2]] (null items are omitted parts)
    kCall,       // object(items..., keywords...)
    kFilter,     // items[0] | name(items[1:]..., keywords...)
    kTest,       // items[0] is [not] name(items[1:]...)
    kUnary,      // op items[0]: "not", "-", "+"
    kBinary,     // items[0] op items[1]
    kTernary,    // items[0] if items[1] else items[2] (null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;      // name, attribute, filter, test or operator
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // branches: (condition, body)...; else_body
    kFor,     // targets in expr [if condition]: body; else_body
    kSet,     // targets[0] (or object.attribute when attribute is set) = expr
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::string> targets;
  std::string attribute;
  Body body;
  Body else_body;
};

}  // namespace pdserve::jinja

#endif  // PDSERVE_CORE_TEMPLATE_JINJA_AST_H_
