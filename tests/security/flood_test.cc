// A server's memory under a bounded flood of oversized and malformed
// requests from loopback: requests that claim large sizes are refused before
// anything is allocated for them, a message above the size limit costs at
// most gRPC's memory quota (gRPC 1.51 buffers a whole message before it
// compares it with the limit, grpc/grpc#43012), resident memory stays flat,
// and good requests are still served afterwards.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/model/model_signature.h"
#include "common/model/signature_proto.h"
#include "common/rpc/grpc_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/security/security_test_util.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMaxChunkBytes = int64_t{1} << 20;
constexpr int kQuotaMb = 32;  // The server's --max_grpc_memory_mb.
// Growth of the server's resident memory over the whole flood that counts
// as flat: what gRPC may buffer at once (the quota) plus 32 MiB for its
// threads and heap, against the ~900 MiB the flood sends.
constexpr int64_t kFlatMarginKiB = int64_t{kQuotaMb + 32} << 10;

// AddressSanitizer keeps freed memory in quarantine, so resident memory
// says nothing there; the RSS bounds are checked in other builds.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kRssIsMeaningful = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kRssIsMeaningful = false;
#else
constexpr bool kRssIsMeaningful = true;
#endif
#else
constexpr bool kRssIsMeaningful = true;
#endif

// Growth from `before` to `after` KiB; 0 where RSS is not meaningful.
int64_t Growth(int64_t before, int64_t after) {
  return kRssIsMeaningful ? after - before : 0;
}

constexpr char kPush[] = "/lockstep.v1.ParameterServer/Push";
constexpr char kPull[] = "/lockstep.v1.ParameterServer/Pull";
constexpr char kRegister[] = "/lockstep.v1.ParameterServer/Register";
constexpr char kInitialize[] = "/lockstep.v1.ParameterServer/Initialize";

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

ModelSignature SmallModel() {
  ModelSignature s;
  s.tensors = {{"kernel", {16, 4}}, {"bias", {4}}};
  s.num_workers = 2;
  s.chunk_bytes = 4096;
  return s;
}

std::string RegisterBytes(const ModelSignature& signature, int rank) {
  v1::RegisterRequest request;
  request.set_rank(rank);
  SignatureToProto(signature, request.mutable_signature());
  return request.SerializeAsString();
}

// One bad request: the method and its bytes.
struct Bad {
  const char* method;
  std::string bytes;
};

std::vector<Bad> BadRequests() {
  std::vector<Bad> bad;
  // Larger than --max_chunk_bytes + 64 KiB: refused from its length prefix.
  bad.push_back({kPush, std::string(8 << 20, '\x01')});
  bad.push_back({kInitialize, std::string(2 << 20, '\x02')});
  // Garbage, truncated varints, a length prefix claiming 4 GiB.
  std::mt19937 random(7);
  std::string garbage(64 << 10, '\0');
  for (char& c : garbage) c = static_cast<char>(random());
  bad.push_back({kPush, garbage});
  bad.push_back({kPull, garbage});
  bad.push_back({kPush, std::string("\x08\xff\xff\xff\xff\xff\xff", 7)});
  bad.push_back({kPush, std::string("\x32\xff\xff\xff\xff\x0f\x00\x00", 8)});
  bad.push_back({kPush, std::string("\x00\x01", 2)});  // Field number 0.
  // A model that claims 2^40 parameters, and one with 32 MiB chunks.
  ModelSignature huge = SmallModel();
  huge.tensors[0].shape = {int64_t{1} << 20, int64_t{1} << 20};
  bad.push_back({kRegister, RegisterBytes(huge, 1)});
  ModelSignature negative = SmallModel();
  negative.tensors[0].shape = {-1, int64_t{1} << 40};
  bad.push_back({kRegister, RegisterBytes(negative, 1)});
  ModelSignature big_chunks = SmallModel();
  big_chunks.chunk_bytes = 32 << 20;
  bad.push_back({kRegister, RegisterBytes(big_chunks, 1)});
  return bad;
}

class FloodTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    server_.emplace(StartServer(
        {"--workers=2", absl::StrCat("--max_chunk_bytes=", kMaxChunkBytes),
         absl::StrCat("--max_grpc_memory_mb=", kQuotaMb)},
        dir_));
    ASSERT_FALSE(server_->address.empty()) << server_->process.Output();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        MakeChannel(server_->address, TlsOptions());
    ASSERT_TRUE(channel.ok());
    stub_ = std::make_unique<grpc::GenericStub>(*channel);
    ps_ = v1::ParameterServer::NewStub(*channel);
  }

  // The server goes first, then the channel.
  void TearDown() override {
    server_.reset();
    stub_.reset();
    ps_.reset();
  }

  // Sends `requests` with up to `in_flight` at once; stops early at
  // `deadline`. Returns how many of each status code came back.
  std::map<absl::StatusCode, int> Send(const std::vector<Bad>& requests,
                                       int in_flight, absl::Time deadline,
                                       grpc::GenericStub* stub = nullptr) {
    if (stub == nullptr) stub = stub_.get();
    // Shared with the callbacks, so the last one to finish frees it.
    struct State {
      absl::Mutex mu;
      std::map<absl::StatusCode, int> codes ABSL_GUARDED_BY(mu);
      int outstanding ABSL_GUARDED_BY(mu) = 0;
    };
    struct Call {
      grpc::ClientContext context;
      grpc::ByteBuffer request;
      grpc::ByteBuffer response;
    };
    auto state = std::make_shared<State>();
    for (size_t start = 0; start < requests.size() && absl::Now() < deadline;
         start += in_flight) {
      const size_t end = std::min(requests.size(), start + in_flight);
      std::vector<std::shared_ptr<Call>> calls;
      {
        absl::MutexLock lock(&state->mu);
        state->outstanding = static_cast<int>(end - start);
      }
      for (size_t i = start; i < end; ++i) {
        auto call = std::make_shared<Call>();
        call->context.set_deadline(
            absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
        call->request = Buffer(requests[i].bytes);
        stub->UnaryCall(&call->context, requests[i].method, grpc::StubOptions(),
                        &call->request, &call->response,
                        [state, call](grpc::Status s) {
                          absl::MutexLock lock(&state->mu);
                          ++state->codes[FromGrpcStatus(s).code()];
                          --state->outstanding;
                        });
        calls.push_back(std::move(call));
      }
      {
        absl::MutexLock lock(&state->mu);
        state->mu.Await(absl::Condition(
            +[](int* n) { return *n == 0; }, &state->outstanding));
      }
    }
    absl::MutexLock lock(&state->mu);
    return state->codes;
  }

  std::string dir_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<grpc::GenericStub> stub_;
  std::unique_ptr<v1::ParameterServer::Stub> ps_;
};

TEST_F(FloodTest, SizesClaimedInRequestsAreCheckedBeforeAllocation) {
  const int64_t before = RssKiB(server_->process.pid());
  ASSERT_GT(before, 0);
  // A model of 2^40 parameters (16 TiB of weights and state), and a push
  // whose payload field claims 4 GiB: a few bytes each on the wire.
  ModelSignature huge = SmallModel();
  huge.tensors[0].shape = {int64_t{1} << 20, int64_t{1} << 20};
  std::vector<Bad> claims = {
      {kRegister, RegisterBytes(huge, 0)},
      {kPush, std::string("\x08\x01\x32\xff\xff\xff\xff\x0f\x00", 9)}};
  std::map<absl::StatusCode, int> codes =
      Send(claims, 2, absl::Now() + absl::Seconds(30));
  EXPECT_EQ(codes[absl::StatusCode::kInvalidArgument], 2);
  const int64_t after = RssKiB(server_->process.pid());
  EXPECT_LT(Growth(before, after), 4 << 10)
      << "RSS grew from " << before << " to " << after << " KiB";
}

// A registration names a model within this server's limits (here 2^26
// values, 1 GiB of weights, their sum and Adam's state), but its weights
// have not come: nothing is allocated for it until they do (Initialize or
// a checkpoint), so a Register of a few bytes costs no memory.
TEST_F(FloodTest, ARegisteredModelTakesNoMemoryBeforeItsWeightsCome) {
  const int64_t before = RssKiB(server_->process.pid());
  ASSERT_GT(before, 0);
  ModelSignature big = SmallModel();
  big.tensors = {{"kernel", {int64_t{1} << 13, int64_t{1} << 13}}};
  big.chunk_bytes = kMaxChunkBytes;
  big.optimizer = OptimizerConfig::Defaults("adam");
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::RegisterRequest request;
  request.set_rank(1);
  SignatureToProto(big, request.mutable_signature());
  v1::RegisterResponse response;
  grpc::Status registered = ps_->Register(&context, request, &response);
  ASSERT_TRUE(registered.ok()) << registered.error_message();
  EXPECT_EQ(response.version(), -1) << "no weights yet";
  const int64_t after = RssKiB(server_->process.pid());
  EXPECT_LT(Growth(before, after), 16 << 10)
      << "RSS grew from " << before << " to " << after << " KiB";
}

TEST_F(FloodTest, OversizedRequestCostsAtMostTheMemoryQuota) {
  const int64_t before = RssKiB(server_->process.pid());
  ASSERT_GT(before, 0);
  // 128 MiB against a limit of 1 MiB + 64 KiB and a 32 MiB quota. On a
  // channel of its own, left open: gRPC's client can take seconds to tear
  // down a channel whose refused request it was still writing.
  static auto* const kept = new std::vector<std::shared_ptr<grpc::Channel>>;
  kept->push_back(*MakeChannel(server_->address, TlsOptions()));
  grpc::GenericStub stub(kept->back());
  std::vector<Bad> one = {{kPush, std::string(128 << 20, '\x03')}};
  std::map<absl::StatusCode, int> codes =
      Send(one, 1, absl::Now() + absl::Seconds(30), &stub);
  EXPECT_EQ(codes[absl::StatusCode::kResourceExhausted], 1);
  const int64_t after = RssKiB(server_->process.pid());
  EXPECT_LT(Growth(before, after), int64_t{kQuotaMb + 16} << 10)
      << "RSS grew from " << before << " to " << after << " KiB";
  EXPECT_TRUE(CallGetStatus(*ps_).ok());
}

TEST_F(FloodTest, MemoryStaysFlatAndTheServerStillServes) {
  const std::vector<Bad> kinds = BadRequests();
  std::vector<Bad> flood;
  while (flood.size() < 500) {
    flood.insert(flood.end(), kinds.begin(), kinds.end());
  }
  flood.resize(500);
  const int64_t start_rss = RssKiB(server_->process.pid());
  ASSERT_GT(start_rss, 0);
  // A first round takes gRPC's threads and buffers, and the heap, near
  // their high-water mark.
  Send(std::vector<Bad>(flood.begin(), flood.begin() + 160), 16,
       absl::Now() + absl::Seconds(20));
  const int64_t baseline = RssKiB(server_->process.pid());

  // The flood: bounded by count (500 requests, about 900 MiB) and time.
  const absl::Time start = absl::Now();
  std::map<absl::StatusCode, int> codes =
      Send(flood, 16, start + absl::Seconds(20));
  const int64_t after = RssKiB(server_->process.pid());
  int total = 0;
  for (const auto& [code, n] : codes) {
    total += n;
    // Every one refused, by a check rather than by a crash or timeout
    // (UNAVAILABLE: gRPC's memory quota closed the connection).
    EXPECT_TRUE(code == absl::StatusCode::kResourceExhausted ||
                code == absl::StatusCode::kInvalidArgument ||
                code == absl::StatusCode::kFailedPrecondition ||
                code == absl::StatusCode::kUnavailable)
        << absl::StatusCodeToString(code) << " x" << n;
  }
  EXPECT_GE(total, 100) << "too few requests in the time bound";
  EXPECT_GT(codes[absl::StatusCode::kResourceExhausted], 0);
  EXPECT_GT(codes[absl::StatusCode::kInvalidArgument], 0);
  std::printf("flood: %d requests in %s; RSS %lld -> %lld -> %lld KiB\n", total,
              absl::FormatDuration(absl::Now() - start).c_str(),
              static_cast<long long>(start_rss),
              static_cast<long long>(baseline), static_cast<long long>(after));
  // Flat: growth independent of the ~900 MiB sent, within what gRPC may
  // buffer at once (the quota) plus its threads and heap.
  EXPECT_LT(Growth(start_rss, after), kFlatMarginKiB)
      << "RSS grew from " << start_rss << " to " << after << " KiB";

  // Still alive and serving.
  EXPECT_FALSE(server_->process.Wait(absl::ZeroDuration()).has_value());
  EXPECT_TRUE(CallGetStatus(*ps_).ok());
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::RegisterRequest request;
  request.set_rank(0);
  SignatureToProto(SmallModel(), request.mutable_signature());
  v1::RegisterResponse response;
  grpc::Status registered = ps_->Register(&context, request, &response);
  EXPECT_TRUE(registered.ok()) << registered.error_message();
  EXPECT_TRUE(response.must_initialize());
}

TEST_F(FloodTest, RegistrationAboveTheChunkLimitSaysWhy) {
  grpc::ClientContext context;
  v1::RegisterRequest request;
  ModelSignature s = SmallModel();
  s.chunk_bytes = 4 << 20;  // The worker's default, above this server's.
  SignatureToProto(s, request.mutable_signature());
  v1::RegisterResponse response;
  grpc::Status status = ps_->Register(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("] (the server's limit)"));
}

}  // namespace
}  // namespace lockstep
