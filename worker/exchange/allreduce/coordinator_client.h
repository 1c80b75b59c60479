// A worker's connection to the Coordinator service
// (proto/lockstep/v1/coordination.proto): blocking Set and waiting Get, each
// bounded by a deadline. Calls wait for the coordinator to come up (gRPC's
// wait-for-ready) until their deadline, so workers may start before the
// server. Protobuf and gRPC types stay inside. Thread-safe.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_COORDINATOR_CLIENT_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_COORDINATOR_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/rpc/group_membership.h"
#include "common/rpc/step_report.h"
#include "common/security/tls_options.h"

namespace lockstep {

// A group member id (GroupRequest::member): non-zero, and drawn by no
// other process (in practice).
uint64_t NewGroupMemberId();

class CoordinatorClient final {
 public:
  // A client of the coordinator at `address` (host:port), secured by `tls`
  // (common/security/tls.h). INVALID_ARGUMENT when the address is empty or the
  // TLS files are bad. Connects lazily.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Create(
      const std::string& address, const TlsOptions& tls = TlsOptions());
  ~CoordinatorClient();

  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  // Stores `value` under `key`, replacing an earlier value unless
  // `if_absent` (see SetRequest). DEADLINE_EXCEEDED when the coordinator
  // does not answer by `deadline`.
  absl::Status Set(absl::string_view key, absl::string_view value,
                   absl::Time deadline, bool if_absent = false);

  // The value of `key`, waiting until it exists; DEADLINE_EXCEEDED when
  // `deadline` passes first.
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Time deadline);

  // One call answered at once (a Get of `key` that does not wait): OK
  // when the coordinator answered, whether or not the key exists. The
  // coordinator counts every call as worker contact (ContactThread).
  absl::Status Ping(absl::string_view key, absl::Time deadline);

  // Hands `rank`'s reports of its steps to the server's straggler verdict
  // (Coordinator.ReportSteps, at most 64); UNIMPLEMENTED from a server that
  // predates it. Counts as contact, as Ping does.
  absl::Status ReportSteps(int rank, absl::Span<const StepReport> reports,
                           absl::Time deadline);

  // The all-reduce group this member belongs to, once it forms
  // (Coordinator.JoinGroup: every rank has joined, or min_size of them and
  // `settle` passed); DEADLINE_EXCEEDED when `deadline` passes first.
  using GroupRequest = ::lockstep::GroupRequest;
  using Group = GroupView;
  absl::StatusOr<Group> JoinGroup(const GroupRequest& request,
                                  absl::Time deadline);

  // The number of members waiting to form a generation of `group` after
  // `generation` (Coordinator.WatchGroup), once there are some; 0 when the
  // group has formed past it. DEADLINE_EXCEEDED when `deadline` passes
  // first, CANCELLED after CancelWatch. One watch at a time. `rank` (-1:
  // not said) counts as alive for a quorum group while the call is open;
  // with `alive_only` that is all the call does (it is not answered when
  // members wait).
  absl::StatusOr<int> WatchGroup(const std::string& group, int64_t generation,
                                 int rank, absl::Time deadline,
                                 bool alive_only = false);
  // Tells the coordinator that `rank` leaves `group`'s job (a quorum group
  // stops counting it as alive at once).
  absl::Status LeaveGroup(const std::string& group, int rank,
                          absl::Time deadline);
  // Ends a WatchGroup in flight (from another thread), and the next one to
  // start before ResetWatch.
  void CancelWatch();
  void ResetWatch();

  const std::string& address() const { return address_; }

 private:
  class Impl;
  CoordinatorClient(std::string address, std::unique_ptr<Impl> impl);

  const std::string address_;
  const std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_COORDINATOR_CLIENT_H_
