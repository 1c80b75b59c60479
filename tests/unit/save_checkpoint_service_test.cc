// SaveCheckpoint through a real gRPC server on loopback, in this process:
// writes run one at a time on the service's own thread, a bounded number
// wait, the rest are refused at once, and StopSaving finishes what was
// taken before the server goes (the thread per request it replaces could
// outlive the service).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "lockstep/v1/lockstep.grpc.pb.h"
#include "server/core/parameter_server.h"
#include "server/rpc/grpc_service.h"
#include "tests/unit/parameter_server_test_util.h"

namespace lockstep {
namespace {

class SaveCheckpointServiceTest : public ::testing::Test {
 protected:
  virtual ParameterServerOptions CoreOptions() const { return {}; }
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ParameterServer>> core =
        ParameterServer::Create(CoreOptions());
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = *std::move(core);
    service_ = std::make_unique<ParameterServerService>(
        core_.get(), [this]() -> absl::StatusOr<ParameterServerService::Saved> {
          const int now = ++writing_;
          if (now > most_writing_) most_writing_ = now;
          // Each write waits (bounded) until the test lets it finish.
          release_.WaitForNotificationWithTimeout(absl::Seconds(30));
          --writing_;
          ParameterServerService::Saved saved;
          saved.checkpoint = absl::StrCat("ckpt-", ++written_);
          saved.version = 7;
          return saved;
        });
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    stub_ = v1::ParameterServer::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (service_ != nullptr) service_->StopSaving();
    if (server_ != nullptr) server_->Shutdown();
  }

  grpc::Status Save(v1::SaveCheckpointResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    return stub_->SaveCheckpoint(&context, v1::SaveCheckpointRequest(),
                                 response);
  }

  std::unique_ptr<ParameterServer> core_;
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ParameterServer::Stub> stub_;
  absl::Notification release_;
  std::atomic<int> writing_{0}, most_writing_{0}, written_{0};
};

TEST_F(SaveCheckpointServiceTest,
       OneWritesABoundedNumberWaitTheRestAreRefused) {
  constexpr int kTaken = 1 + ParameterServerService::kMaxWaitingSaves;
  std::vector<grpc::Status> statuses(kTaken);
  std::vector<v1::SaveCheckpointResponse> responses(kTaken);
  std::vector<std::thread> callers;
  // Whatever order they arrive in, the first is written and the others
  // wait behind it.
  for (int i = 0; i < kTaken; ++i) {
    callers.emplace_back([&, i] { statuses[i] = Save(&responses[i]); });
  }
  // Joined on every way out, an assertion's included.
  absl::Cleanup join = [&] {
    if (!release_.HasBeenNotified()) release_.Notify();
    for (std::thread& t : callers) {
      if (t.joinable()) t.join();
    }
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (
      (writing_.load() != 1 ||
       service_->SavesWaiting() != ParameterServerService::kMaxWaitingSaves) &&
      absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(writing_.load(), 1);
  ASSERT_EQ(service_->SavesWaiting(), ParameterServerService::kMaxWaitingSaves);
  v1::SaveCheckpointResponse refused_response;
  const grpc::Status refused = Save(&refused_response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("try again later"), std::string::npos);
  std::move(join).Invoke();
  for (int i = 0; i < kTaken; ++i) {
    EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i].error_message();
    EXPECT_EQ(responses[i].version(), 7);
    EXPECT_FALSE(responses[i].path().empty());
  }
  EXPECT_EQ(written_.load(), kTaken);
  EXPECT_EQ(most_writing_.load(), 1) << "writes overlapped";
}

// Shard 3 of 4 of a 5-value model owns no chunk (chunks of 2, 2 and 1): it
// answers at once that nothing was saved (no path, version -1), without a
// write. Before, it refused: "nothing to checkpoint before version 0".
class ChunklessShardSaveTest : public SaveCheckpointServiceTest {
 protected:
  ParameterServerOptions CoreOptions() const override {
    ParameterServerOptions options;
    options.num_workers = 1;
    options.shard = 3;
    options.num_shards = 4;
    return options;
  }
};

TEST_F(ChunklessShardSaveTest, AShardThatOwnsNoChunkHasNothingToSave) {
  ModelSignature signature = SmallSignature(1);
  signature.num_shards = 4;
  ASSERT_TRUE(core_->Register(0, signature).ok());
  ASSERT_TRUE(core_->GetStatus().OwnsNoChunk());
  v1::SaveCheckpointResponse response;
  const grpc::Status saved = Save(&response);
  ASSERT_TRUE(saved.ok()) << saved.error_message();
  EXPECT_EQ(response.version(), -1);
  EXPECT_TRUE(response.path().empty());
  EXPECT_TRUE(response.weights_file().empty());
  EXPECT_EQ(written_.load(), 0);
}

// StopSaving waits for the write in progress (the request still gets its
// answer), then the service refuses with UNAVAILABLE.
TEST_F(SaveCheckpointServiceTest, StopSavingFinishesTheWriteThenRefuses) {
  grpc::Status first;
  v1::SaveCheckpointResponse response;
  std::thread caller([&] { first = Save(&response); });
  absl::Cleanup join = [&] {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (caller.joinable()) caller.join();
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (writing_.load() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(writing_.load(), 1);
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    service_->StopSaving();
    stopped = true;
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(stopped.load()) << "StopSaving returned during a write";
  release_.Notify();
  stopper.join();
  std::move(join).Invoke();
  EXPECT_TRUE(stopped.load());
  EXPECT_TRUE(first.ok()) << first.error_message();
  EXPECT_EQ(response.path(), "ckpt-1");
  v1::SaveCheckpointResponse late;
  const grpc::Status refused = Save(&late);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(written_.load(), 1);
}

}  // namespace
}  // namespace lockstep
