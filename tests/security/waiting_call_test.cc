// A push or pull that waits at a barrier and whose caller gives it up (its
// deadline passes) is finished by the server at once, not held until the
// step closes: the server keeps no call for it, counts it in GetStatus
// (calls_waiting, waits_cancelled), and a worker that repeats short calls
// piles nothing up. The gradient of a cancelled push stays counted once:
// the step's weights are the hand-derived SGD step of both workers'
// gradients. Real lockstep_server process on loopback (docs/faults.md,
// Known gaps).
#include <grpcpp/grpcpp.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/model/model_signature.h"
#include "common/model/signature_proto.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/security/security_test_util.h"

namespace lockstep {
namespace {

constexpr int kValues = 16 * 4 + 4;  // One chunk.
constexpr float kLr = 0.5f;

ModelSignature Model() {
  ModelSignature s;
  s.tensors = {{"kernel", {16, 4}}, {"bias", {4}}};
  s.num_workers = 2;
  s.chunk_bytes = 4096;
  s.optimizer = OptimizerConfig::Defaults("sgd");
  s.optimizer.learning_rate = kLr;
  return s;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

std::vector<float> Values(float first, float step) {
  std::vector<float> v(kValues);
  for (int i = 0; i < kValues; ++i) v[i] = first + step * static_cast<float>(i);
  return v;
}

class WaitingCallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    server_.emplace(StartServer({"--workers=2", "--step_timeout_s=60"}, dir_));
    ASSERT_FALSE(server_->address.empty()) << server_->process.Output();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        MakeChannel(server_->address, TlsOptions());
    ASSERT_TRUE(channel.ok());
    ps_ = v1::ParameterServer::NewStub(*channel);
    for (int rank = 0; rank < 2; ++rank) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
      v1::RegisterRequest request;
      request.set_rank(rank);
      SignatureToProto(Model(), request.mutable_signature());
      v1::RegisterResponse response;
      grpc::Status s = ps_->Register(&context, request, &response);
      ASSERT_TRUE(s.ok()) << s.error_message();
      incarnation_[rank] = response.incarnation();
    }
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::InitializeRequest init;
    init.set_rank(0);
    init.set_incarnation(incarnation_[0]);
    init.set_chunk(0);
    init.set_data(Floats(weights0_));
    v1::InitializeResponse initialized;
    grpc::Status s = ps_->Initialize(&context, init, &initialized);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(initialized.version(), 0);
  }

  void TearDown() override { server_.reset(); }

  grpc::Status Push(int rank, const std::vector<float>& gradient,
                    absl::Duration deadline, v1::PushResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    v1::PushRequest request;
    request.set_rank(rank);
    request.set_incarnation(incarnation_[rank]);
    request.set_step(0);
    request.set_chunk(0);
    request.set_data(Floats(gradient));
    return ps_->Push(&context, request, response);
  }

  grpc::Status PullNext(absl::Duration deadline) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    v1::PullRequest request;
    request.set_rank(1);
    request.set_incarnation(incarnation_[1]);
    request.set_chunk(0);
    request.set_min_version(1);
    v1::PullResponse response;
    return ps_->Pull(&context, request, &response);
  }

  // The server's counters once calls_waiting is `waiting` (up to 10 s),
  // or the last ones read.
  v1::ServerCounters CountersOnceWaiting(int64_t waiting) {
    v1::ServerCounters last;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
      v1::StatusResponse status;
      if (ps_->GetStatus(&context, v1::StatusRequest(), &status).ok()) {
        last = status.counters();
        if (last.calls_waiting() == waiting) break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return last;
  }

  std::string dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<v1::ParameterServer::Stub> ps_;
  int64_t incarnation_[2] = {0, 0};
  const std::vector<float> weights0_ = Values(1.0f, 0.25f);
};

TEST_F(WaitingCallTest, AGivenUpPushOrPullIsFinishedAtOnceAndCountedOnce) {
  const std::vector<float> g0 = Values(0.5f, -0.125f);
  const std::vector<float> g1 = Values(-2.0f, 0.0625f);
  // Rank 0's push waits for rank 1's, which does not come in time; so do
  // nine more (a worker retrying with short deadlines), and a pull of the
  // next version.
  for (int i = 0; i < 10; ++i) {
    v1::PushResponse response;
    grpc::Status s = Push(0, g0, absl::Milliseconds(150), &response);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << i << ": " << s.error_message();
  }
  ASSERT_EQ(PullNext(absl::Milliseconds(150)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server dropped every one of them, although the step is still open.
  v1::ServerCounters counters = CountersOnceWaiting(0);
  EXPECT_EQ(counters.calls_waiting(), 0)
      << "the server still holds calls whose callers gave them up";
  EXPECT_EQ(counters.waits_cancelled(), 11);
  EXPECT_EQ(counters.pushes_accepted(), 1) << "summed once, not ten times";

  // Rank 0 comes back with the step's push, rank 1 sends its own: both get
  // version 1, whose weights are one SGD step on the mean of g0 and g1 (g0
  // counted once).
  std::optional<grpc::Status> rank0;
  v1::PushResponse response0, response1;
  std::thread again([&] {
    rank0 = Push(0, g0, absl::Seconds(30), &response0);
  });
  // Rank 0's push is waiting (or answered) before rank 1's comes.
  CountersOnceWaiting(1);
  grpc::Status s1 = Push(1, g1, absl::Seconds(30), &response1);
  again.join();
  ASSERT_TRUE(s1.ok()) << s1.error_message();
  ASSERT_TRUE(rank0.has_value() && rank0->ok());
  ASSERT_EQ(response0.version(), 1);
  ASSERT_EQ(response1.version(), 1);
  ASSERT_EQ(response1.data().size(), kValues * sizeof(float));
  ASSERT_EQ(response0.data(), response1.data());
  std::vector<float> got(kValues);
  std::memcpy(got.data(), response1.data().data(), response1.data().size());
  for (int i = 0; i < kValues; ++i) {
    // The server sums in arrival order (g0 first), then scales by 1/2.
    const float mean = (g0[i] + g1[i]) * 0.5f;
    EXPECT_EQ(got[i], weights0_[i] - kLr * mean) << "value " << i;
  }
  EXPECT_EQ(CountersOnceWaiting(0).pushes_accepted(), 2);
}

}  // namespace
}  // namespace lockstep
