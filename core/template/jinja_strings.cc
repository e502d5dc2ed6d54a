#include "core/template/jinja_strings.h"

#include <algorithm>
#include <bitset>
#include <cctype>
#include <cstring>

#include "core/base/status_macros.h"
#include "core/template/jinja_builtin_args.h"

namespace pdserve::jinja {
namespace {

constexpr std::string_view kPythonWhitespace = " \t\n\r\f\v";

std::string Strip(const std::string& s, std::string_view chars, bool left, bool right) {
  std::bitset<256> strip;
  for (char c : chars) strip.set(static_cast<unsigned char>(c));
  const auto stripped = [&](char c) { return strip.test(static_cast<unsigned char>(c)); };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end && stripped(s[begin])) ++begin;
  }
  if (right) {
    while (end > begin && stripped(s[end - 1])) --end;
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

// s.split(sep) as a list; at most max_items parts.
absl::StatusOr<Value> Split(const std::string& s, const Value& sep, Budget& budget) {
  Array parts;
  const auto add = [&](size_t begin, size_t end) {
    PDSERVE_RETURN_IF_ERROR(budget.CheckItems(static_cast<int64_t>(parts.size()) + 1));
    PDSERVE_RETURN_IF_ERROR(budget.Work(kWorkBytesPerItem + static_cast<int64_t>(end - begin)));
    parts.push_back(Value(s.substr(begin, end - begin)));
    return absl::OkStatus();
  };
  if (!sep.is_string()) {  // runs of whitespace, no empty parts
    size_t i = 0;
    while (true) {
      i = s.find_first_not_of(kPythonWhitespace, i);
      if (i == std::string::npos) break;
      const size_t end = std::min(s.find_first_of(kPythonWhitespace, i), s.size());
      PDSERVE_RETURN_IF_ERROR(add(i, end));
      i = end;
    }
    return Value(std::move(parts));
  }
  const std::string& d = sep.AsString();
  if (d.empty()) return Error("split: empty separator");
  const Searcher searcher(d);
  size_t start = 0;
  for (size_t found; (found = searcher.Find(s, start)) != std::string::npos;
       start = found + d.size()) {
    PDSERVE_RETURN_IF_ERROR(add(start, found));
  }
  PDSERVE_RETURN_IF_ERROR(add(start, s.size()));
  return Value(std::move(parts));
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

absl::StatusOr<Value> StringMethodResult(const std::string& s, const std::string& name,
                                         const Arguments& args, Budget& budget) {
  const auto chars = [&]() {
    const Value c = Arg(args, 0, "chars");
    return c.is_string() ? std::string(c.AsString()) : std::string(kPythonWhitespace);
  };
  if (name == "strip") return Value(Strip(s, chars(), true, true));
  if (name == "lstrip") return Value(Strip(s, chars(), true, false));
  if (name == "rstrip") return Value(Strip(s, chars(), false, true));
  if (name == "split") return Split(s, Arg(args, 0, "sep"), budget);
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
    const Searcher searcher(from);
    std::string out;
    size_t start = 0;
    for (size_t f; (f = searcher.Find(s, start)) != std::string::npos; start = f + from.size()) {
      PDSERVE_RETURN_IF_ERROR(Append(std::string_view(s).substr(start, f - start), budget, &out));
      PDSERVE_RETURN_IF_ERROR(Append(to, budget, &out));
    }
    PDSERVE_RETURN_IF_ERROR(Append(std::string_view(s).substr(start), budget, &out));
    return Value(std::move(out));
  }
  if (name == "count" || name == "find") {
    PDSERVE_ASSIGN_OR_RETURN(std::string needle, StringArg(args, 0, "sub", name));
    const Searcher searcher(needle);
    if (name == "find") {
      const size_t f = searcher.Find(s);
      return Value(f == std::string::npos ? int64_t{-1} : static_cast<int64_t>(f));
    }
    int64_t n = 0;
    for (size_t f = 0; !needle.empty() && (f = searcher.Find(s, f)) != std::string::npos;
         f += needle.size()) {
      ++n;
    }
    return Value(n);
  }
  return Value();
}

}  // namespace

absl::StatusOr<Value> StringMethod(const std::string& s, const std::string& name,
                                   const Arguments& args, Budget& budget) {
  PDSERVE_RETURN_IF_ERROR(budget.Work(static_cast<int64_t>(s.size())));
  for (const Value& arg : args.positional) PDSERVE_RETURN_IF_ERROR(Read(arg, budget));
  for (const auto& [key, arg] : args.keyword) PDSERVE_RETURN_IF_ERROR(Read(arg, budget));
  PDSERVE_ASSIGN_OR_RETURN(Value result, StringMethodResult(s, name, args, budget));
  if (name == "split") return result;  // charged as it is built
  return New(std::move(result), budget);
}

bool HasStringMethod(const std::string& name) {
  static constexpr const char* kNames[] = {"strip",    "lstrip", "rstrip", "split", "startswith",
                                           "endswith", "upper",  "lower",  "title", "capitalize",
                                           "replace",  "count",  "find"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

}  // namespace pdserve::jinja
