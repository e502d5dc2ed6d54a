// The budget of one render of a jinja::Template: RenderLimits (the caller's bounds, with defaults
// that every real chat template fits well inside) and Budget (the counters one render charges
// against them). A template is untrusted input, so every step a render takes, every byte it
// writes and every value it builds is charged before or as it happens; going over a limit fails
// the render with InvalidArgument "render limit <name> (<value>) exceeded". InvalidArgument, not
// ResourceExhausted: the template or the conversation is too big for this server, a request
// error that fails the same way every time (ResourceExhausted would tell clients to retry later).
//
// With the defaults a render takes at most a million interpreter steps and 64 MiB of data work
// (each about 0.1 s in an optimized build), and holds at most about 64 MiB of values (every value
// a render creates is charged to max_work_bytes when it is built) besides its output (at most
// 16 MiB). Qwen3's template renders 2,000 turns of 2 KiB (a million tokens) in 13% of the steps
// and 40% of the work.
//
// A Budget belongs to one render on one thread; not thread-safe.
#ifndef PDSERVE_CORE_TEMPLATE_JINJA_LIMITS_H_
#define PDSERVE_CORE_TEMPLATE_JINJA_LIMITS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pdserve::jinja {

struct RenderLimits {
  // Interpreter steps: one per statement executed, per expression evaluated and per loop
  // iteration.
  int64_t max_steps = 1'000'000;
  // Data work, in bytes: the strings an operation builds or scans (their length) and the list or
  // mapping elements it builds, scans, compares or prints (kWorkBytesPerItem each). Bounds the
  // time spent on data and the memory a render holds.
  int64_t max_work_bytes = int64_t{64} << 20;
  // Bytes of the rendered text.
  int64_t max_output_bytes = int64_t{16} << 20;
  // Length in bytes of any one string built (by ~, +, *, join, replace, tojson, printing, ...).
  int64_t max_string_bytes = int64_t{8} << 20;
  // Elements of any one list or mapping built (by range, +, split, list, items(), ...); the
  // default is Jinja's sandbox's range() limit.
  int64_t max_items = 100'000;
  // Nesting of lists and mappings that printing, tojson and == descend into; the outermost
  // container is depth 1. A value that contains itself (through a namespace) prints as Python
  // does ([...] or {...}), fails tojson, and fails == with this limit unless it is compared
  // with itself.
  int max_depth = 100;
};

// What one list or mapping element costs in RenderLimits::max_work_bytes: about what it occupies
// (a Value, and the string it may own).
inline constexpr int64_t kWorkBytesPerItem = 64;

class Budget {
 public:
  explicit Budget(const RenderLimits& limits) : limits_(limits) {}
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;

  const RenderLimits& limits() const { return limits_; }

  // Charges one interpreter step.
  absl::Status Step() {
    if (++steps_ > limits_.max_steps) return Exceeded("max_steps", limits_.max_steps);
    return absl::OkStatus();
  }
  // Charges `bytes` of data work.
  absl::Status Work(int64_t bytes) {
    work_bytes_ += bytes;
    if (work_bytes_ > limits_.max_work_bytes) {
      return Exceeded("max_work_bytes", limits_.max_work_bytes);
    }
    return absl::OkStatus();
  }
  // Charges `items` list or mapping elements of data work.
  absl::Status WorkItems(int64_t items) { return Work(items * kWorkBytesPerItem); }

  // Whether a string of `bytes`, a list or mapping of `items`, a container at `depth` or output
  // of `bytes` in all is within the limits.
  absl::Status CheckString(int64_t bytes) const {
    if (bytes > limits_.max_string_bytes) {
      return Exceeded("max_string_bytes", limits_.max_string_bytes);
    }
    return absl::OkStatus();
  }
  absl::Status CheckItems(int64_t items) const {
    if (items > limits_.max_items) return Exceeded("max_items", limits_.max_items);
    return absl::OkStatus();
  }
  absl::Status CheckDepth(int depth) const {
    if (depth > limits_.max_depth) return Exceeded("max_depth", limits_.max_depth);
    return absl::OkStatus();
  }
  absl::Status CheckOutput(int64_t bytes) const {
    if (bytes > limits_.max_output_bytes) {
      return Exceeded("max_output_bytes", limits_.max_output_bytes);
    }
    return absl::OkStatus();
  }

 private:
  static absl::Status Exceeded(const char* name, int64_t value) {
    return absl::InvalidArgumentError(
        absl::StrCat("render limit ", name, " (", value, ") exceeded"));
  }

  const RenderLimits limits_;
  int64_t steps_ = 0;
  int64_t work_bytes_ = 0;
};

}  // namespace pdserve::jinja

#endif  // PDSERVE_CORE_TEMPLATE_JINJA_LIMITS_H_
