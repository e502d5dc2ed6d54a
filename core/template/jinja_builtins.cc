#include "core/template/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/template/jinja_builtin_args.h"
#include "core/template/jinja_strings.h"
#include "core/tokenizer/unicode.h"

namespace pdserve::jinja {
namespace {

// The code points in `s` (as DecodeUtf8 splits it).
int64_t CodePoints(const std::string& s) {
  int64_t n = 0;
  for (size_t pos = 0; pos < s.size(); pos += DecodeUtf8(s, pos).length) ++n;
  return n;
}

// o[key], charging the elements looked through; nullptr when absent.
absl::StatusOr<const Value*> Find(const Object& o, const std::string& key, Budget& budget) {
  PDSERVE_RETURN_IF_ERROR(budget.WorkItems(static_cast<int64_t>(o.entries.size())));
  return o.Find(key);
}

int64_t Length(const Value& v) {
  if (v.is_string()) {
    return std::count_if(v.AsString().begin(), v.AsString().end(),
                         [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
  }
  if (v.is_array()) return static_cast<int64_t>(v.AsArray().size());
  if (v.is_object()) return static_cast<int64_t>(v.AsObject().entries.size());
  return -1;
}

absl::StatusOr<Value> ObjectMethod(const Object& o, const std::string& name, const Arguments& args,
                                   Budget& budget) {
  if (name == "items" || name == "keys" || name == "values") {
    const int64_t n = static_cast<int64_t>(o.entries.size());
    PDSERVE_RETURN_IF_ERROR(budget.CheckItems(n));
    PDSERVE_RETURN_IF_ERROR(budget.WorkItems(name == "items" ? 4 * n : 2 * n));  // read, built
    Array out;
    for (const auto& [key, value] : o.entries) {
      if (name != "values") PDSERVE_RETURN_IF_ERROR(budget.Work(static_cast<int64_t>(key.size())));
      if (name == "items") out.push_back(Value(Array{Value(key), value}));
      if (name == "keys") out.push_back(Value(key));
      if (name == "values") out.push_back(value);
    }
    return Value(std::move(out));
  }
  if (name == "get") {
    const Value key = Arg(args, 0, "key");
    const Value* found = nullptr;
    if (key.is_string()) {
      PDSERVE_ASSIGN_OR_RETURN(found, Find(o, key.AsString(), budget));
    }
    return found != nullptr ? *found : Arg(args, 1, "default", Value::None());
  }
  return Value();
}

absl::StatusOr<Value> Abs(const Value& v) {
  if (v.kind() == Value::Kind::kInt) return Value(v.AsInt() < 0 ? -v.AsInt() : v.AsInt());
  if (v.is_number()) return Value(std::fabs(v.AsDouble()));
  return Error(absl::StrCat("abs: ", v.KindName(), " is not a number"));
}

absl::StatusOr<Value> SelectAttr(const Value& v, const Arguments& args, bool reject,
                                 Budget& budget) {
  if (!v.is_array()) return Error("selectattr/rejectattr need a list");
  PDSERVE_RETURN_IF_ERROR(Read(v, budget));
  const Value attribute = Arg(args, 0, "attribute");
  if (!attribute.is_string()) return Error("selectattr/rejectattr need an attribute name");
  const Value test = Arg(args, 1, "test");
  Arguments test_args;
  for (size_t i = 2; i < args.positional.size(); ++i)
    test_args.positional.push_back(args.positional[i]);
  Array out;
  for (const Value& item : v.AsArray()) {
    const Value* field = nullptr;
    if (item.is_object()) {
      PDSERVE_ASSIGN_OR_RETURN(field, Find(item.AsObject(), attribute.AsString(), budget));
    }
    const Value value = field != nullptr ? *field : Value();
    bool keep = value.IsTruthy();
    if (test.is_string()) {
      PDSERVE_ASSIGN_OR_RETURN(keep, ApplyTest(test.AsString(), value, test_args, budget));
    }
    if (keep != reject) out.push_back(item);
  }
  return New(Value(std::move(out)), budget);
}

// Python's % and // on integers (b != 0); b == -1 is special-cased since INT64_MIN / -1 traps.
int64_t FloorMod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  const int64_t r = a % b;
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

absl::StatusOr<Value> IntegerOp(const std::string& op, int64_t x, int64_t y) {
  int64_t result = 0;
  bool overflow = false;
  if (op == "+") {
    overflow = __builtin_add_overflow(x, y, &result);
  } else if (op == "-") {
    overflow = __builtin_sub_overflow(x, y, &result);
  } else if (op == "*") {
    overflow = __builtin_mul_overflow(x, y, &result);
  } else if (y == 0) {
    return Error("division by zero");
  } else if (op == "%") {
    result = FloorMod(x, y);
  } else if (op == "//") {
    overflow = __builtin_sub_overflow(x, FloorMod(x, y), &result);
    overflow = overflow || (result == INT64_MIN && y == -1);
    if (!overflow) result /= y;
  } else {
    return Error(absl::StrCat("unsupported operator '", op, "' on integers"));
  }
  if (overflow) return Error(absl::StrCat("integer overflow in '", op, "'"));
  return Value(result);
}

}  // namespace

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const Arguments& args,
                                  Budget& budget) {
  if (name == "trim") {
    if (!v.is_string()) return Error(absl::StrCat("trim: ", v.KindName(), " is not a string"));
    return StringMethod(v.AsString(), "strip", args, budget);
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) PDSERVE_RETURN_IF_ERROR(Read(v, budget));  // counts code points
    const int64_t n = Length(v);
    if (n < 0) return Error(absl::StrCat(name, ": ", v.KindName(), " has no length"));
    return Value(n);
  }
  if (name == "tojson") {
    const Value indent = Arg(args, 0, "indent");
    PDSERVE_ASSIGN_OR_RETURN(
        std::string json,
        v.ToJson(indent.kind() == Value::Kind::kInt ? indent.AsInt() : -1, budget));
    return Value(std::move(json));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "replace") {
    if (!v.is_string()) return Error(absl::StrCat(name, ": ", v.KindName(), " is not a string"));
    return StringMethod(v.AsString(), name, args, budget);
  }
  if (name == "first" || name == "last") {
    if (v.is_array() || v.is_string()) return Index(v, name == "first" ? 0 : -1, budget);
    PDSERVE_ASSIGN_OR_RETURN(Array items, v.Items(budget));
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    Array built;
    if (!v.is_array()) {
      PDSERVE_ASSIGN_OR_RETURN(built, v.Items(budget));
    }
    const Array& items = v.is_array() ? v.AsArray() : built;
    PDSERVE_RETURN_IF_ERROR(budget.WorkItems(static_cast<int64_t>(items.size())));
    PDSERVE_ASSIGN_OR_RETURN(const std::string separator,
                             Arg(args, 0, "d", Value("")).ToString(budget));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) PDSERVE_RETURN_IF_ERROR(Append(separator, budget, &out));
      if (items[i].is_string()) {
        PDSERVE_RETURN_IF_ERROR(Append(items[i].AsString(), budget, &out));
      } else {
        PDSERVE_ASSIGN_OR_RETURN(const std::string item, items[i].ToString(budget));
        PDSERVE_RETURN_IF_ERROR(Append(item, budget, &out));
      }
    }
    return New(Value(std::move(out)), budget);
  }
  if (name == "default" || name == "d") {
    const bool boolean = Arg(args, 1, "boolean", Value(false)).IsTruthy();
    const bool use_default = v.is_undefined() || (boolean && !v.IsTruthy());
    return use_default ? Arg(args, 0, "default_value", Value("")) : v;
  }
  if (name == "list") {
    if (v.is_array()) return v;  // lists are immutable: the same list
    PDSERVE_ASSIGN_OR_RETURN(Array items, v.Items(budget));
    return Value(std::move(items));
  }
  if (name == "string") {
    if (v.is_string()) return v;
    PDSERVE_ASSIGN_OR_RETURN(std::string s, v.ToString(budget));
    return Value(std::move(s));
  }
  if (name == "safe") return v;
  if (name == "int" || name == "float") {
    double d = 0;
    if (v.is_number()) {
      d = v.AsDouble();
    } else if (v.is_string()) {
      PDSERVE_RETURN_IF_ERROR(Read(v, budget));
      char* end = nullptr;
      d = std::strtod(v.AsString().c_str(), &end);
    } else if (v.kind() == Value::Kind::kBool) {
      d = v.AsBool();
    }
    if (name == "float") return Value(d);
    if (v.kind() == Value::Kind::kInt) return v;
    if (!(std::fabs(d) < 9.2e18)) return Error("int: out of range");  // also NaN
    return Value(static_cast<int64_t>(std::trunc(d)));
  }
  if (name == "items") {
    if (!v.is_object()) return Error(absl::StrCat("items: ", v.KindName(), " is not a mapping"));
    return ObjectMethod(v.AsObject(), "items", args, budget);
  }
  if (name == "reverse") {
    if (v.is_string() || v.is_array()) return Slice(v, Value(), Value(), Value(-1), budget);
    PDSERVE_ASSIGN_OR_RETURN(Array items, v.Items(budget));
    std::reverse(items.begin(), items.end());
    return New(Value(std::move(items)), budget);
  }
  if (name == "abs") return Abs(v);
  if (name == "map") {
    const Value attribute = KeywordArg(args, "attribute");
    if (!v.is_array() || !attribute.is_string()) return Error("map: only map(attribute=...)");
    PDSERVE_RETURN_IF_ERROR(Read(v, budget));
    Array out;
    for (const Value& item : v.AsArray()) {
      const Value* field = nullptr;
      if (item.is_object()) {
        PDSERVE_ASSIGN_OR_RETURN(field, Find(item.AsObject(), attribute.AsString(), budget));
      }
      out.push_back(field != nullptr ? *field : KeywordArg(args, "default"));
    }
    return New(Value(std::move(out)), budget);
  }
  if (name == "selectattr" || name == "rejectattr") {
    return SelectAttr(v, args, name == "rejectattr", budget);
  }
  return Error(absl::StrCat("filter '", name, "' is not supported"));
}

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const Arguments& args,
                               Budget& budget) {
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_array() || v.is_object() || v.is_string();
  if (name == "sequence") return v.is_array() || v.is_string() || v.is_object();
  if (name == "callable") return v.kind() == K::kFunction;
  if (name == "true") return v.kind() == K::kBool && v.AsBool();
  if (name == "false") return v.kind() == K::kBool && !v.AsBool();
  if (name == "odd" || name == "even") {
    if (v.kind() != K::kInt) return Error(absl::StrCat("test '", name, "' needs an integer"));
    return (FloorMod(v.AsInt(), 2) == 1) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value d = Arg(args, 0, "num");
    if (v.kind() != K::kInt || d.kind() != K::kInt || d.AsInt() == 0) {
      return Error("test 'divisibleby' needs integers");
    }
    return FloorMod(v.AsInt(), d.AsInt()) == 0;
  }
  if (name == "eq" || name == "equalto" || name == "sameas") {
    return v.Equals(Arg(args, 0, "other"), budget);
  }
  if (name == "ne") {
    PDSERVE_ASSIGN_OR_RETURN(const bool equal, v.Equals(Arg(args, 0, "other"), budget));
    return !equal;
  }
  if (name == "in") {
    const Value seq = Arg(args, 0, "seq");
    PDSERVE_ASSIGN_OR_RETURN(Value in, BinaryOp("in", v, seq, budget));
    return in.AsBool();
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    PDSERVE_RETURN_IF_ERROR(Read(v, budget));  // compared (StringMethod charges the rest)
    PDSERVE_ASSIGN_OR_RETURN(Value mapped, StringMethod(v.AsString(), name, args, budget));
    return mapped.AsString() == v.AsString();
  }
  return Error(absl::StrCat("test '", name, "' is not supported"));
}

Value BoundMethod(const Value& object, const std::string& name, Budget& budget) {
  const bool string_method = object.is_string() && HasStringMethod(name);
  const bool object_method = object.is_object() && (name == "items" || name == "keys" ||
                                                    name == "values" || name == "get");
  if (!string_method && !object_method) return Value();
  return Value(Function([object, name, &budget](const Arguments& args) -> absl::StatusOr<Value> {
    if (object.is_string()) return StringMethod(object.AsString(), name, args, budget);
    return ObjectMethod(object.AsObject(), name, args, budget);
  }));
}

Object Globals(Budget& budget) {
  Object g;
  g.Set("raise_exception",
        Value(Function([&budget](const Arguments& args) -> absl::StatusOr<Value> {
          PDSERVE_ASSIGN_OR_RETURN(const std::string message,
                                   Arg(args, 0, "message").ToString(budget));
          return Error(absl::StrCat("the template raised: ", message));
        })));
  g.Set("range", Value(Function([&budget](const Arguments& args) -> absl::StatusOr<Value> {
          for (const Value& a : args.positional) {
            if (a.kind() != Value::Kind::kInt) return Error("range: arguments must be integers");
          }
          const size_t n = args.positional.size();
          if (n < 1 || n > 3) return Error("range takes 1 to 3 arguments");
          const int64_t start = n == 1 ? 0 : args.positional[0].AsInt();
          const int64_t stop = n == 1 ? args.positional[0].AsInt() : args.positional[1].AsInt();
          const int64_t step = n == 3 ? args.positional[2].AsInt() : 1;
          if (step == 0) return Error("range: step is zero");
          Array out;
          // i stays within [start, stop] but for the last step, which may overflow: stop there.
          for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
            PDSERVE_RETURN_IF_ERROR(budget.CheckItems(static_cast<int64_t>(out.size()) + 1));
            PDSERVE_RETURN_IF_ERROR(budget.WorkItems(1));
            out.push_back(Value(i));
            if (__builtin_add_overflow(i, step, &i)) break;
          }
          return Value(std::move(out));
        })));
  g.Set("strftime_now", Value(Function([](const Arguments& args) -> absl::StatusOr<Value> {
          const Value format = Arg(args, 0, "format");
          if (!format.is_string()) return Error("strftime_now: the format must be a string");
          const std::time_t now = std::time(nullptr);
          std::tm tm{};
          localtime_r(&now, &tm);
          char buf[256];
          const size_t n = std::strftime(buf, sizeof(buf), format.AsString().c_str(), &tm);
          return Value(std::string(buf, n));
        })));
  return g;
}

absl::StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b,
                               Budget& budget) {
  using K = Value::Kind;
  const auto type_error = [&]() {
    return Error(absl::StrCat("unsupported operand kinds for '", op, "': ", a.KindName(), " and ",
                              b.KindName()));
  };
  if (op == "in") {
    if (b.is_string() && a.is_string()) {
      PDSERVE_RETURN_IF_ERROR(Read(a, budget));
      PDSERVE_RETURN_IF_ERROR(Read(b, budget));
      return Value(Searcher(a.AsString()).Find(b.AsString()) != std::string::npos);
    }
    if (b.is_array()) {
      PDSERVE_RETURN_IF_ERROR(Read(b, budget));
      for (const Value& item : b.AsArray()) {
        PDSERVE_ASSIGN_OR_RETURN(const bool equal, item.Equals(a, budget));
        if (equal) return Value(true);
      }
      return Value(false);
    }
    if (b.is_object()) {
      if (!a.is_string()) return Value(false);
      PDSERVE_ASSIGN_OR_RETURN(const Value* found, Find(b.AsObject(), a.AsString(), budget));
      return Value(found != nullptr);
    }
    return type_error();
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    int cmp;
    if (a.is_number() && b.is_number()) {
      cmp = a.AsDouble() < b.AsDouble() ? -1 : a.AsDouble() > b.AsDouble() ? 1 : 0;
    } else if (a.is_string() && b.is_string()) {
      PDSERVE_RETURN_IF_ERROR(
          budget.Work(static_cast<int64_t>(std::min(a.AsString().size(), b.AsString().size()))));
      cmp = a.AsString().compare(b.AsString());
    } else {
      return type_error();
    }
    if (op == "<") return Value(cmp < 0);
    if (op == ">") return Value(cmp > 0);
    if (op == "<=") return Value(cmp <= 0);
    return Value(cmp >= 0);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      PDSERVE_RETURN_IF_ERROR(
          budget.CheckString(static_cast<int64_t>(a.AsString().size() + b.AsString().size())));
      return New(Value(a.AsString() + b.AsString()), budget);
    }
    if (a.is_array() && b.is_array()) {
      PDSERVE_RETURN_IF_ERROR(
          budget.CheckItems(static_cast<int64_t>(a.AsArray().size() + b.AsArray().size())));
      Array out = a.AsArray();
      out.insert(out.end(), b.AsArray().begin(), b.AsArray().end());
      return New(Value(std::move(out)), budget);
    }
  }
  if (op == "*" &&
      ((a.is_string() && b.kind() == K::kInt) || (a.kind() == K::kInt && b.is_string()))) {
    const std::string& s = a.is_string() ? a.AsString() : b.AsString();
    const int64_t n = std::max<int64_t>(0, a.is_string() ? b.AsInt() : a.AsInt());
    const int64_t size = static_cast<int64_t>(s.size());
    if (size > 0 && n > budget.limits().max_string_bytes / size) {
      return budget.CheckString(budget.limits().max_string_bytes + 1);  // the limit's error
    }
    std::string out;
    out.reserve(static_cast<size_t>(size * n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return New(Value(std::move(out)), budget);
  }
  if (!a.is_number() || !b.is_number()) return type_error();
  if (op == "/") {
    if (b.AsDouble() == 0) return Error("division by zero");
    return Value(a.AsDouble() / b.AsDouble());
  }
  const bool integer_op = op == "+" || op == "-" || op == "*" || op == "//" || op == "%";
  if (!integer_op) return type_error();
  if (a.kind() == K::kInt && b.kind() == K::kInt) return IntegerOp(op, a.AsInt(), b.AsInt());
  const double x = a.AsDouble(), y = b.AsDouble();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (y == 0) return Error("division by zero");
  if (op == "//") return Value(std::floor(x / y));
  return Value(x - y * std::floor(x / y));
}

absl::StatusOr<Value> Index(const Value& sequence, int64_t i, Budget& budget) {
  if (sequence.is_array()) {
    const Array& items = sequence.AsArray();
    if (i < 0) i += static_cast<int64_t>(items.size());
    if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value();
    return items[i];
  }
  if (!sequence.is_string()) return Value();
  const std::string& s = sequence.AsString();
  PDSERVE_RETURN_IF_ERROR(Read(sequence, budget));
  if (i < 0) i += CodePoints(s);
  int64_t k = 0;
  for (size_t pos = 0; pos < s.size(); ++k) {
    const int length = DecodeUtf8(s, pos).length;
    if (k == i) return Value(s.substr(pos, length));
    pos += length;
  }
  return Value();
}

absl::StatusOr<Value> Slice(const Value& value, const Value& start_v, const Value& stop_v,
                            const Value& step_v, Budget& budget) {
  if (!value.is_string() && !value.is_array()) {
    return Error(absl::StrCat("cannot slice a ", value.KindName()));
  }
  PDSERVE_RETURN_IF_ERROR(Read(value, budget));
  const auto as_int = [](const Value& v, int64_t fallback) {
    return v.kind() == Value::Kind::kInt ? v.AsInt() : fallback;
  };
  const int64_t n = value.is_string() ? CodePoints(value.AsString())
                                      : static_cast<int64_t>(value.AsArray().size());
  const int64_t step = as_int(step_v, 1);
  if (step == 0) return Error("slice step is zero");
  const auto clamp = [&](int64_t i, int64_t low, int64_t high) {
    if (i < 0) i += n;
    return std::clamp(i, low, high);
  };
  int64_t start, stop;
  if (step > 0) {
    start = clamp(as_int(start_v, 0), 0, n);
    stop = clamp(as_int(stop_v, n), 0, n);
  } else {
    start = start_v.kind() == Value::Kind::kInt ? clamp(start_v.AsInt(), -1, n - 1) : n - 1;
    stop = stop_v.kind() == Value::Kind::kInt ? clamp(stop_v.AsInt(), -1, n - 1) : -1;
  }
  const int64_t back = step == INT64_MIN ? INT64_MAX : -step;
  if (value.is_array()) {
    const Array& items = value.AsArray();
    Array out;  // the steps are capped at the distance left, so that i cannot overflow
    if (step > 0) {
      for (int64_t i = start; i < stop; i += std::min(step, stop - i)) out.push_back(items[i]);
    } else {
      for (int64_t i = start; i > stop; i -= std::min(back, i - stop)) out.push_back(items[i]);
    }
    return New(Value(std::move(out)), budget);
  }
  // A string: its code points in order, those selected appended (or, for a negative step, written
  // from the end of the result back, which needs its size first).
  const std::string& s = value.AsString();
  const auto selected = [&](int64_t k) {
    if (step > 0) return k >= start && k < stop && (k - start) % step == 0;
    return k <= start && k > stop && (start - k) % back == 0;
  };
  const auto for_each_selected = [&](auto&& visit) {
    int64_t k = 0;
    for (size_t pos = 0; pos < s.size(); ++k) {
      const int length = DecodeUtf8(s, pos).length;
      if (selected(k)) visit(std::string_view(s).substr(pos, length));
      pos += length;
    }
  };
  std::string out;
  if (step > 0) {
    for_each_selected([&](std::string_view c) { out.append(c); });
  } else {
    size_t size = 0;
    for_each_selected([&](std::string_view c) { size += c.size(); });
    out.resize(size);
    for_each_selected([&](std::string_view c) {
      size -= c.size();
      out.replace(size, c.size(), c);
    });
  }
  return New(Value(std::move(out)), budget);
}

}  // namespace pdserve::jinja
