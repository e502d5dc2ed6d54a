// Status propagation macros with the semantics of Abseil's ABSL_RETURN_IF_ERROR and
// ABSL_ASSIGN_OR_RETURN (absent from the Abseil that Debian 12 packages). Header only.
#ifndef PDSERVE_CORE_BASE_STATUS_MACROS_H_
#define PDSERVE_CORE_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PDSERVE_CONCAT_INNER_(a, b) a##b
#define PDSERVE_CONCAT_(a, b) PDSERVE_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function when not OK.
#define PDSERVE_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status pdserve_status_ = (expr);           \
    if (!pdserve_status_.ok()) return pdserve_status_; \
  } while (0)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, else moves the value
// into `lhs` (a declaration such as `auto x` or an existing variable).
#define PDSERVE_ASSIGN_OR_RETURN(lhs, rexpr) \
  PDSERVE_ASSIGN_OR_RETURN_IMPL_(PDSERVE_CONCAT_(pdserve_statusor_, __LINE__), lhs, rexpr)

#define PDSERVE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = *std::move(statusor)

#endif  // PDSERVE_CORE_BASE_STATUS_MACROS_H_
