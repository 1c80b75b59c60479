// A Coordinator service (rendezvous and group formation) in the test's own
// process on a loopback port, and ranks run as threads: how the all-reduce
// tests meet without a lockstep_server.
#ifndef LOCKSTEP_TESTS_UNIT_IN_PROCESS_COORDINATOR_H_
#define LOCKSTEP_TESTS_UNIT_IN_PROCESS_COORDINATOR_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/coordination/coordination_service.h"
#include "server/coordination/coordination_store.h"
#include "server/coordination/group_rendezvous.h"

namespace lockstep {

class InProcessCoordinator final {
 public:
  InProcessCoordinator() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~InProcessCoordinator() {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }
  const std::string& address() const { return address_; }

 private:
  CoordinationStore store_;
  GroupRendezvous groups_;
  CoordinatorService service_{&store_, &groups_};
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// Runs fn(rank) for ranks [0, n) on threads and waits for all of them.
template <typename Fn>
void RunRanks(int n, Fn fn) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) threads.emplace_back(fn, rank);
  for (std::thread& t : threads) t.join();
}

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_IN_PROCESS_COORDINATOR_H_
