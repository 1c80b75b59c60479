// CheckOrDie: the one precondition check of worker/data's functions whose
// signatures have no room for a status (a batch gathered into a caller's
// buffers, a synthetic data set of a caller's size). A broken precondition
// is a programmer error, never bad input (data files are checked and
// answered with a status); a quiet out-of-bounds write would be far worse
// than stopping.
#ifndef LOCKSTEP_WORKER_DATA_CHECK_OR_DIE_H_
#define LOCKSTEP_WORKER_DATA_CHECK_OR_DIE_H_

#include <cstdio>
#include <cstdlib>

namespace lockstep {

// Prints `what` (the precondition, as code) and aborts unless `condition`.
inline void CheckOrDie(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "lockstep data: precondition failed: %s\n", what);
    std::abort();
  }
}

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DATA_CHECK_OR_DIE_H_
