#include "core/template/jinja_value.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
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

absl::Status AppendJson(const Value& v, int indent, int depth, std::string* out) {
  const auto line_break = [indent](int level) {
    std::string s;
    if (indent >= 0) {
      s.push_back('\n');
      s.append(static_cast<size_t>(indent) * level, ' ');
    }
    return s;
  };
  const std::string newline = line_break(depth + 1), close = line_break(depth);
  const char* item_separator = indent < 0 ? ", " : ",";
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kFunction:
      return absl::InvalidArgumentError(absl::StrCat("tojson: cannot serialize ", v.KindName()));
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.AsBool() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
      *out += v.ToString();
      return absl::OkStatus();
    case Value::Kind::kString:
      *out += JsonString(v.AsString());
      return absl::OkStatus();
    case Value::Kind::kArray: {
      const Array& a = v.AsArray();
      if (a.empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += "[";
      for (size_t i = 0; i < a.size(); ++i) {
        if (i > 0) *out += item_separator;
        *out += newline;
        if (absl::Status s = AppendJson(a[i], indent, depth + 1, out); !s.ok()) return s;
      }
      *out += close + "]";
      return absl::OkStatus();
    }
    case Value::Kind::kObject: {
      const Object& o = v.AsObject();
      if (o.entries.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      *out += "{";
      for (size_t i = 0; i < o.entries.size(); ++i) {
        if (i > 0) *out += item_separator;
        *out += newline + JsonString(o.entries[i].first) + ": ";
        if (absl::Status s = AppendJson(o.entries[i].second, indent, depth + 1, out); !s.ok()) {
          return s;
        }
      }
      *out += close + "}";
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

}  // namespace

Value Value::None() {
  Value v;
  v.data_ = NoneTag{};
  return v;
}

Value::Value(Object o) : data_(std::make_shared<Object>(std::move(o))) {}

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

std::string Value::ToString() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return AsBool() ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(AsInt());
    case Kind::kFloat:
      return FloatRepr(AsDouble());
    case Kind::kString:
      return AsString();
    case Kind::kArray: {
      std::string out = "[";
      for (size_t i = 0; i < AsArray().size(); ++i) {
        const Value& item = AsArray()[i];
        out += (i > 0 ? ", " : "") +
               (item.is_string() ? PythonStringRepr(item.AsString()) : item.ToString());
      }
      return out + "]";
    }
    case Kind::kObject: {
      std::string out = "{";
      for (size_t i = 0; i < AsObject().entries.size(); ++i) {
        const auto& [key, item] = AsObject().entries[i];
        out += (i > 0 ? ", " : "") + PythonStringRepr(key) + ": " +
               (item.is_string() ? PythonStringRepr(item.AsString()) : item.ToString());
      }
      return out + "}";
    }
    case Kind::kFunction:
      return "<function>";
  }
  return "";
}

absl::StatusOr<std::string> Value::ToJson(int indent) const {
  std::string out;
  if (absl::Status s = AppendJson(*this, indent, 0, &out); !s.ok()) return s;
  return out;
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (kind() == Kind::kInt && other.kind() == Kind::kInt) return AsInt() == other.AsInt();
    return AsDouble() == other.AsDouble();
  }
  if (kind() == Kind::kBool && other.is_number()) return Value(AsBool() ? 1 : 0).Equals(other);
  if (is_number() && other.kind() == Kind::kBool) return other.Equals(*this);
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return AsBool() == other.AsBool();
    case Kind::kString:
      return AsString() == other.AsString();
    case Kind::kArray: {
      const Array &a = AsArray(), &b = other.AsArray();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].Equals(b[i])) return false;
      }
      return true;
    }
    case Kind::kObject: {
      const Object &a = AsObject(), &b = other.AsObject();
      if (a.entries.size() != b.entries.size()) return false;
      for (const auto& [key, value] : a.entries) {
        const Value* theirs = b.Find(key);
        if (theirs == nullptr || !value.Equals(*theirs)) return false;
      }
      return true;
    }
    default:
      return data_ == other.data_;
  }
}

absl::StatusOr<Array> Value::Items() const {
  switch (kind()) {
    case Kind::kArray:
      return AsArray();
    case Kind::kObject: {
      Array keys;
      for (const auto& entry : AsObject().entries) keys.push_back(Value(entry.first));
      return keys;
    }
    case Kind::kString: {
      Array chars;
      const std::string& s = AsString();
      for (size_t pos = 0; pos < s.size();) {
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
