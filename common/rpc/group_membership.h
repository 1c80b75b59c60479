// What a group member (all-reduce, or an elastic PS job's worker) asks the
// coordinator and what a formed group is (Coordinator.JoinGroup,
// proto/lockstep/v1/coordination.proto), shared by the server's
// GroupRendezvous and the worker's CoordinatorClient.
#ifndef LOCKSTEP_COMMON_RPC_GROUP_MEMBERSHIP_H_
#define LOCKSTEP_COMMON_RPC_GROUP_MEMBERSHIP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/rpc/step_report.h"

namespace lockstep {

struct GroupRequest {
  std::string group;
  uint64_t member = 0;  // Non-zero; new in every process.
  int rank = 0;         // The member's identity, 0 <= rank < size.
  int size = 1;         // The job's ranks (--workers).
  int64_t version = 0;  // Steps its replica has applied; non-negative.
  int min_size = 0;     // The fewest a group forms with; 0: size.
  // A group of fewer forms this long after the last join.
  absl::Duration settle;
  // A serialized lockstep.v1.ModelSignature; empty: not checked.
  std::string signature;
  // A group of fewer than every rank forms only with more than half of the
  // ranks alive (JoinGroupRequest.quorum).
  bool quorum = false;
};

// The name a formed generation's all-reduce backends meet under ("GROUP/gN"):
// their rendezvous records are keys "GROUP/gN/..." of the coordinator's
// store (e.g. job/g3/gloo/...), which it forgets once a newer generation of
// the group forms (CoordinationStore::ForgetGenerationsBefore). Group
// names hold no "/", so one group's keys are never another's.
inline std::string GenerationGroup(absl::string_view group,
                                   int64_t generation) {
  return absl::StrCat(group, "/g", generation);
}

// The group of an elastic parameter-server job's workers: its members
// cover the batch shards of absent ranks (docs/faults.md).
inline constexpr char kPsGroupName[] = "ps";

// Which group a push was computed in and which of the step's --workers
// batch shards it carries (PushRequest.group_generation, batch_shard).
// Generation 0: no group; the shard is the pusher's rank. A push also
// carries the worker's report of its previous step (PushRequest.report_*).
struct PushSlot {
  PushSlot() = default;
  PushSlot(int64_t generation, int batch_shard, StepReport report = {})
      : generation(generation), batch_shard(batch_shard), report(report) {}

  int64_t generation = 0;
  int batch_shard = 0;
  StepReport report;
};

// How a worker's group forms and watches for joiners (--min_workers,
// --group_settle_ms).
struct GroupOptions {
  // The fewest ranks the job goes on with; 0: every rank (not elastic).
  int min_workers = 0;
  // An elastic group forms this long after its last member joined.
  absl::Duration settle = absl::Seconds(1);
  // The members of an elastic group (all-reduce or PS) watch it at the
  // coordinator with calls this long; an open call is also what tells the
  // coordinator the rank is alive (JoinGroupRequest.quorum), so a stopped
  // rank stops counting as alive at most this long (and the coordinator's
  // grace) after it stopped.
  absl::Duration watch_poll = absl::Seconds(10);
  // Every rank calls the coordinator this often while it is in the job:
  // the server's worker contact for --no_worker_timeout_s.
  absl::Duration contact_every = absl::Seconds(1);
};

struct GroupView {
  int64_t generation = 0;
  int index = 0;              // This member's place in the group.
  std::vector<int> members;   // The members' ranks, ascending.
  int64_t version = 0;        // The highest a member holds.
  bool state_needed = false;  // Some member is behind `version`.
  int source_index = 0;       // The member that sends its state then.
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_RPC_GROUP_MEMBERSHIP_H_
