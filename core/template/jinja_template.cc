#include "core/template/jinja_template.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/template/jinja_builtins.h"
#include "core/template/jinja_parser.h"

namespace pdserve::jinja {
namespace {

constexpr size_t kMaxOutputBytes = 16 << 20;

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  explicit Renderer(const Object& context) {
    scopes_.emplace_back();
    for (const auto& [key, value] : Globals().entries) scopes_.back()[key] = value;
    for (const auto& [key, value] : context.entries) scopes_.back()[key] = value;
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
  // Adds the line to errors raised by built-ins.
  template <typename T>
  static absl::StatusOr<T> AtLine(int line, absl::StatusOr<T> result) {
    if (result.ok() || absl::StartsWith(result.status().message(), "template line")) return result;
    return Error(line, result.status().message());
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
    switch (s.kind) {
      case Stmt::Kind::kText:
        return Emit(s.line, s.text);
      case Stmt::Kind::kOutput: {
        PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
        return Emit(s.line, v.ToString());
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
    if (out_.size() + text.size() > kMaxOutputBytes) return Error(line, "output over 16 MiB");
    out_ += text;
    return Flow::kNormal;
  }

  absl::Status Bind(const Stmt& s, const Value& item) {
    auto& scope = scopes_.back();
    if (s.targets.size() == 1) {
      scope[s.targets[0]] = item;
      return absl::OkStatus();
    }
    PDSERVE_ASSIGN_OR_RETURN(Array parts, AtLine(s.line, item.Items()));
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
    PDSERVE_ASSIGN_OR_RETURN(Array all, AtLine(s.line, iterable.Items()));
    scopes_.emplace_back();
    Array items;
    for (const Value& item : all) {  // the inline `if` filters before loop.* counts
      if (s.condition == nullptr) {
        items.push_back(item);
        continue;
      }
      PDSERVE_RETURN_IF_ERROR(Bind(s, item));
      PDSERVE_ASSIGN_OR_RETURN(Value keep, Eval(*s.condition));
      if (keep.IsTruthy()) items.push_back(item);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      scopes_.back().clear();
      PDSERVE_RETURN_IF_ERROR(Bind(s, items[i]));
      Object loop;
      loop.Set("index", Value(i + 1));
      loop.Set("index0", Value(i));
      loop.Set("revindex", Value(n - i));
      loop.Set("revindex0", Value(n - i - 1));
      loop.Set("first", Value(i == 0));
      loop.Set("last", Value(i == n - 1));
      loop.Set("length", Value(n));
      loop.Set("previtem", i > 0 ? items[i - 1] : Value());
      loop.Set("nextitem", i + 1 < n ? items[i + 1] : Value());
      scopes_.back()["loop"] = Value(std::move(loop));
      absl::StatusOr<Flow> flow = Exec(s.body);
      if (!flow.ok()) {
        scopes_.pop_back();
        return flow.status();
      }
      if (*flow == Flow::kBreak) break;
    }
    scopes_.pop_back();
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
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        PDSERVE_ASSIGN_OR_RETURN(Arguments items, EvalArguments(e, 0));
        return Value(std::move(items.positional));
      }
      case Expr::Kind::kDict: {
        Object o;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          PDSERVE_ASSIGN_OR_RETURN(Value key, Eval(*e.items[i]));
          PDSERVE_ASSIGN_OR_RETURN(Value value, Eval(*e.items[i + 1]));
          if (!key.is_string()) return Error(e.line, "dict keys must be strings");
          o.Set(key.AsString(), std::move(value));
        }
        return Value(std::move(o));
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
        return AtLine(e.line, Slice(parts[0], parts[1], parts[2], parts[3]));
      }
      case Expr::Kind::kCall: {
        PDSERVE_ASSIGN_OR_RETURN(Value callee, Eval(*e.items[0]));
        if (callee.kind() != Value::Kind::kFunction) {
          return Error(e.line,
                       absl::StrCat("cannot call a ", callee.KindName(), CalleeName(*e.items[0])));
        }
        PDSERVE_ASSIGN_OR_RETURN(Arguments args, EvalArguments(e, 1));
        return AtLine(e.line, callee.AsFunction()(args));
      }
      case Expr::Kind::kFilter: {
        PDSERVE_ASSIGN_OR_RETURN(Value value, Eval(*e.items[0]));
        PDSERVE_ASSIGN_OR_RETURN(Arguments args, EvalArguments(e, 1));
        return AtLine(e.line, ApplyFilter(e.name, value, args));
      }
      case Expr::Kind::kTest: {
        PDSERVE_ASSIGN_OR_RETURN(Value value, Eval(*e.items[0]));
        PDSERVE_ASSIGN_OR_RETURN(Arguments args, EvalArguments(e, 1));
        PDSERVE_ASSIGN_OR_RETURN(bool result, AtLine(e.line, ApplyTest(e.name, value, args)));
        return Value(result != e.negated);
      }
      case Expr::Kind::kUnary: {
        PDSERVE_ASSIGN_OR_RETURN(Value v, Eval(*e.items[0]));
        if (e.name == "not") return Value(!v.IsTruthy());
        if (!v.is_number())
          return Error(e.line, absl::StrCat("unary '", e.name, "' on a ", v.KindName()));
        if (e.name == "+") return v;
        return v.kind() == Value::Kind::kInt ? Value(-v.AsInt()) : Value(-v.AsDouble());
      }
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

  absl::StatusOr<Value> EvalBinary(const Expr& e) {
    PDSERVE_ASSIGN_OR_RETURN(Value left, Eval(*e.items[0]));
    if (e.name == "and") return left.IsTruthy() ? Eval(*e.items[1]) : left;
    if (e.name == "or") return left.IsTruthy() ? left : Eval(*e.items[1]);
    PDSERVE_ASSIGN_OR_RETURN(Value right, Eval(*e.items[1]));
    if (e.name == "==") return Value(left.Equals(right));
    if (e.name == "!=") return Value(!left.Equals(right));
    if (e.name == "~") return Value(left.ToString() + right.ToString());
    if (e.name == "not in") {
      PDSERVE_ASSIGN_OR_RETURN(Value in, AtLine(e.line, BinaryOp("in", left, right)));
      return Value(!in.AsBool());
    }
    return AtLine(e.line, BinaryOp(e.name, left, right));
  }

  // object.name and object[key]: Jinja looks up an attribute (a method) first, then an item.
  absl::StatusOr<Value> Member(const Expr& e, const Value& object, const Value& key) {
    if (object.is_undefined() || object.is_none()) {
      return Error(e.line, absl::StrCat(object.KindName(), " value has no attribute or item '",
                                        key.ToString(), "'"));
    }
    if (key.is_string()) {
      if (Value method = BoundMethod(object, key.AsString()); !method.is_undefined()) {
        return method;
      }
      if (object.is_object()) {
        const Value* found = object.AsObject().Find(key.AsString());
        return found != nullptr ? *found : Value();
      }
      return Value();
    }
    if (key.kind() == Value::Kind::kInt && (object.is_array() || object.is_string())) {
      PDSERVE_ASSIGN_OR_RETURN(Array items, object.Items());
      int64_t i = key.AsInt();
      if (i < 0) i += static_cast<int64_t>(items.size());
      if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value();
      return items[i];
    }
    return Value();
  }

  static std::string CalleeName(const Expr& callee) {
    if (callee.kind == Expr::Kind::kName || callee.kind == Expr::Kind::kAttribute) {
      return absl::StrCat(" ('", callee.name, "')");
    }
    return "";
  }

  std::vector<absl::flat_hash_map<std::string, Value>> scopes_;
  std::string out_;
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  PDSERVE_ASSIGN_OR_RETURN(Body body, ParseTemplate(source));
  return Template(std::make_shared<const Body>(std::move(body)));
}

absl::StatusOr<std::string> Template::Render(const Object& context) const {
  return Renderer(context).Render(*body_);
}

}  // namespace pdserve::jinja
