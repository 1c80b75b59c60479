// The Coordinator service over a real loopback gRPC server, driven through
// the worker's CoordinatorClient.
#include "server/coordination/coordination_service.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "lockstep/v1/coordination.grpc.pb.h"
#include "server/coordination/coordination_store.h"
#include "worker/exchange/allreduce/contact_thread.h"
#include "worker/exchange/allreduce/coordinator_client.h"

namespace lockstep {
namespace {

class CoordinationServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Configure();
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
    client_ = CoordinatorClient::Create(address_).value();
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // Before the service serves.
  virtual void Configure() {}

  static absl::Time In(absl::Duration d) { return absl::Now() + d; }
  // A member of a 2-rank group "job".
  static CoordinatorClient::GroupRequest Request(uint64_t member, int rank,
                                                 int64_t version) {
    CoordinatorClient::GroupRequest r;
    r.group = "job";
    r.member = member;
    r.rank = rank;
    r.size = 2;
    r.version = version;
    return r;
  }

  CoordinationStore store_;
  GroupRendezvous groups_;
  ContactClock contact_;
  CoordinatorService service_{&store_, &groups_, nullptr, &contact_};
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::unique_ptr<CoordinatorClient> client_;
};

TEST_F(CoordinationServiceTest, SetThenGet) {
  ASSERT_TRUE(client_->Set("job/k", "v", In(absl::Seconds(10))).ok());
  absl::StatusOr<std::string> got =
      client_->Get("job/k", In(absl::Seconds(10)));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
  EXPECT_EQ(store_.TryGet("job/k").value(), "v");
}

TEST_F(CoordinationServiceTest, GetWaitsForTheSetWithoutHoldingAThread) {
  std::optional<absl::StatusOr<std::string>> got;
  std::thread reader(
      [&] { got = client_->Get("late", In(absl::Seconds(30))); });
  // The Get is parked in the store as a callback, not a blocked thread.
  ASSERT_TRUE(store_.AwaitNumWaiters(1, In(absl::Seconds(30))));
  ASSERT_TRUE(client_->Set("late", "here", In(absl::Seconds(10))).ok());
  reader.join();
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok()) << got->status();
  EXPECT_EQ(**got, "here");
  EXPECT_EQ(store_.NumWaiters(), 0u);
}

TEST_F(CoordinationServiceTest, GetPastItsDeadlineFailsAndLeavesNoWaiter) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got =
      client_->Get("never", start + absl::Milliseconds(300));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // The server saw the call cancelled and withdrew the waiter.
  EXPECT_TRUE(store_.AwaitNumWaiters(0, In(absl::Seconds(30))));
}

// Every call is worker contact (for the server's --no_worker_timeout_s):
// a ping answered NOT_FOUND as much as a Set.
TEST_F(CoordinationServiceTest, EveryCallIsNotedAsWorkerContact) {
  EXPECT_EQ(contact_.Latest(), absl::InfinitePast());
  const absl::Time before_ping = absl::Now();
  ASSERT_TRUE(client_->Ping("job/contact", In(absl::Seconds(10))).ok());
  const absl::Time pinged = contact_.Latest();
  EXPECT_GE(pinged, before_ping);
  EXPECT_LE(pinged, absl::Now());
  EXPECT_EQ(store_.NumWaiters(), 0u);
  const absl::Time before_set = absl::Now();
  ASSERT_TRUE(client_->Set("job/k", "v", In(absl::Seconds(10))).ok());
  EXPECT_GE(contact_.Latest(), before_set);
  EXPECT_LE(contact_.Latest(), absl::Now());
}

TEST_F(CoordinationServiceTest, IfAbsentConflictIsAlreadyExists) {
  ASSERT_TRUE(client_->Set("k", "a", In(absl::Seconds(10)), true).ok());
  EXPECT_TRUE(client_->Set("k", "a", In(absl::Seconds(10)), true).ok());
  absl::Status s = client_->Set("k", "b", In(absl::Seconds(10)), true);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_.TryGet("k").value(), "a");
}

TEST_F(CoordinationServiceTest, BadKeyIsInvalidArgument) {
  EXPECT_EQ(client_->Set("", "v", In(absl::Seconds(10))).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->Get("", In(absl::Seconds(10))).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinationServiceTest, NoWaitAnswersNotFoundAtOnce) {
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(In(absl::Seconds(10))));
  v1::GetRequest request;
  request.set_key("absent");
  request.set_no_wait(true);
  v1::GetResponse response;
  grpc::Status status = stub->Get(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(store_.NumWaiters(), 0u);
}

TEST_F(CoordinationServiceTest, ServerShutdownEndsAWaitingGet) {
  std::optional<absl::StatusOr<std::string>> got;
  std::thread reader(
      [&] { got = client_->Get("never", In(absl::Seconds(60))); });
  ASSERT_TRUE(store_.AwaitNumWaiters(1, In(absl::Seconds(30))));
  const absl::Time start = absl::Now();
  server_->Shutdown(absl::ToChronoTime(absl::Now()));
  reader.join();
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(store_.NumWaiters(), 0u);
  server_.reset();
}

// Two members of a 2-rank group over gRPC: both get the group, with rank
// 1's newer version to go on from.
TEST_F(CoordinationServiceTest, JoinGroupAnswersEveryMemberAtOnce) {
  std::optional<absl::StatusOr<CoordinatorClient::Group>> first;
  std::thread member([&] {
    first = client_->JoinGroup(Request(1, 0, 3), In(absl::Seconds(30)));
  });
  const absl::Time until = In(absl::Seconds(30));
  while (groups_.NumWaiting() < 1 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(groups_.NumWaiting(), 1u);
  absl::StatusOr<CoordinatorClient::Group> second =
      client_->JoinGroup(Request(2, 1, 4), In(absl::Seconds(30)));
  member.join();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(first->ok()) << first->status();
  EXPECT_EQ((*first)->generation, 1);
  EXPECT_EQ(second->generation, 1);
  EXPECT_EQ((*first)->index, 0);
  EXPECT_EQ(second->index, 1);
  EXPECT_EQ(second->members, (std::vector<int>{0, 1}));
  EXPECT_EQ((*first)->version, 4);
  EXPECT_TRUE((*first)->state_needed);
  EXPECT_EQ((*first)->source_index, 1);
}

// A watch over gRPC sees the joiner of an elastic group, and CancelWatch
// ends one in flight.
TEST_F(CoordinationServiceTest, WatchGroupSeesAJoinerAndCanBeCancelled) {
  CoordinatorClient::GroupRequest alone = Request(1, 0, 0);
  alone.size = 3;
  alone.min_size = 1;
  ASSERT_TRUE(client_->JoinGroup(alone, In(absl::Seconds(30))).ok());
  std::optional<absl::StatusOr<int>> seen;
  std::thread watcher(
      [&] { seen = client_->WatchGroup("job", 1, -1, In(absl::Seconds(30))); });
  CoordinatorClient::GroupRequest joiner = alone;
  joiner.member = 2;
  joiner.rank = 2;
  joiner.settle = absl::Seconds(30);
  std::thread joining(
      [&] { client_->JoinGroup(joiner, In(absl::Seconds(2))).IgnoreError(); });
  watcher.join();
  ASSERT_TRUE(seen.has_value());
  ASSERT_TRUE(seen->ok()) << seen->status();
  EXPECT_EQ(**seen, 1);
  joining.join();
  // The joiner's deadline passed; the server withdraws it a moment later.
  const absl::Time until = In(absl::Seconds(30));
  while (groups_.NumWaiting() > 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(groups_.NumWaiting(), 0u);
  std::thread cancelled(
      [&] { seen = client_->WatchGroup("job", 1, -1, In(absl::Seconds(30))); });
  absl::SleepFor(absl::Milliseconds(200));
  client_->CancelWatch();
  cancelled.join();
  EXPECT_EQ(seen->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(
      client_->WatchGroup("job", 1, -1, In(absl::Seconds(1))).status().code(),
      absl::StatusCode::kCancelled)
      << "until ResetWatch";
}

// A group's records of older generations go when a newer one forms; the
// newest generation's, other groups' and the group's own keys outside
// generations stay. (Before, records were never deleted, and a long job's
// regroupings filled the store until rendezvous were refused.)
TEST_F(CoordinationServiceTest, ANewGenerationForgetsTheOlderOnesRecords) {
  for (const char* key :
       {"job/g1/gloo/0", "job/g1/grpc-ring/peer/0", "job/g2/gloo/0",
        "job/g10/x", "job/contact", "job/gx/y", "other/g1/gloo/0"}) {
    ASSERT_TRUE(client_->Set(key, "v", In(absl::Seconds(30))).ok()) << key;
  }
  CoordinatorClient::GroupRequest alone = Request(1, 0, 0);
  alone.size = 1;
  absl::StatusOr<CoordinatorClient::Group> first =
      client_->JoinGroup(alone, In(absl::Seconds(30)));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->generation, 1);
  EXPECT_EQ(store_.NumKeys(), 7u) << "generation 1 forgets nothing";
  alone.member = 2;  // A new process for rank 0: the group forms again.
  absl::StatusOr<CoordinatorClient::Group> second =
      client_->JoinGroup(alone, In(absl::Seconds(30)));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->generation, 2);
  EXPECT_EQ(store_.TryGet("job/g1/gloo/0").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_.TryGet("job/g1/grpc-ring/peer/0").status().code(),
            absl::StatusCode::kNotFound);
  for (const char* kept : {"job/g2/gloo/0", "job/g10/x", "job/contact",
                           "job/gx/y", "other/g1/gloo/0"}) {
    EXPECT_TRUE(store_.TryGet(kept).ok()) << kept;
  }
  EXPECT_EQ(store_.NumKeys(), 5u);
}

// A member whose deadline passes is withdrawn: it no longer counts.
TEST_F(CoordinationServiceTest, JoinGroupPastItsDeadlineLeavesNoMember) {
  absl::StatusOr<CoordinatorClient::Group> group =
      client_->JoinGroup(Request(1, 0, 0), In(absl::Milliseconds(300)));
  EXPECT_EQ(group.status().code(), absl::StatusCode::kDeadlineExceeded);
  const absl::Time until = In(absl::Seconds(30));
  while (groups_.NumWaiting() > 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(groups_.NumWaiting(), 0u);
  absl::StatusOr<CoordinatorClient::Group> bad =
      client_->JoinGroup(Request(1, 5, 0), In(absl::Seconds(10)));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

// A coordinator without a report sink answers ReportSteps as one that
// predates it does (UNIMPLEMENTED), and a rank's contact thread then goes
// back to pings: its contact is still noted, and no report is counted as
// sent.
TEST_F(CoordinationServiceTest, WithoutASinkReportsAreRefusedAndPingsGoOn) {
  const std::vector<StepReport> one = {{0, 1, 2, 3, 4}};
  EXPECT_TRUE(absl::IsUnimplemented(
      client_->ReportSteps(1, one, In(absl::Seconds(10)))));
  ContactThread contact(client_.get(), "job/contact", absl::Milliseconds(20),
                        1);
  contact.Report(one[0]);
  const absl::Time start = absl::Now();
  // The refused report's tick, then pings: contact keeps being noted.
  absl::Time latest = absl::InfinitePast();
  while (absl::Now() < start + absl::Seconds(10)) {
    latest = contact_.Latest();
    if (latest > start + absl::Milliseconds(100)) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_GT(latest, start + absl::Milliseconds(100));
  contact.Report(one[0]);  // Dropped: this coordinator takes none.
  absl::SleepFor(absl::Milliseconds(60));
  EXPECT_EQ(contact.reports_sent(), 0);
}

class ReportingCoordinationServiceTest : public CoordinationServiceTest {
 protected:
  void Configure() override {
    service_.SetStepReportSink(
        [this](int rank, absl::Span<const StepReport> reports) {
          absl::MutexLock lock(&mu_);
          if (rank > 3) return absl::InvalidArgumentError("no such rank");
          for (const StepReport& r : reports) got_.emplace_back(rank, r);
          return absl::OkStatus();
        });
  }
  absl::Mutex mu_;
  std::vector<std::pair<int, StepReport>> got_ ABSL_GUARDED_BY(mu_);
};

// A rank that leaves sends the reports its last tick did not carry: with
// a tick an hour apart, only Flush can have sent these two. Reports after
// it are dropped.
TEST_F(ReportingCoordinationServiceTest, FlushSendsWhatTheTicksDidNot) {
  const absl::Time start = absl::Now();
  ContactThread contact(client_.get(), "job/contact", absl::Hours(1), 3);
  // Its first tick (a ping: nothing to report yet); the next is an hour on.
  while (contact_.Latest() < start && absl::Now() < start + absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_GE(contact_.Latest(), start);
  contact.Report({5, 1, 2, 3, 4});
  contact.Report({6, 1, 2, 3, 4});
  contact.Flush(absl::Seconds(10));
  EXPECT_EQ(contact.reports_sent(), 2);
  contact.Report({7, 1, 2, 3, 4});
  contact.Flush(absl::Seconds(10));
  EXPECT_EQ(contact.reports_sent(), 2);
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(got_.size(), 2u);
  EXPECT_EQ(got_[0].first, 3);
  EXPECT_EQ(got_[0].second.step, 5);
  EXPECT_EQ(got_[1].second.step, 6);
}

// Reports reach the sink in order, field for field, through a contact
// thread's ticks; more than 64 at once and the sink's refusal are errors.
TEST_F(ReportingCoordinationServiceTest, ReportsReachTheSinkInOrder) {
  ContactThread contact(client_.get(), "job/contact", absl::Milliseconds(20),
                        2);
  contact.Report({7, 10, 20, 30, 40});
  contact.Report({8, 11, 21, 31, 41});
  const absl::Time until = In(absl::Seconds(10));
  while (contact.reports_sent() < 2 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(contact.reports_sent(), 2);
  {
    absl::MutexLock lock(&mu_);
    ASSERT_EQ(got_.size(), 2u);
    EXPECT_EQ(got_[0].first, 2);
    EXPECT_EQ(got_[0].second.step, 7);
    EXPECT_EQ(got_[0].second.input_us, 10);
    EXPECT_EQ(got_[0].second.compute_us, 20);
    EXPECT_EQ(got_[0].second.push_us, 30);
    EXPECT_EQ(got_[0].second.wait_us, 40);
    EXPECT_EQ(got_[1].second.step, 8);
    EXPECT_EQ(got_[1].second.wait_us, 41);
  }
  EXPECT_GE(contact_.Latest(), until - absl::Seconds(10)) << "contact noted";
  const std::vector<StepReport> many(CoordinatorService::kMaxReports + 1,
                                     StepReport{1, 1, 1, 1, 1});
  EXPECT_TRUE(absl::IsInvalidArgument(
      client_->ReportSteps(0, many, In(absl::Seconds(10)))));
  EXPECT_TRUE(absl::IsInvalidArgument(client_->ReportSteps(
      9, absl::MakeConstSpan(many).first(1), In(absl::Seconds(10)))));
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(got_.size(), 2u) << "nothing of the refused calls";
}

}  // namespace
}  // namespace lockstep
