#include "tests/bench/server_counters.h"

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/formats/json_writer.h"
#include "common/rpc/grpc_status.h"
#include "lockstep/v1/lockstep.grpc.pb.h"
#include "tests/bench/bench_util.h"

namespace lockstep {
namespace {

absl::StatusOr<v1::ServerCounters> ReadOne(const std::string& address) {
  std::unique_ptr<v1::ParameterServer::Stub> stub =
      v1::ParameterServer::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::StatusResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(
      stub->GetStatus(&context, v1::StatusRequest(), &response)));
  return response.counters();
}

std::string CountersFile(const std::string& dir, size_t i) {
  return absl::StrCat(dir, "/counters.", i);
}

}  // namespace

absl::StatusOr<std::vector<v1::ServerCounters>> ReadServerCounters(
    ChildRunner* runner, const BenchHost& from, const std::string& self_exe,
    const std::vector<std::string>& addresses, const std::string& dir,
    absl::Duration timeout) {
  std::vector<v1::ServerCounters> counters;
  if (from.prefix.empty()) {
    for (const std::string& address : addresses) {
      ASSIGN_OR_RETURN(v1::ServerCounters c, ReadOne(address));
      counters.push_back(std::move(c));
    }
    return counters;
  }
  for (size_t i = 0; i < addresses.size(); ++i) {
    std::remove(CountersFile(dir, i).c_str());
  }
  ASSIGN_OR_RETURN(
      pid_t pid,
      runner->Start("counters",
                    OnHost(from, {self_exe, "counters",
                                  absl::StrCat("--servers=",
                                               absl::StrJoin(addresses, ",")),
                                  absl::StrCat("--out_dir=", dir)})));
  RETURN_IF_ERROR(
      runner->WaitForExit("reading the servers' counters", pid, timeout));
  for (size_t i = 0; i < addresses.size(); ++i) {
    ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(CountersFile(dir, i)));
    v1::ServerCounters c;
    if (!c.ParseFromString(bytes)) {
      return absl::InternalError(
          absl::StrCat("unreadable counters in ", CountersFile(dir, i)));
    }
    counters.push_back(std::move(c));
  }
  return counters;
}

absl::Status RunCountersMode(const std::vector<std::string>& servers,
                             const std::string& out_dir) {
  for (size_t i = 0; i < servers.size(); ++i) {
    ASSIGN_OR_RETURN(v1::ServerCounters c, ReadOne(servers[i]));
    RETURN_IF_ERROR(
        WriteFileAtomically(CountersFile(out_dir, i), c.SerializeAsString()));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
