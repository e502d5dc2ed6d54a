#include "core/template/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"

namespace pdserve::jinja {
namespace {

constexpr std::string_view kPythonWhitespace = " \t\n\r\f\v";
constexpr int64_t kMaxRange = 1 << 20;

absl::Status Error(std::string what) { return absl::InvalidArgumentError(std::move(what)); }

// Keyword argument `name`, else `fallback`.
Value KeywordArg(const Arguments& args, const std::string& name, Value fallback = Value()) {
  for (const auto& [key, value] : args.keyword) {
    if (key == name) return value;
  }
  return fallback;
}

// Positional argument `i`, else keyword `name`, else `fallback`.
Value Arg(const Arguments& args, size_t i, const std::string& name, Value fallback = Value()) {
  if (i < args.positional.size()) return args.positional[i];
  return KeywordArg(args, name, std::move(fallback));
}

absl::StatusOr<std::string> StringArg(const Arguments& args, size_t i, const std::string& name,
                                      const std::string& where) {
  const Value v = Arg(args, i, name);
  if (!v.is_string()) return Error(absl::StrCat(where, ": argument '", name, "' must be a string"));
  return v.AsString();
}

std::string Strip(const std::string& s, std::string_view chars, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end && chars.find(s[begin]) != std::string_view::npos) ++begin;
  }
  if (right) {
    while (end > begin && chars.find(s[end - 1]) != std::string_view::npos) --end;
  }
  return s.substr(begin, end - begin);
}

std::string MapAscii(const std::string& s, int (*f)(int)) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(f(static_cast<unsigned char>(c)));
  return out;
}

std::string Title(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c));
    c = static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
    start = !alpha;
  }
  return out;
}

std::string Capitalize(const std::string& s) {
  std::string out = MapAscii(s, [](int c) { return std::tolower(c); });
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

std::vector<std::string> Split(const std::string& s, const Value& sep) {
  std::vector<std::string> parts;
  if (!sep.is_string()) {  // runs of whitespace, no empty parts
    size_t i = 0;
    while (true) {
      i = s.find_first_not_of(kPythonWhitespace, i);
      if (i == std::string::npos) break;
      const size_t end = std::min(s.find_first_of(kPythonWhitespace, i), s.size());
      parts.push_back(s.substr(i, end - i));
      i = end;
    }
    return parts;
  }
  const std::string& d = sep.AsString();
  size_t start = 0;
  for (size_t found; (found = s.find(d, start)) != std::string::npos; start = found + d.size()) {
    parts.push_back(s.substr(start, found - start));
  }
  parts.push_back(s.substr(start));
  return parts;
}

Value Strings(const std::vector<std::string>& parts) {
  Array a;
  for (const std::string& p : parts) a.push_back(Value(p));
  return Value(std::move(a));
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

bool AffixMatches(const std::string& s, const Value& affix, bool prefix) {
  const auto one = [&](const std::string& a) { return prefix ? s.starts_with(a) : s.ends_with(a); };
  if (affix.is_string()) return one(affix.AsString());
  if (affix.is_array()) {
    for (const Value& a : affix.AsArray()) {
      if (a.is_string() && one(a.AsString())) return true;
    }
  }
  return false;
}

absl::StatusOr<Value> StringMethod(const std::string& s, const std::string& name,
                                   const Arguments& args) {
  const auto chars = [&]() {
    const Value c = Arg(args, 0, "chars");
    return c.is_string() ? std::string(c.AsString()) : std::string(kPythonWhitespace);
  };
  if (name == "strip") return Value(Strip(s, chars(), true, true));
  if (name == "lstrip") return Value(Strip(s, chars(), true, false));
  if (name == "rstrip") return Value(Strip(s, chars(), false, true));
  if (name == "split") return Strings(Split(s, Arg(args, 0, "sep")));
  if (name == "startswith") return Value(AffixMatches(s, Arg(args, 0, "prefix"), true));
  if (name == "endswith") return Value(AffixMatches(s, Arg(args, 0, "suffix"), false));
  if (name == "upper") return Value(MapAscii(s, [](int c) { return std::toupper(c); }));
  if (name == "lower") return Value(MapAscii(s, [](int c) { return std::tolower(c); }));
  if (name == "title") return Value(Title(s));
  if (name == "capitalize") return Value(Capitalize(s));
  if (name == "replace") {
    PDSERVE_ASSIGN_OR_RETURN(std::string from, StringArg(args, 0, "old", "replace"));
    PDSERVE_ASSIGN_OR_RETURN(std::string to, StringArg(args, 1, "new", "replace"));
    if (from.empty()) return Value(s);
    std::string out;
    size_t start = 0;
    for (size_t f; (f = s.find(from, start)) != std::string::npos; start = f + from.size()) {
      out += s.substr(start, f - start) + to;
    }
    return Value(out + s.substr(start));
  }
  if (name == "count" || name == "find") {
    PDSERVE_ASSIGN_OR_RETURN(std::string needle, StringArg(args, 0, "sub", name));
    if (name == "find") {
      const size_t f = s.find(needle);
      return Value(f == std::string::npos ? int64_t{-1} : static_cast<int64_t>(f));
    }
    int64_t n = 0;
    for (size_t f = 0; !needle.empty() && (f = s.find(needle, f)) != std::string::npos;
         f += needle.size()) {
      ++n;
    }
    return Value(n);
  }
  return Value();
}

absl::StatusOr<Value> ObjectMethod(const Object& o, const std::string& name,
                                   const Arguments& args) {
  if (name == "items" || name == "keys" || name == "values") {
    Array out;
    for (const auto& [key, value] : o.entries) {
      if (name == "items") out.push_back(Value(Array{Value(key), value}));
      if (name == "keys") out.push_back(Value(key));
      if (name == "values") out.push_back(value);
    }
    return Value(std::move(out));
  }
  if (name == "get") {
    const Value key = Arg(args, 0, "key");
    const Value* found = key.is_string() ? o.Find(key.AsString()) : nullptr;
    return found != nullptr ? *found : Arg(args, 1, "default", Value::None());
  }
  return Value();
}

bool HasStringMethod(const std::string& name) {
  static constexpr const char* kNames[] = {"strip",    "lstrip", "rstrip", "split", "startswith",
                                           "endswith", "upper",  "lower",  "title", "capitalize",
                                           "replace",  "count",  "find"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

absl::StatusOr<Value> Abs(const Value& v) {
  if (v.kind() == Value::Kind::kInt) return Value(v.AsInt() < 0 ? -v.AsInt() : v.AsInt());
  if (v.is_number()) return Value(std::fabs(v.AsDouble()));
  return Error(absl::StrCat("abs: ", v.KindName(), " is not a number"));
}

absl::StatusOr<Value> SelectAttr(const Value& v, const Arguments& args, bool reject) {
  if (!v.is_array()) return Error("selectattr/rejectattr need a list");
  const Value attribute = Arg(args, 0, "attribute");
  if (!attribute.is_string()) return Error("selectattr/rejectattr need an attribute name");
  const Value test = Arg(args, 1, "test");
  Arguments test_args;
  for (size_t i = 2; i < args.positional.size(); ++i)
    test_args.positional.push_back(args.positional[i]);
  Array out;
  for (const Value& item : v.AsArray()) {
    const Value* field = item.is_object() ? item.AsObject().Find(attribute.AsString()) : nullptr;
    const Value value = field != nullptr ? *field : Value();
    bool keep = value.IsTruthy();
    if (test.is_string()) {
      PDSERVE_ASSIGN_OR_RETURN(keep, ApplyTest(test.AsString(), value, test_args));
    }
    if (keep != reject) out.push_back(item);
  }
  return Value(std::move(out));
}

int64_t FloorMod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

int64_t FloorDiv(int64_t a, int64_t b) { return (a - FloorMod(a, b)) / b; }

}  // namespace

absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const Arguments& args) {
  if (name == "trim") {
    if (!v.is_string()) return Error(absl::StrCat("trim: ", v.KindName(), " is not a string"));
    return StringMethod(v.AsString(), "strip", args);
  }
  if (name == "length" || name == "count") {
    const int64_t n = Length(v);
    if (n < 0) return Error(absl::StrCat(name, ": ", v.KindName(), " has no length"));
    return Value(n);
  }
  if (name == "tojson") {
    const Value indent = Arg(args, 0, "indent");
    PDSERVE_ASSIGN_OR_RETURN(std::string json,
                             v.ToJson(indent.kind() == Value::Kind::kInt ? indent.AsInt() : -1));
    return Value(std::move(json));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    if (!v.is_string()) return Error(absl::StrCat(name, ": ", v.KindName(), " is not a string"));
    return StringMethod(v.AsString(), name, args);
  }
  if (name == "replace") {
    if (!v.is_string()) return Error(absl::StrCat("replace: ", v.KindName(), " is not a string"));
    return StringMethod(v.AsString(), "replace", args);
  }
  if (name == "first" || name == "last") {
    PDSERVE_ASSIGN_OR_RETURN(Array items, v.Items());
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    PDSERVE_ASSIGN_OR_RETURN(Array items, v.Items());
    const Value sep = Arg(args, 0, "d", Value(""));
    std::vector<std::string> parts;
    for (const Value& item : items) parts.push_back(item.ToString());
    return Value(absl::StrJoin(parts, sep.ToString()));
  }
  if (name == "default" || name == "d") {
    const bool boolean = Arg(args, 1, "boolean", Value(false)).IsTruthy();
    const bool use_default = v.is_undefined() || (boolean && !v.IsTruthy());
    return use_default ? Arg(args, 0, "default_value", Value("")) : v;
  }
  if (name == "list") {
    PDSERVE_ASSIGN_OR_RETURN(Array items, v.Items());
    return Value(std::move(items));
  }
  if (name == "string") return Value(v.ToString());
  if (name == "safe") return v;
  if (name == "int" || name == "float") {
    double d = 0;
    if (v.is_number()) {
      d = v.AsDouble();
    } else if (v.is_string()) {
      char* end = nullptr;
      d = std::strtod(v.AsString().c_str(), &end);
    } else if (v.kind() == Value::Kind::kBool) {
      d = v.AsBool();
    }
    if (name == "float") return Value(d);
    return Value(static_cast<int64_t>(std::trunc(d)));
  }
  if (name == "items") {
    if (!v.is_object()) return Error(absl::StrCat("items: ", v.KindName(), " is not a mapping"));
    return ObjectMethod(v.AsObject(), "items", args);
  }
  if (name == "reverse") {
    PDSERVE_ASSIGN_OR_RETURN(Array items, v.Items());
    std::reverse(items.begin(), items.end());
    if (!v.is_string()) return Value(std::move(items));
    std::string out;
    for (const Value& c : items) out += c.AsString();
    return Value(out);
  }
  if (name == "abs") return Abs(v);
  if (name == "map") {
    const Value attribute = KeywordArg(args, "attribute");
    if (!v.is_array() || !attribute.is_string()) return Error("map: only map(attribute=...)");
    Array out;
    for (const Value& item : v.AsArray()) {
      const Value* field = item.is_object() ? item.AsObject().Find(attribute.AsString()) : nullptr;
      out.push_back(field != nullptr ? *field : KeywordArg(args, "default"));
    }
    return Value(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr") {
    return SelectAttr(v, args, name == "rejectattr");
  }
  return Error(absl::StrCat("filter '", name, "' is not supported"));
}

absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const Arguments& args) {
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
  if (name == "eq" || name == "equalto" || name == "sameas") return v.Equals(Arg(args, 0, "other"));
  if (name == "ne") return !v.Equals(Arg(args, 0, "other"));
  if (name == "in") {
    PDSERVE_ASSIGN_OR_RETURN(Value in, BinaryOp("in", v, Arg(args, 0, "seq")));
    return in.AsBool();
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    PDSERVE_ASSIGN_OR_RETURN(Value mapped, StringMethod(v.AsString(), name, args));
    return mapped.AsString() == v.AsString();
  }
  return Error(absl::StrCat("test '", name, "' is not supported"));
}

Value BoundMethod(const Value& object, const std::string& name) {
  const bool string_method = object.is_string() && HasStringMethod(name);
  const bool object_method = object.is_object() && (name == "items" || name == "keys" ||
                                                    name == "values" || name == "get");
  if (!string_method && !object_method) return Value();
  return Value(Function([object, name](const Arguments& args) -> absl::StatusOr<Value> {
    if (object.is_string()) return StringMethod(object.AsString(), name, args);
    return ObjectMethod(object.AsObject(), name, args);
  }));
}

Object Globals() {
  Object g;
  g.Set("raise_exception", Value(Function([](const Arguments& args) -> absl::StatusOr<Value> {
          return Error(absl::StrCat("the template raised: ", Arg(args, 0, "message").ToString()));
        })));
  g.Set("namespace", Value(Function([](const Arguments& args) -> absl::StatusOr<Value> {
          Object ns;
          ns.is_namespace = true;
          for (const auto& [key, value] : args.keyword) ns.Set(key, value);
          return Value(std::move(ns));
        })));
  g.Set("range", Value(Function([](const Arguments& args) -> absl::StatusOr<Value> {
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
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (out.size() >= kMaxRange) return Error("range: over 1048576 items");
            out.push_back(Value(i));
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

absl::StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b) {
  using K = Value::Kind;
  const auto type_error = [&]() {
    return Error(absl::StrCat("unsupported operand kinds for '", op, "': ", a.KindName(), " and ",
                              b.KindName()));
  };
  if (op == "in") {
    if (b.is_string() && a.is_string())
      return Value(b.AsString().find(a.AsString()) != std::string::npos);
    if (b.is_array()) {
      return Value(std::any_of(b.AsArray().begin(), b.AsArray().end(),
                               [&](const Value& item) { return item.Equals(a); }));
    }
    if (b.is_object()) return Value(a.is_string() && b.AsObject().Find(a.AsString()) != nullptr);
    return type_error();
  }
  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    int cmp;
    if (a.is_number() && b.is_number()) {
      cmp = a.AsDouble() < b.AsDouble() ? -1 : a.AsDouble() > b.AsDouble() ? 1 : 0;
    } else if (a.is_string() && b.is_string()) {
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
    if (a.is_string() && b.is_string()) return Value(a.AsString() + b.AsString());
    if (a.is_array() && b.is_array()) {
      Array out = a.AsArray();
      out.insert(out.end(), b.AsArray().begin(), b.AsArray().end());
      return Value(std::move(out));
    }
  }
  if (op == "*" &&
      ((a.is_string() && b.kind() == K::kInt) || (a.kind() == K::kInt && b.is_string()))) {
    const std::string& s = a.is_string() ? a.AsString() : b.AsString();
    const int64_t n = a.is_string() ? b.AsInt() : a.AsInt();
    if (n > 0 && static_cast<double>(s.size()) * n > (1 << 24))
      return Error("'*': result too long");
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(out);
  }
  if (!a.is_number() || !b.is_number()) return type_error();
  const bool ints = a.kind() == K::kInt && b.kind() == K::kInt;
  if (op == "/") {
    if (b.AsDouble() == 0) return Error("division by zero");
    return Value(a.AsDouble() / b.AsDouble());
  }
  if (ints) {
    const int64_t x = a.AsInt(), y = b.AsInt();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (y == 0) return Error("division by zero");
    if (op == "//") return Value(FloorDiv(x, y));
    if (op == "%") return Value(FloorMod(x, y));
  } else {
    const double x = a.AsDouble(), y = b.AsDouble();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (y == 0) return Error("division by zero");
    if (op == "//") return Value(std::floor(x / y));
    if (op == "%") return Value(x - y * std::floor(x / y));
  }
  return type_error();
}

absl::StatusOr<Value> Slice(const Value& value, const Value& start_v, const Value& stop_v,
                            const Value& step_v) {
  PDSERVE_ASSIGN_OR_RETURN(
      Array items,
      value.is_string() || value.is_array()
          ? value.Items()
          : absl::StatusOr<Array>(Error(absl::StrCat("cannot slice a ", value.KindName()))));
  const auto as_int = [](const Value& v, int64_t fallback) {
    return v.kind() == Value::Kind::kInt ? v.AsInt() : fallback;
  };
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t step = as_int(step_v, 1);
  if (step == 0) return Error("slice step is zero");
  const auto clamp = [&](int64_t i, int64_t low, int64_t high) {
    if (i < 0) i += n;
    return std::clamp(i, low, high);
  };
  Array out;
  if (step > 0) {
    const int64_t start = clamp(as_int(start_v, 0), 0, n), stop = clamp(as_int(stop_v, n), 0, n);
    for (int64_t i = start; i < stop; i += step) out.push_back(items[i]);
  } else {
    const int64_t start =
        start_v.kind() == Value::Kind::kInt ? clamp(start_v.AsInt(), -1, n - 1) : n - 1;
    const int64_t stop = stop_v.kind() == Value::Kind::kInt ? clamp(stop_v.AsInt(), -1, n - 1) : -1;
    for (int64_t i = start; i > stop; i += step) out.push_back(items[i]);
  }
  if (!value.is_string()) return Value(std::move(out));
  std::string s;
  for (const Value& c : out) s += c.AsString();
  return Value(s);
}

}  // namespace pdserve::jinja
