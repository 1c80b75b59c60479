// The job's workers as one shard knows them.
//
// Membership holds, for each rank, the incarnation it holds now (its
// credential: drawn at random, so that no other worker can guess it and push
// or leave in that rank's name), which earlier incarnations were revoked and
// why (to tell them when they call again: replaced, evicted, or registered
// under a signature rank 0 overruled), and which ranks have left.
//
// Thread-safe: one lock, a leaf of the server's lock order (see
// parameter_server.h). StepBarriers calls Admit and RevokeAllButRankZero
// while it holds its own lock, so that a signature's adoption and the
// incarnations it admits are one step; Membership never calls out.
#ifndef LOCKSTEP_SERVER_CORE_MEMBERSHIP_H_
#define LOCKSTEP_SERVER_CORE_MEMBERSHIP_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/leave_note.h"

namespace lockstep {

class Membership final {
 public:
  // `server_incarnation` names this server in the errors that send a worker
  // to register again.
  Membership(int num_workers, int64_t server_incarnation);

  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  int num_workers() const { return num_workers_; }
  int64_t server_incarnation() const { return server_incarnation_; }

  // OK when `incarnation` is `rank`'s current one. Otherwise the code tells
  // the worker what to do (docs/faults.md): FAILED_PRECONDITION (unknown
  // rank, or revoked under another signature) and ALREADY_EXISTS
  // (replaced) and PERMISSION_DENIED (never issued) stop it; NOT_FOUND (not
  // registered: the server restarted) and ABORTED (evicted) send it to
  // register again.
  absl::Status Check(int rank, int64_t incarnation) const;

  // Issues `rank` (in range: the caller checked) a new incarnation, unused
  // and never revoked here; the one it replaces is told so from now on.
  // The rank has not left. INTERNAL when no random bytes can be had.
  absl::StatusOr<int64_t> Admit(int rank);

  // Every registered rank must register again: its calls get ABORTED
  // with `reason`.
  void RevokeAll(const std::string& reason);
  // Rank 0 brought another signature than the provisional one: every other
  // rank's registration is revoked with FAILED_PRECONDITION `reason`.
  void RevokeAllButRankZero(const std::string& reason);

  // The ranks that did not push `step` within the step timeout: each
  // registered one is revoked (ABORTED: register again).
  void Evict(absl::Span<const int> ranks, int64_t step);

  // Marks `rank` as left. True when a member left (checked like Check);
  // false for incarnation 0 of a rank that is not registered or has left
  // already (an all-reduce worker, which never registers, or an elastic
  // job's absent rank): it leaves too, but is nobody's member.
  // `note` says why; the last one of each rank is kept until the rank
  // registers again (Ends).
  absl::StatusOr<bool> Leave(int rank, int64_t incarnation,
                             const LeaveNote& note = {});

  // A rank that never registered (an all-reduce one) and left after a stop
  // signal or a failure is in the job again (a group formed with it): it
  // has not left. True when it had; a rank that finished (or was left for
  // at the job's end) stays left.
  bool Returned(int rank);

  // The ranks whose last word was `reason` and that have not registered
  // since, in rank order, with their notes.
  std::vector<std::pair<int, LeaveNote>> Ends(LeaveReason reason) const;

  // The registered ranks and those that have left, in rank order.
  void Roster(std::vector<int>* registered, std::vector<int>* left) const;

  // True once every rank has left; false when `timeout` passes first.
  bool WaitUntilAllLeft(absl::Duration timeout) const;

 private:
  // Revokes the registrations of ranks `first` and up: their calls get
  // `why`.
  void RevokeFrom(int first, const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckLocked(int rank, int64_t incarnation) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_workers_;
  const int64_t server_incarnation_;

  mutable absl::Mutex mu_;
  std::vector<int64_t> incarnations_ ABSL_GUARDED_BY(mu_);  // 0: none.
  std::vector<bool> left_ ABSL_GUARDED_BY(mu_);
  std::vector<LeaveNote> notes_ ABSL_GUARDED_BY(mu_);  // Of the last leave.
  // Why a revoked or evicted incarnation was dropped, to tell it when it
  // calls again.
  absl::flat_hash_map<int64_t, absl::Status> revoked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_MEMBERSHIP_H_
