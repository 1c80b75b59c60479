// Status propagation macros. Abseil 20220623 ships Status and StatusOr but not
// these, so they live here, once.
#ifndef LOCKSTEP_COMMON_BASE_STATUS_MACROS_H_
#define LOCKSTEP_COMMON_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define LOCKSTEP_CONCAT_INNER_(a, b) a##b
#define LOCKSTEP_CONCAT_(a, b) LOCKSTEP_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` yields a non-OK status.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status lockstep_status_ = (expr);          \
    if (!lockstep_status_.ok()) return lockstep_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` declares x from an OK StatusOr, or
// returns the error.
#define ASSIGN_OR_RETURN(lhs, rexpr)                                        \
  ASSIGN_OR_RETURN_IMPL_(LOCKSTEP_CONCAT_(lockstep_statusor_, __LINE__), lhs, \
                         rexpr)
#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                           \
  if (!statusor.ok()) return statusor.status();      \
  lhs = std::move(statusor).value()

#endif  // LOCKSTEP_COMMON_BASE_STATUS_MACROS_H_
