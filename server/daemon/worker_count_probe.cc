#include "server/daemon/worker_count_probe.h"

#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/grpc_status.h"
#include "lockstep/v1/coordination.grpc.pb.h"
#include "lockstep/v1/lockstep.grpc.pb.h"

namespace lockstep {
namespace {

// The first count offered wins; later callers are told the same.
class Learned {
 public:
  explicit Learned(int max_workers) : max_workers_(max_workers) {}

  absl::Status Offer(int workers, std::string source) {
    if (workers < 1 || workers > max_workers_) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " gives a worker count of ", workers,
                       "; it must be in [1, ", max_workers_, "]"));
    }
    absl::MutexLock lock(&mu_);
    if (!learned_.has_value()) {
      learned_ = LearnedWorkers{workers, 0, std::move(source)};
      done_.Notify();
    }
    return absl::UnavailableError(absl::StrCat(
        "the server is starting: it takes the job's worker count (",
        learned_->workers, ") from ", learned_->source,
        " (--workers=auto); register again"));
  }
  absl::Notification* done() { return &done_; }
  LearnedWorkers Get() {
    absl::MutexLock lock(&mu_);
    return *learned_;
  }

 private:
  const int max_workers_;
  absl::Mutex mu_;
  std::optional<LearnedWorkers> learned_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

class RegisterProbe final
    : public v1::ParameterServer::WithCallbackMethod_Register<
          v1::ParameterServer::Service> {
 public:
  RegisterProbe(const Authorizer* authorizer, Learned* learned)
      : authorizer_(authorizer), learned_(learned) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse*) override {
    if (absl::Status s =
            CheckAccess(authorizer_, *context, Access::kWorker, "Register");
        !s.ok()) {
      return Answer(context, s);
    }
    return Answer(context,
                  learned_->Offer(request->signature().num_workers(),
                                  absl::StrCat("rank ", request->rank(),
                                               "'s registration")));
  }

 private:
  const Authorizer* const authorizer_;
  Learned* const learned_;
};

class JoinGroupProbe final
    : public v1::Coordinator::WithCallbackMethod_JoinGroup<
          v1::Coordinator::Service> {
 public:
  JoinGroupProbe(const Authorizer* authorizer, Learned* learned)
      : authorizer_(authorizer), learned_(learned) {}

  grpc::ServerUnaryReactor* JoinGroup(grpc::CallbackServerContext* context,
                                      const v1::JoinGroupRequest* request,
                                      v1::JoinGroupResponse*) override {
    if (absl::Status s = CheckAccess(authorizer_, *context, Access::kWorker,
                                     "Coordinator.JoinGroup");
        !s.ok()) {
      return Answer(context, s);
    }
    return Answer(
        context,
        learned_->Offer(request->size(), absl::StrCat("rank ", request->rank(),
                                                      "'s JoinGroup of \"",
                                                      request->group(), "\"")));
  }

 private:
  const Authorizer* const authorizer_;
  Learned* const learned_;
};

}  // namespace

absl::StatusOr<LearnedWorkers> LearnWorkerCount(
    const GrpcEndpoint::Options& endpoint,
    const std::shared_ptr<grpc::ServerCredentials>& credentials,
    const Authorizer* authorizer, int max_workers, absl::Notification* stop,
    const std::function<bool(int port)>& listening, const DaemonLog& log) {
  Learned learned(max_workers);
  RegisterProbe register_probe(authorizer, &learned);
  JoinGroupProbe join_probe(authorizer, &learned);
  std::unique_ptr<GrpcEndpoint> probe = GrpcEndpoint::Start(
      endpoint, credentials, {&register_probe, &join_probe}, log);
  if (probe == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", endpoint.listen));
  }
  probe->SetServing(true);
  if (!listening(probe->port())) {
    probe->Shutdown(absl::Now() + absl::Seconds(1));
    return absl::InternalError("the port could not be announced");
  }
  log(absl::StrCat("--workers=auto: listening on port ", probe->port(),
                   " for the first worker, which tells the job's worker "
                   "count"));
  while (!learned.done()->WaitForNotificationWithTimeout(
      absl::Milliseconds(100))) {
    if (stop->HasBeenNotified()) {
      probe->Shutdown(absl::Now() + absl::Seconds(1));
      return absl::CancelledError("stopped before any worker called");
    }
  }
  LearnedWorkers result = learned.Get();
  result.port = probe->port();
  // Calls that came meanwhile were answered at once; one that comes as
  // the probe stops is cut off, which workers retry (IsCutOffInTransit).
  probe->Shutdown(absl::Now() + absl::Seconds(1));
  log(absl::StrCat("--workers=auto: ", result.workers, " worker(s), from ",
                   result.source));
  return result;
}

}  // namespace lockstep
