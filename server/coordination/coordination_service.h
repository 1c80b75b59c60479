// The gRPC face of a CoordinationStore: the Coordinator service of
// proto/lockstep/v1/coordination.proto over the callback API.
//
// Set answers at once. A Get of a missing key stores a reactor with the
// store and returns without holding a gRPC thread; the Set that creates the
// key finishes it, and a cancelled call (its deadline passed, the client went
// away, the server shuts down) withdraws it. JoinGroup and WatchGroup wait
// alike in a GroupRendezvous; once a group forms a generation, the store
// forgets the records of its older ones. All first ask the Authorizer
// (common/security/authorizer.h): they are worker RPCs, and each one let in
// is noted as worker contact (ContactClock). ReportSteps hands an
// all-reduce rank's step reports to the server's straggler verdict
// (StepReportSink). Protobuf types stop here. Thread-safe (the store is).
#ifndef LOCKSTEP_SERVER_COORDINATION_COORDINATION_SERVICE_H_
#define LOCKSTEP_SERVER_COORDINATION_COORDINATION_SERVICE_H_

#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/rpc/step_report.h"
#include "common/security/authorizer.h"
#include "lockstep/v1/coordination.grpc.pb.h"
#include "server/coordination/contact_clock.h"
#include "server/coordination/coordination_store.h"
#include "server/coordination/group_rendezvous.h"

namespace lockstep {

// Takes a rank's reports of its steps, oldest first; INVALID_ARGUMENT for
// a rank outside the job.
using StepReportSink =
    std::function<absl::Status(int rank, absl::Span<const StepReport>)>;

class CoordinatorService final : public v1::Coordinator::CallbackService {
 public:
  // The most reports one ReportSteps may carry.
  static constexpr int kMaxReports = 64;

  // `store`, `groups`, `authorizer` and `contact` are not owned and must
  // outlive the service; a null authorizer lets every caller in, a null
  // `contact` notes no call.
  CoordinatorService(CoordinationStore* store, GroupRendezvous* groups,
                     const Authorizer* authorizer = nullptr,
                     ContactClock* contact = nullptr)
      : store_(store),
        groups_(groups),
        authorizer_(authorizer),
        contact_(contact) {}

  // Where ReportSteps goes; without one it answers UNIMPLEMENTED (as a
  // server that predates it does). Set before serving.
  void SetStepReportSink(StepReportSink sink) { reports_ = std::move(sink); }

  grpc::ServerUnaryReactor* Set(grpc::CallbackServerContext* context,
                                const v1::SetRequest* request,
                                v1::SetResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const v1::GetRequest* request,
                                v1::GetResponse* response) override;
  grpc::ServerUnaryReactor* JoinGroup(grpc::CallbackServerContext* context,
                                      const v1::JoinGroupRequest* request,
                                      v1::JoinGroupResponse* response) override;
  grpc::ServerUnaryReactor* WatchGroup(
      grpc::CallbackServerContext* context,
      const v1::WatchGroupRequest* request,
      v1::WatchGroupResponse* response) override;
  grpc::ServerUnaryReactor* ReportSteps(
      grpc::CallbackServerContext* context,
      const v1::ReportStepsRequest* request,
      v1::ReportStepsResponse* response) override;

 private:
  // OK when the caller may call `method` (noted as contact), else the
  // refusal.
  absl::Status Admit(const grpc::CallbackServerContext& context,
                     const char* method);

  CoordinationStore* const store_;      // Not owned.
  GroupRendezvous* const groups_;       // Not owned.
  const Authorizer* const authorizer_;  // Not owned; may be null.
  ContactClock* const contact_;         // Not owned; may be null.
  StepReportSink reports_;              // May be empty.
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_COORDINATION_COORDINATION_SERVICE_H_
