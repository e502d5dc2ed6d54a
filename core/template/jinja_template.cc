#include "core/template/jinja_template.h"

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/template/jinja_builtin_args.h"
#include "core/template/jinja_builtins.h"
#include "core/template/jinja_parser.h"

namespace pdserve::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

// One render: the scopes, the output and the budget, charged as described in jinja_limits.h.
class Renderer {
 public:
  Renderer(const Object& context, const RenderLimits& limits) : budget_(limits) {
    scopes_.emplace_back();
    for (const auto& [key, value] : Globals(budget_).entries) scopes_.back()[key] = value;
    scopes_.back()["namespace"] = Value(Function(
        [this](const Arguments& args) -> absl::StatusOr<Value> { return MakeNamespace(args); }));
    for (const auto& [key, value] : context.entries) scopes_.back()[key] = value;
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  // Namespaces are the only values a template can change, so every reference cycle it can make
  // (a namespace inside itself, directly or through lists, mappings, other namespaces or bound
  // methods) runs through one of this render's namespaces: emptying them all frees the cycles.
  ~Renderer() {
    for (const Value& ns : namespaces_) {
      const auto entries = std::move(ns.AsObject().entries);
      ns.AsObject().entries.clear();
    }
  }

  absl::StatusOr<std::string> Render(const Body& body) {
    PDSERVE_ASSIGN_OR_RETURN(Flow flow, Exec(body));
    (void)flow;  // break/continue outside a loop end the template, as in Jinja
    return std::move(out_);
  }

 private:
  static absl::Status Error(int line, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("template line ", line, ": ", what));
  }
  // Adds the line to errors raised by built-ins and the budget.
  template <typename T>
  static absl::StatusOr<T> AtLine(int line, absl::StatusOr<T> result) {
    if (result.ok() || absl::StartsWith(result.status().message(), "template line")) return result;
    return Error(line, result.status().message());
  }
  static absl::Status AtLine(int line, absl::Status status) {
    if (status.ok() || absl::StartsWith(status.message(), "template line")) return status;
    return Error(line, status.message());
  }

  // namespace(...): charged as the mapping it is, plus one element for the namespace itself.
  absl::StatusOr<Value> MakeNamespace(const Arguments& args) {
    PDSERVE_RETURN_IF_ERROR(budget_.WorkItems(1 + static_cast<int64_t>(args.keyword.size())));
    Object ns;
    ns.is_namespace = true;
    for (const auto& [key, value] : args.keyword) ns.Set(key, value);
    Value v(std::move(ns));
    namespaces_.push_back(v);
    own_namespaces_.insert(&v.AsObject());
    return v;
  }

  // An operation's result, checked against max_string_bytes and max_items (the built-ins check
  // what they build before building it and charge it; this also covers what they pass through).
  absl::StatusOr<Value> Checked(int line, absl::StatusOr<Value> result) {
    if (!result.ok()) return AtLine(line, std::move(result));
    PDSERVE_RETURN_IF_ERROR(AtLine(line, CheckSize(*result, budget_)));
    return result;
  }
  // A value the renderer built (a list or dict literal, a concatenation): checked and charged.
  absl::StatusOr<Value> Built(int line, Value v) {
    return AtLine(line, New(std::move(v), budget_));
  }

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (auto found = it->find(name); found != it->end()) return found->second;
    }
    return Value();
  }

  absl::StatusOr<Flow> Exec(const Body& body) {
    for (const auto& stmt : body) {
      PDSERVE_ASSIGN_OR_RETURN(Flow flow, Exec(*stmt));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> Exec(const Stmt& s) {
    PDSERVE_RETURN_IF_ERROR(AtLine(s.line, budget_.Step()));
    switch (s.kind) {
      case Stmt::Kind::kText:
        return Emit(s.line, s.text);
      case Stmt::Kind::kOutput: {
        PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        if (v.is_string()) return Emit(s.line, v.AsString());
        PDSERVE_ASSIGN_OR_RETURN(const std::string text, AtLine(s.line, v.ToString(budget_)));
        return Emit(s.line, text);
      }
      case Stmt::Kind::kIf:
        for (const auto& [condition, body] : s.branches) {
          PDSERVE_ASSIGN_OR_RETURN(Value c, Eval(*condition));
          if (c.IsTruthy()) return Exec(body);
        }
        return Exec(s.else_body);
      case Stmt::Kind::kFor:
        return ExecFor(s);
      case Stmt::Kind::kSet:
        return ExecSet(s);
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> Emit(int line, const std::string& text) {
    PDSERVE_RETURN_IF_ERROR(
        AtLine(line, budget_.CheckOutput(static_cast<int64_t>(out_.size() + text.size()))));
    out_ += text;
    return Flow::kNormal;
  }

  absl::Status Bind(const Stmt& s, const Value& item) {
    auto& scope = scopes_.back();
    if (s.targets.size() == 1) {
      scope[s.targets[0]] = item;
      return absl::OkStatus();
    }
    PDSERVE_ASSIGN_OR_RETURN(Array parts, AtLine(s.line, item.Items(budget_)));
    if (parts.size() != s.targets.size()) {
      return Error(s.line, absl::StrCat("cannot unpack ", parts.size(), " values into ",
                                        s.targets.size(), " names"));
    }
    for (size_t i = 0; i < parts.size(); ++i) scope[s.targets[i]] = parts[i];
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> ExecFor(const Stmt& s) {
    PDSERVE_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
    if (iterable.is_undefined() || iterable.is_none()) iterable = Value(Array{});
    Array built;  // the items of a string or mapping; a list is iterated in place (immutable)
    if (!iterable.is_array()) {
      PDSERVE_ASSIGN_OR_RETURN(built, AtLine(s.line, iterable.Items(budget_)));
    }
    const Array& all = iterable.is_array() ? iterable.AsArray() : built;
    scopes_.emplace_back();
    absl::StatusOr<Flow> flow = Loop(s, all);
    scopes_.pop_back();
    return flow;
  }

  // The iterations of `s` over `all` (its inline `if` filters before loop.* counts).
  absl::StatusOr<Flow> Loop(const Stmt& s, const Array& all) {
    Array kept;
    if (s.condition != nullptr) {
      for (const Value& item : all) {
        PDSERVE_RETURN_IF_ERROR(AtLine(s.line, budget_.Step()));
        PDSERVE_RETURN_IF_ERROR(Bind(s, item));
        PDSERVE_ASSIGN_OR_RETURN(Value keep, Eval(*s.condition));
        if (keep.IsTruthy()) kept.push_back(item);
      }
    }
    const Array& items = s.condition != nullptr ? kept : all;
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      PDSERVE_RETURN_IF_ERROR(AtLine(s.line, budget_.Step()));
      scopes_.back().clear();
      PDSERVE_RETURN_IF_ERROR(Bind(s, items[i]));
      Object loop;  // distinct keys: appended without Set's lookups
      loop.entries.reserve(9);
      loop.entries.emplace_back("index", Value(i + 1));
      loop.entries.emplace_back("index0", Value(i));
      loop.entries.emplace_back("revindex", Value(n - i));
      loop.entries.emplace_back("revindex0", Value(n - i - 1));
      loop.entries.emplace_back("first", Value(i == 0));
      loop.entries.emplace_back("last", Value(i == n - 1));
      loop.entries.emplace_back("length", Value(n));
      loop.entries.emplace_back("previtem", i > 0 ? items[i - 1] : Value());
      loop.entries.emplace_back("nextitem", i + 1 < n ? items[i + 1] : Value());
      scopes_.back()["loop"] = Value(std::move(loop));
      PDSERVE_ASSIGN_OR_RETURN(const Flow flow, Exec(s.body));
      if (flow == Flow::kBreak) break;
    }
    if (n == 0) return Exec(s.else_body);
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> ExecSet(const Stmt& s) {
    PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
    if (!s.attribute.empty()) {
      const Value target = Lookup(s.targets[0]);
      if (!target.is_object() || !target.AsObject().is_namespace) {
        return Error(s.line, absl::StrCat("cannot set '", s.attribute, "' on '", s.targets[0],
                                          "': not a namespace()"));
      }
      if (!own_namespaces_.contains(&target.AsObject())) {
        return Error(s.line, absl::StrCat("cannot set '", s.attribute, "' on '", s.targets[0],
                                          "': not a namespace() of this template"));
      }
      target.AsObject().Set(s.attribute, std::move(v));
      return Flow::kNormal;
    }
    PDSERVE_RETURN_IF_ERROR(Bind(s, v));
    return Flow::kNormal;
  }

  absl::StatusOr<Arguments> EvalArguments(const Expr& e, size_t first) {
    Arguments args;
    for (size_t i = first; i < e.items.size(); ++i) {
      PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*e.items[i]));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [key, expr] : e.keywords) {
      PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*expr));
      args.keyword.emplace_back(key, std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> Eval(const Expr& e) {
    PDSERVE_RETURN_IF_ERROR(AtLine(e.line, budget_.Step()));
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        PDSERVE_ASSIGN_OR_RETURN(Arguments items, EvalArguments(e, 0));
        return Built(e.line, Value(std::move(items.positional)));
      }
      case Expr::Kind::kDict: {
        Object o;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          PDSERVE_ASSIGN_OR_RETURN(Value key, Eval(*e.items[i]));
          PDSERVE_ASSIGN_OR_RETURN(Value value, Eval(*e.items[i + 1]));
          if (!key.is_string()) return Error(e.line, "dict keys must be strings");
          o.Set(key.AsString(), std::move(value));
        }
        return Built(e.line, Value(std::move(o)));
      }
      case Expr::Kind::kAttribute: {
        PDSERVE_ASSIGN_OR_RETURN(Value object, Eval(*e.items[0]));
        return Member(e, object, Value(e.name));
      }
      case Expr::Kind::kSubscript: {
        PDSERVE_ASSIGN_OR_RETURN(Value object, Eval(*e.items[0]));
        PDSERVE_ASSIGN_OR_RETURN(Value key, Eval(*e.items[1]));
        return Member(e, object, key);
      }
      case Expr::Kind::kSlice: {
        Value parts[4];
        for (int i = 0; i < 4; ++i) {
          if (e.items[i] != nullptr) {
            PDSERVE_ASSIGN_OR_RETURN(parts[i], Eval(*e.items[i]));
          }
        }
        return Checked(e.line, Slice(parts[0], parts[1], parts[2], parts[3], budget_));
      }
      case Expr::Kind::kCall: {
        PDSERVE_ASSIGN_OR_RETURN(Value callee, Eval(*e.items[0]));
        if (callee.kind() != Value::Kind::kFunction) {
          return Error(e.line,
                       absl::StrCat("cannot call a ", callee.KindName(), CalleeName(*e.items[0])));
        }
        PDSERVE_ASSIGN_OR_RETURN(Arguments args, EvalArguments(e, 1));
        return Checked(e.line, callee.AsFunction()(args));
      }
      case Expr::Kind::kFilter: {
        PDSERVE_ASSIGN_OR_RETURN(Value value, Eval(*e.items[0]));
        PDSERVE_ASSIGN_OR_RETURN(Arguments args, EvalArguments(e, 1));
        return Checked(e.line, ApplyFilter(e.name, value, args, budget_));
      }
      case Expr::Kind::kTest: {
        PDSERVE_ASSIGN_OR_RETURN(Value value, Eval(*e.items[0]));
        PDSERVE_ASSIGN_OR_RETURN(Arguments args, EvalArguments(e, 1));
        PDSERVE_ASSIGN_OR_RETURN(bool result,
                                 AtLine(e.line, ApplyTest(e.name, value, args, budget_)));
        return Value(result != e.negated);
      }
      case Expr::Kind::kUnary:
        return EvalUnary(e);
      case Expr::Kind::kBinary:
        return EvalBinary(e);
      case Expr::Kind::kTernary: {
        PDSERVE_ASSIGN_OR_RETURN(Value condition, Eval(*e.items[1]));
        if (condition.IsTruthy()) return Eval(*e.items[0]);
        if (e.items[2] == nullptr) return Value();
        return Eval(*e.items[2]);
      }
    }
    return Value();
  }

  absl::StatusOr<Value> EvalUnary(const Expr& e) {
    PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*e.items[0]));
    if (e.name == "not") return Value(!v.IsTruthy());
    if (!v.is_number()) {
      return Error(e.line, absl::StrCat("unary '", e.name, "' on a ", v.KindName()));
    }
    if (e.name == "+") return v;
    if (v.kind() != Value::Kind::kInt) return Value(-v.AsDouble());
    if (v.AsInt() == INT64_MIN) return Error(e.line, "integer overflow in unary '-'");
    return Value(-v.AsInt());
  }

  absl::StatusOr<Value> EvalBinary(const Expr& e) {
    PDSERVE_ASSIGN_OR_RETURN(Value left, Eval(*e.items[0]));
    if (e.name == "and") return left.IsTruthy() ? Eval(*e.items[1]) : left;
    if (e.name == "or") return left.IsTruthy() ? left : Eval(*e.items[1]);
    PDSERVE_ASSIGN_OR_RETURN(Value right, Eval(*e.items[1]));
    if (e.name == "==" || e.name == "!=") {
      PDSERVE_ASSIGN_OR_RETURN(const bool equal, AtLine(e.line, left.Equals(right, budget_)));
      return Value(equal == (e.name == "=="));
    }
    if (e.name == "~") return Concatenate(e.line, left, right);
    if (e.name == "not in") {
      PDSERVE_ASSIGN_OR_RETURN(Value in, AtLine(e.line, BinaryOp("in", left, right, budget_)));
      return Value(!in.AsBool());
    }
    return Checked(e.line, BinaryOp(e.name, left, right, budget_));
  }

  // left ~ right: both printed, then joined.
  absl::StatusOr<Value> Concatenate(int line, const Value& left, const Value& right) {
    std::string printed[2];
    const std::string* text[2];
    for (int i = 0; i < 2; ++i) {
      const Value& v = i == 0 ? left : right;
      if (v.is_string()) {
        text[i] = &v.AsString();
      } else {
        PDSERVE_ASSIGN_OR_RETURN(printed[i], AtLine(line, v.ToString(budget_)));
        text[i] = &printed[i];
      }
    }
    const int64_t size = static_cast<int64_t>(text[0]->size() + text[1]->size());
    PDSERVE_RETURN_IF_ERROR(AtLine(line, budget_.CheckString(size)));
    return Built(line, Value(*text[0] + *text[1]));
  }

  // object.name and object[key]: Jinja looks up an attribute (a method) first, then an item.
  absl::StatusOr<Value> Member(const Expr& e, const Value& object, const Value& key) {
    if (object.is_undefined() || object.is_none()) {
      return Error(e.line, absl::StrCat(object.KindName(), " value has no attribute or item ",
                                        Describe(key)));
    }
    if (key.is_string()) {
      if (Value method = BoundMethod(object, key.AsString(), budget_); !method.is_undefined()) {
        return method;
      }
      if (object.is_object()) {
        PDSERVE_RETURN_IF_ERROR(AtLine(e.line, budget_.Work(object.WorkBytes())));  // the lookup
        const Value* found = object.AsObject().Find(key.AsString());
        return found != nullptr ? *found : Value();
      }
      return Value();
    }
    if (key.kind() == Value::Kind::kInt) return AtLine(e.line, Index(object, key.AsInt(), budget_));
    return Value();
  }

  // A key for an error message: quoted when a string, else its kind (printing it could be long).
  static std::string Describe(const Value& key) {
    if (key.is_string()) return absl::StrCat("'", key.AsString().substr(0, 100), "'");
    if (key.kind() == Value::Kind::kInt) return absl::StrCat(key.AsInt());
    return absl::StrCat("of kind ", key.KindName());
  }

  static std::string CalleeName(const Expr& callee) {
    if (callee.kind == Expr::Kind::kName || callee.kind == Expr::Kind::kAttribute) {
      return absl::StrCat(" ('", callee.name, "')");
    }
    return "";
  }

  Budget budget_;
  std::vector<absl::flat_hash_map<std::string, Value>> scopes_;
  std::vector<Value> namespaces_;                      // all this render made
  absl::flat_hash_set<const Object*> own_namespaces_;  // the same, to look up
  std::string out_;
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  PDSERVE_ASSIGN_OR_RETURN(Body body, ParseTemplate(source));
  return Template(std::make_shared<const Body>(std::move(body)));
}

absl::StatusOr<std::string> Template::Render(const Object& context,
                                             const RenderLimits& limits) const {
  return Renderer(context, limits).Render(*body_);
}

}  // namespace pdserve::jinja
