// jinja::Value: the values a Jinja template computes with, with Python's semantics where chat
// templates rely on them (truthiness, str(), ==, json.dumps for tojson). Strings, arrays,
// objects and functions are shared on copy, so copying any value is O(1); strings and arrays
// are immutable, and a namespace() mutated through one copy is seen by all (as in Jinja).
// Objects keep their keys' insertion order.
//
// Printing, tojson, == and Items() walk values under a render's Budget (jinja_limits.h): their
// work, the size of what they build and the nesting they descend into are bounded, and a value
// that contains itself (only a namespace can be made to) is detected rather than recursed into.
// Releasing a value frees nested containers from a queue, not recursively, so a value nested or
// chained deeper than the stack allows is freed safely. Reference cycles are not collected: the
// renderer breaks the ones a template can make (jinja_template.h).
//
// A plain value type; not thread-safe when shared (a Template's own literal values are only read).
#ifndef PDSERVE_CORE_TEMPLATE_JINJA_VALUE_H_
#define PDSERVE_CORE_TEMPLATE_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "core/template/jinja_limits.h"
#include "nlohmann/json_fwd.hpp"

namespace pdserve::jinja {

class Value;
using Array = std::vector<Value>;
struct Object;
// A callable's arguments: positional, then keyword.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<absl::StatusOr<Value>(const Arguments&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction };

  Value() = default;  // undefined
  static Value None();
  Value(bool b) : data_(b) {}                                                         // NOLINT
  Value(int v) : data_(static_cast<int64_t>(v)) {}                                    // NOLINT
  Value(int64_t v) : data_(v) {}                                                      // NOLINT
  Value(double v) : data_(v) {}                                                       // NOLINT
  Value(std::string s) : data_(std::make_shared<const std::string>(std::move(s))) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                                     // NOLINT
  Value(Array a);                                                                     // NOLINT
  Value(Object o);                                                                    // NOLINT
  Value(Function f);                                                                  // NOLINT
  static Value FromJson(const nlohmann::json& json);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_number() const { return kind() == Kind::kInt || kind() == Kind::kFloat; }
  bool is_array() const { return kind() == Kind::kArray; }
  bool is_object() const { return kind() == Kind::kObject; }

  bool AsBool() const { return std::get<bool>(data_); }
  int64_t AsInt() const { return std::get<int64_t>(data_); }
  double AsDouble() const;  // int or float
  const std::string& AsString() const {
    return *std::get<std::shared_ptr<const std::string>>(data_);
  }
  const Array& AsArray() const { return *std::get<std::shared_ptr<Array>>(data_); }
  Object& AsObject() const { return *std::get<std::shared_ptr<Object>>(data_); }
  const Function& AsFunction() const { return *std::get<std::shared_ptr<Function>>(data_); }

  // Python's truthiness: undefined, none, false, 0, "" and empty containers are false.
  bool IsTruthy() const;
  // What {{ value }} prints: undefined "", none "None", booleans "True"/"False", floats as
  // Python's repr, containers as Python's repr (a container inside itself as [...] or {...}).
  // Charges `budget` each element visited; fails over max_string_bytes or max_depth.
  absl::StatusOr<std::string> ToString(Budget& budget) const;
  // json.dumps(value, ensure_ascii=False, indent=indent) (indent < 0: none); InvalidArgument
  // for an undefined value, a function or a container inside itself. Charged as ToString.
  absl::StatusOr<std::string> ToJson(int64_t indent, Budget& budget) const;
  // Python's ==: numbers by value, containers element-wise (a container equals itself without
  // being walked). Charges `budget` each pair of elements and the bytes of strings compared;
  // fails over max_depth.
  absl::StatusOr<bool> Equals(const Value& other, Budget& budget) const;
  // Elements to iterate: an array's items, an object's keys, a string's characters (UTF-8 code
  // points); InvalidArgument for other kinds. Charges `budget` the elements built and, for a
  // string, its bytes; fails over max_items.
  absl::StatusOr<Array> Items(Budget& budget) const;
  // What reading this value costs in max_work_bytes: a string's length, kWorkBytesPerItem per
  // element of a list or mapping, 0 for other kinds.
  int64_t WorkBytes() const;
  std::string KindName() const;

 private:
  struct NoneTag {
    bool operator==(const NoneTag&) const = default;
  };
  std::variant<std::monostate, NoneTag, bool, int64_t, double, std::shared_ptr<const std::string>,
               std::shared_ptr<Array>, std::shared_ptr<Object>, std::shared_ptr<Function>>
      data_;
};

struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  bool is_namespace = false;  // attributes may be set ({% set ns.x = ... %})

  const Value* Find(const std::string& key) const;
  void Set(const std::string& key, Value value);
};

}  // namespace pdserve::jinja

#endif  // PDSERVE_CORE_TEMPLATE_JINJA_VALUE_H_
