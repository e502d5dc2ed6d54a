// Python's str methods on template strings (s.strip(), s.split(sep), s.replace(old, new), ...) and
// the substring search they and the `in` operator use. Errors are InvalidArgument naming the
// method; work is charged to the render's Budget as jinja_builtins.h describes.
#ifndef PDSERVE_CORE_TEMPLATE_JINJA_STRINGS_H_
#define PDSERVE_CORE_TEMPLATE_JINJA_STRINGS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/template/jinja_limits.h"
#include "core/template/jinja_value.h"

namespace pdserve::jinja {

// Finds a needle in texts in time linear in their lengths, whatever they hold (std::string::find
// takes time proportional to both lengths multiplied): Knuth-Morris-Pratt, skipping with memchr
// to the needle's first byte when no prefix of it is matched.
class Searcher {
 public:
  explicit Searcher(std::string_view needle) : needle_(needle), border_(needle.size() + 1, 0) {
    for (size_t i = 1, k = 0; i < needle.size(); ++i) {
      while (k > 0 && needle[i] != needle[k]) k = border_[k];
      if (needle[i] == needle[k]) ++k;
      border_[i + 1] = k;
    }
  }

  // The first occurrence at or after `from`, else npos. An empty needle is found at `from`.
  size_t Find(std::string_view text, size_t from = 0) const {
    const size_t m = needle_.size();
    if (m == 0) return from <= text.size() ? from : std::string_view::npos;
    for (size_t i = from, k = 0; i < text.size(); ++i) {
      if (k == 0) {
        const void* next = std::memchr(text.data() + i, needle_[0], text.size() - i);
        if (next == nullptr) return std::string_view::npos;
        i = static_cast<const char*>(next) - text.data();
      }
      while (k > 0 && text[i] != needle_[k]) k = border_[k];
      if (text[i] == needle_[k]) ++k;
      if (k == m) return i + 1 - m;
    }
    return std::string_view::npos;
  }

 private:
  std::string_view needle_;
  std::vector<size_t> border_;  // border_[j]: the longest proper border of needle_[0, j)
};

// Whether strings have the method `name`: strip, lstrip, rstrip, split, startswith, endswith,
// upper, lower, title, capitalize, replace, count, find.
bool HasStringMethod(const std::string& name);

// s.name(args): charged reading s and its arguments (needles, affixes, characters to strip) and
// building the result; undefined for a name HasStringMethod does not know.
absl::StatusOr<Value> StringMethod(const std::string& s, const std::string& name,
                                   const Arguments& args, Budget& budget);

}  // namespace pdserve::jinja

#endif  // PDSERVE_CORE_TEMPLATE_JINJA_STRINGS_H_
