#include "core/template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string_view>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/tokenizer/unicode.h"
#include "nlohmann/json.hpp"

namespace pdserve::jinja {
namespace {

// Python's repr of a float.
std::string FloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const double magnitude = std::fabs(v);
  if (v == 0 || (magnitude >= 1e-4 && magnitude < 1e16)) {
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
    std::string s(buf, end);
    if (s.find('.') == std::string::npos) s += ".0";
    return s;
  }
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string s(buf, end);  // e.g. 1e+16, 1.5e-05: Python writes at least two exponent digits
  return s;
}

std::string PythonStringRepr(const std::string& s) {
  const char quote =
      s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out + quote;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// Containers and functions are released through a queue on the stack of the outermost release on
// the thread: what a released container or function held is released after it, in a loop, not
// from inside its destructor. So freeing a list nested, or a chain of namespaces linked, a
// million deep takes constant stack.
struct PendingRelease {
  void* object;
  void (*release)(void*);
};
thread_local absl::InlinedVector<PendingRelease, 8>* pending_releases = nullptr;

template <typename T>
struct QueuedDelete {
  void operator()(T* object) const {
    const PendingRelease release{object, [](void* p) { delete static_cast<T*>(p); }};
    if (pending_releases != nullptr) {
      pending_releases->push_back(release);
      return;
    }
    absl::InlinedVector<PendingRelease, 8> queue{release};
    pending_releases = &queue;
    while (!queue.empty()) {
      const PendingRelease next = queue.back();
      queue.pop_back();
      next.release(next.object);
    }
    pending_releases = nullptr;
  }
};

// Appends `piece` to `*out` unless the result would be over max_string_bytes; charges its bytes.
absl::Status PutChecked(std::string_view piece, Budget& budget, std::string* out) {
  PDSERVE_RETURN_IF_ERROR(budget.CheckString(static_cast<int64_t>(out->size() + piece.size())));
  PDSERVE_RETURN_IF_ERROR(budget.Work(static_cast<int64_t>(piece.size())));
  out->append(piece);
  return absl::OkStatus();
}

// The identity of a container (the array or object it shares), else nullptr.
const void* ContainerOf(const Value& v) {
  if (v.is_array()) return &v.AsArray();
  if (v.is_object()) return &v.AsObject();
  return nullptr;
}

// Walks a value for ToString (Python's repr) or ToJson (json.dumps), under a budget. `open_`
// holds the containers being walked, to find one inside itself.
class Writer {
 public:
  Writer(Budget& budget, std::string* out) : budget_(budget), out_(out) {}

  // Python's str(): strings bare at the top level, quoted inside containers.
  absl::Status Repr(const Value& v, bool top) {
    switch (v.kind()) {
      case Value::Kind::kUndefined:
        return absl::OkStatus();
      case Value::Kind::kNone:
        return Put("None");
      case Value::Kind::kBool:
        return Put(v.AsBool() ? "True" : "False");
      case Value::Kind::kInt:
        return Put(absl::StrCat(v.AsInt()));
      case Value::Kind::kFloat:
        return Put(FloatRepr(v.AsDouble()));
      case Value::Kind::kString:
        return Put(top ? v.AsString() : PythonStringRepr(v.AsString()));
      case Value::Kind::kFunction:
        return Put("<function>");
      case Value::Kind::kArray:
      case Value::Kind::kObject:
        break;
    }
    const bool array = v.is_array();
    if (IsOpen(v)) return Put(array ? "[...]" : "{...}");
    PDSERVE_RETURN_IF_ERROR(Open(v));
    PDSERVE_RETURN_IF_ERROR(Put(array ? "[" : "{"));
    const size_t n = array ? v.AsArray().size() : v.AsObject().entries.size();
    for (size_t i = 0; i < n; ++i) {
      PDSERVE_RETURN_IF_ERROR(budget_.WorkItems(1));
      if (i > 0) PDSERVE_RETURN_IF_ERROR(Put(", "));
      if (!array) {
        const auto& [key, item] = v.AsObject().entries[i];
        PDSERVE_RETURN_IF_ERROR(Put(PythonStringRepr(key) + ": "));
      }
      PDSERVE_RETURN_IF_ERROR(Repr(array ? v.AsArray()[i] : v.AsObject().entries[i].second, false));
    }
    open_.pop_back();
    return Put(array ? "]" : "}");
  }

  // json.dumps with `indent` (< 0: on one line).
  absl::Status Json(const Value& v, int64_t indent) {
    switch (v.kind()) {
      case Value::Kind::kUndefined:
      case Value::Kind::kFunction:
        return absl::InvalidArgumentError(absl::StrCat("tojson: cannot serialize ", v.KindName()));
      case Value::Kind::kNone:
        return Put("null");
      case Value::Kind::kBool:
        return Put(v.AsBool() ? "true" : "false");
      case Value::Kind::kInt:
        return Put(absl::StrCat(v.AsInt()));
      case Value::Kind::kFloat:
        return Put(FloatRepr(v.AsDouble()));
      case Value::Kind::kString:
        return Put(JsonString(v.AsString()));
      case Value::Kind::kArray:
      case Value::Kind::kObject:
        break;
    }
    const bool array = v.is_array();
    const size_t n = array ? v.AsArray().size() : v.AsObject().entries.size();
    if (n == 0) return Put(array ? "[]" : "{}");
    if (IsOpen(v)) return absl::InvalidArgumentError("tojson: circular reference");
    PDSERVE_RETURN_IF_ERROR(Open(v));
    const int64_t level = static_cast<int64_t>(open_.size());
    PDSERVE_RETURN_IF_ERROR(Put(array ? "[" : "{"));
    for (size_t i = 0; i < n; ++i) {
      PDSERVE_RETURN_IF_ERROR(budget_.WorkItems(1));
      if (i > 0) PDSERVE_RETURN_IF_ERROR(Put(indent < 0 ? ", " : ","));
      PDSERVE_RETURN_IF_ERROR(LineBreak(indent, level));
      if (!array) {
        PDSERVE_RETURN_IF_ERROR(Put(JsonString(v.AsObject().entries[i].first) + ": "));
      }
      PDSERVE_RETURN_IF_ERROR(
          Json(array ? v.AsArray()[i] : v.AsObject().entries[i].second, indent));
    }
    open_.pop_back();
    PDSERVE_RETURN_IF_ERROR(LineBreak(indent, level - 1));
    return Put(array ? "]" : "}");
  }

 private:
  absl::Status Put(std::string_view piece) { return PutChecked(piece, budget_, out_); }
  // A newline and `indent` spaces per level, checked before it is built; nothing if indent < 0.
  absl::Status LineBreak(int64_t indent, int64_t level) {
    if (indent < 0) return absl::OkStatus();
    const int64_t max = budget_.limits().max_string_bytes;
    if (indent > max) return budget_.CheckString(indent);  // the limit's error
    const int64_t size = 1 + indent * level;               // level <= max_depth: no overflow
    PDSERVE_RETURN_IF_ERROR(budget_.CheckString(static_cast<int64_t>(out_->size()) + size));
    PDSERVE_RETURN_IF_ERROR(budget_.Work(size));
    out_->push_back('\n');
    out_->append(static_cast<size_t>(indent * level), ' ');
    return absl::OkStatus();
  }
  bool IsOpen(const Value& v) const {
    return std::find(open_.begin(), open_.end(), ContainerOf(v)) != open_.end();
  }
  absl::Status Open(const Value& v) {
    PDSERVE_RETURN_IF_ERROR(budget_.CheckDepth(static_cast<int>(open_.size()) + 1));
    open_.push_back(ContainerOf(v));
    return absl::OkStatus();
  }

  Budget& budget_;
  std::string* out_;
  std::vector<const void*> open_;
};

absl::StatusOr<bool> Equal(const Value& a, const Value& b, Budget& budget, int depth);

absl::StatusOr<bool> EqualContainers(const Value& a, const Value& b, Budget& budget, int depth) {
  if (ContainerOf(a) == ContainerOf(b)) return true;
  PDSERVE_RETURN_IF_ERROR(budget.CheckDepth(depth));
  if (a.is_array()) {
    const Array &x = a.AsArray(), &y = b.AsArray();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      PDSERVE_RETURN_IF_ERROR(budget.WorkItems(1));
      PDSERVE_ASSIGN_OR_RETURN(const bool equal, Equal(x[i], y[i], budget, depth + 1));
      if (!equal) return false;
    }
    return true;
  }
  const Object &x = a.AsObject(), &y = b.AsObject();
  if (x.entries.size() != y.entries.size()) return false;
  for (const auto& [key, value] : x.entries) {
    // The pair, and the lookup through y.
    PDSERVE_RETURN_IF_ERROR(budget.WorkItems(1 + static_cast<int64_t>(y.entries.size())));
    const Value* theirs = y.Find(key);
    if (theirs == nullptr) return false;
    PDSERVE_ASSIGN_OR_RETURN(const bool equal, Equal(value, *theirs, budget, depth + 1));
    if (!equal) return false;
  }
  return true;
}

absl::StatusOr<bool> Equal(const Value& a, const Value& b, Budget& budget, int depth) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kInt && b.kind() == K::kInt) return a.AsInt() == b.AsInt();
    return a.AsDouble() == b.AsDouble();
  }
  const auto number = [](const Value& v) {
    return v.kind() == K::kBool ? Value(v.AsBool() ? 1 : 0) : v;
  };
  if ((a.kind() == K::kBool && b.is_number()) || (a.is_number() && b.kind() == K::kBool)) {
    return number(a).AsDouble() == number(b).AsDouble();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kBool:
      return a.AsBool() == b.AsBool();
    case K::kString:
      if (a.AsString().size() != b.AsString().size()) return false;
      PDSERVE_RETURN_IF_ERROR(budget.Work(static_cast<int64_t>(a.AsString().size())));
      return a.AsString() == b.AsString();
    case K::kArray:
    case K::kObject:
      return EqualContainers(a, b, budget, depth);
    case K::kFunction:
      return &a.AsFunction() == &b.AsFunction();
    default:
      return false;
  }
}

}  // namespace

Value Value::None() {
  Value v;
  v.data_ = NoneTag{};
  return v;
}

Value::Value(Array a)
    : data_(std::shared_ptr<Array>(new Array(std::move(a)), QueuedDelete<Array>())) {}

Value::Value(Object o)
    : data_(std::shared_ptr<Object>(new Object(std::move(o)), QueuedDelete<Object>())) {}

Value::Value(Function f)
    : data_(std::shared_ptr<Function>(new Function(std::move(f)), QueuedDelete<Function>())) {}

Value Value::FromJson(const nlohmann::json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return None();
    case nlohmann::json::value_t::boolean:
      return Value(json.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(json.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(json.get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value(json.get<double>());
    case nlohmann::json::value_t::string:
      return Value(json.get<std::string>());
    case nlohmann::json::value_t::array: {
      Array a;
      for (const auto& item : json) a.push_back(FromJson(item));
      return Value(std::move(a));
    }
    case nlohmann::json::value_t::object: {
      Object o;
      for (const auto& [key, item] : json.items()) o.entries.emplace_back(key, FromJson(item));
      return Value(std::move(o));
    }
    default:
      return Value();
  }
}

Value::Kind Value::kind() const { return static_cast<Kind>(data_.index()); }

double Value::AsDouble() const {
  return kind() == Kind::kInt ? static_cast<double>(AsInt()) : std::get<double>(data_);
}

bool Value::IsTruthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return AsBool();
    case Kind::kInt:
      return AsInt() != 0;
    case Kind::kFloat:
      return AsDouble() != 0;
    case Kind::kString:
      return !AsString().empty();
    case Kind::kArray:
      return !AsArray().empty();
    case Kind::kObject:
      return !AsObject().entries.empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

absl::StatusOr<std::string> Value::ToString(Budget& budget) const {
  std::string out;
  PDSERVE_RETURN_IF_ERROR(Writer(budget, &out).Repr(*this, /*top=*/true));
  return out;
}

absl::StatusOr<std::string> Value::ToJson(int64_t indent, Budget& budget) const {
  std::string out;
  PDSERVE_RETURN_IF_ERROR(Writer(budget, &out).Json(*this, indent));
  return out;
}

absl::StatusOr<bool> Value::Equals(const Value& other, Budget& budget) const {
  return Equal(*this, other, budget, 1);
}

absl::StatusOr<Array> Value::Items(Budget& budget) const {
  switch (kind()) {
    case Kind::kArray:
      PDSERVE_RETURN_IF_ERROR(budget.Work(WorkBytes()));
      return AsArray();
    case Kind::kObject: {
      PDSERVE_RETURN_IF_ERROR(budget.Work(WorkBytes()));
      Array keys;
      keys.reserve(AsObject().entries.size());
      for (const auto& entry : AsObject().entries) {
        PDSERVE_RETURN_IF_ERROR(budget.Work(static_cast<int64_t>(entry.first.size())));
        keys.push_back(Value(entry.first));
      }
      return keys;
    }
    case Kind::kString: {
      const std::string& s = AsString();
      PDSERVE_RETURN_IF_ERROR(budget.Work(static_cast<int64_t>(s.size())));
      Array chars;
      for (size_t pos = 0; pos < s.size();) {
        PDSERVE_RETURN_IF_ERROR(budget.CheckItems(static_cast<int64_t>(chars.size()) + 1));
        PDSERVE_RETURN_IF_ERROR(budget.WorkItems(1));
        const int length = DecodeUtf8(s, pos).length;
        chars.push_back(Value(s.substr(pos, length)));
        pos += length;
      }
      return chars;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(KindName(), " is not iterable"));
  }
}

int64_t Value::WorkBytes() const {
  switch (kind()) {
    case Kind::kString:
      return static_cast<int64_t>(AsString().size());
    case Kind::kArray:
      return static_cast<int64_t>(AsArray().size()) * kWorkBytesPerItem;
    case Kind::kObject:
      return static_cast<int64_t>(AsObject().entries.size()) * kWorkBytesPerItem;
    default:
      return 0;
  }
}

std::string Value::KindName() const {
  static constexpr const char* kNames[] = {"undefined", "none", "boolean", "integer", "float",
                                           "string",    "list", "mapping", "function"};
  return kNames[static_cast<int>(kind())];
}

const Value* Object::Find(const std::string& key) const {
  for (const auto& entry : entries) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

void Object::Set(const std::string& key, Value value) {
  for (auto& entry : entries) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

}  // namespace pdserve::jinja
