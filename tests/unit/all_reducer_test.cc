// The all-reduce backends with several ranks as threads in one process,
// meeting through an in-process Coordinator on a loopback port.
#include "worker/exchange/allreduce/all_reducer.h"

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordination/coordination_service.h"
#include "server/coordination/coordination_store.h"
#include "tests/unit/gpu_required.h"
#include "tests/unit/in_process_coordinator.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// Small enough that 1000003 floats make hundreds of chunks per rank.
constexpr int64_t kSmallChunkBytes = 16 << 10;

using Coordinator = InProcessCoordinator;

AllReduceOptions Options(const std::string& backend, int rank, int size,
                         const Coordinator& coordinator,
                         const std::string& group) {
  AllReduceOptions options;
  options.backend = backend;
  options.rank = rank;
  options.size = size;
  options.coordinator = coordinator.address();
  options.group = group;
  options.chunk_bytes = kSmallChunkBytes;
  options.rendezvous_timeout = absl::Seconds(20);
  options.op_timeout = absl::Seconds(20);
  return options;
}

// Non-zero values in [-1, 1], different on every rank and call.
std::vector<float> RandomData(size_t length, int rank, int call) {
  std::mt19937 gen(1000 * call + rank);
  std::uniform_real_distribution<float> dist(0.001f, 1.0f);
  std::vector<float> data(length);
  for (size_t i = 0; i < length; ++i) {
    data[i] = (gen() & 1) ? dist(gen) : -dist(gen);
  }
  return data;
}

// Integers in [-1000, 1000]: their fp32 sums over a few ranks are exact.
std::vector<float> IntegerData(size_t length, int rank) {
  std::mt19937 gen(7 + rank);
  std::uniform_int_distribution<int> dist(-1000, 1000);
  std::vector<float> data(length);
  for (float& x : data) x = static_cast<float>(dist(gen));
  return data;
}

bool BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() ||
          std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// `result` is the ranks' sum of `inputs`: exact, or within fp32 rounding.
void ExpectSumOfRanks(const std::vector<std::vector<float>>& inputs,
                      const std::vector<float>& result, bool integers,
                      int call) {
  int bad = 0;
  for (size_t i = 0; i < result.size() && bad < 5; ++i) {
    double exact = 0, magnitude = 0;
    for (const std::vector<float>& input : inputs) {
      exact += input[i];
      magnitude += std::fabs(input[i]);
    }
    if (integers) {
      if (result[i] != exact) ++bad;
      EXPECT_EQ(result[i], exact) << "integer call, element " << i;
      continue;
    }
    // Each of the size - 1 fp32 additions rounds by at most 2^-24 of a
    // partial sum, itself at most `magnitude`.
    const double tolerance =
        static_cast<double>(inputs.size() - 1) * std::ldexp(magnitude, -24);
    if (std::fabs(result[i] - exact) > tolerance) ++bad;
    EXPECT_NEAR(result[i], exact, tolerance)
        << "call " << call << ", element " << i;
  }
}

class AllReduceTest
    : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Each rank reduces vectors of lengths 0, 1, 7 and 1000003 (hundreds of
// chunks) with one reducer, then an integer-valued one. Every result is the
// exact sum within fp32 rounding, and every rank's result is bit-identical.
TEST_P(AllReduceTest, SumsAreRightAndBitIdenticalOnEveryRank) {
  // Not a structured binding: lambdas may capture those only from C++20.
  const std::string backend = std::get<0>(GetParam());
  const int size = std::get<1>(GetParam());
  Coordinator coordinator;
  const std::vector<size_t> lengths = {0, 1, 7, 1000003};
  // inputs[call][rank], outputs[call][rank].
  const int calls = static_cast<int>(lengths.size()) + 1;
  std::vector<std::vector<std::vector<float>>> inputs(
      calls, std::vector<std::vector<float>>(size));
  auto outputs = inputs;
  std::vector<absl::Status> statuses(size);
  RunRanks(size, [&](int rank) {
    absl::StatusOr<std::unique_ptr<AllReducer>> reducer =
        CreateAllReducer(Options(backend, rank, size, coordinator, "sums"));
    if (!reducer.ok()) {
      statuses[rank] = reducer.status();
      return;
    }
    EXPECT_EQ((*reducer)->Name(), backend);
    for (int call = 0; call < calls; ++call) {
      std::vector<float> data = call < static_cast<int>(lengths.size())
                                    ? RandomData(lengths[call], rank, call)
                                    : IntegerData(1000, rank);
      inputs[call][rank] = data;
      absl::Status s = (*reducer)->AllReduceSum(absl::MakeSpan(data));
      if (!s.ok()) {
        statuses[rank] = s;
        return;
      }
      outputs[call][rank] = std::move(data);
    }
  });
  for (int rank = 0; rank < size; ++rank) {
    ASSERT_TRUE(statuses[rank].ok())
        << "rank " << rank << ": " << statuses[rank];
  }
  for (int call = 0; call < calls; ++call) {
    const std::vector<float>& result = outputs[call][0];
    for (int rank = 1; rank < size; ++rank) {
      EXPECT_TRUE(BitIdentical(result, outputs[call][rank]))
          << "call " << call << ": rank " << rank << " differs from rank 0";
    }
    ASSERT_EQ(result.size(), inputs[call][0].size());
    const bool integers = call == static_cast<int>(lengths.size());
    ExpectSumOfRanks(inputs[call], result, integers, call);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AllReduceTest,
                         ::testing::Combine(::testing::Values("gloo",
                                                              "grpc-ring"),
                                            ::testing::Values(2, 3, 4)),
                         [](const auto& info) {
                           std::string name =
                               absl::StrCat(std::get<0>(info.param), "_",
                                            std::get<1>(info.param), "ranks");
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

class AllReduceFailureTest : public ::testing::TestWithParam<std::string> {};

// Rank 2 of 3 never comes: the others give up at the rendezvous deadline.
TEST_P(AllReduceFailureTest, MissingRankFailsRendezvousAtTheDeadline) {
  Coordinator coordinator;
  std::vector<absl::Status> statuses(2);
  const absl::Time start = absl::Now();
  RunRanks(2, [&](int rank) {
    AllReduceOptions options =
        Options(GetParam(), rank, 3, coordinator, "missing");
    options.rendezvous_timeout = absl::Seconds(1);
    statuses[rank] = CreateAllReducer(options).status();
  });
  const absl::Duration elapsed = absl::Now() - start;
  for (const absl::Status& s : statuses) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  }
  EXPECT_GE(elapsed, absl::Milliseconds(900));
  EXPECT_LT(elapsed, absl::Seconds(5));
}

// All three ranks meet, but rank 2 never calls AllReduceSum: the others fail
// at the op deadline, and stay failed.
TEST_P(AllReduceFailureTest, RankThatSkipsAnAllReduceFailsTheOthersInTime) {
  Coordinator coordinator;
  std::vector<absl::Status> created(3), statuses(3), later(3);
  std::vector<absl::Duration> elapsed(3);
  absl::Notification others_done;
  int finished = 0;
  absl::Mutex mu;
  RunRanks(3, [&](int rank) {
    AllReduceOptions options =
        Options(GetParam(), rank, 3, coordinator, "skip");
    options.op_timeout = absl::Seconds(1);
    absl::StatusOr<std::unique_ptr<AllReducer>> reducer =
        CreateAllReducer(options);
    created[rank] = reducer.status();
    if (rank == 2) {
      // Stays in the job, without reducing, until the others are done.
      others_done.WaitForNotification();
      return;
    }
    if (reducer.ok()) {
      std::vector<float> data = RandomData(100000, rank, 0);
      const absl::Time start = absl::Now();
      statuses[rank] = (*reducer)->AllReduceSum(absl::MakeSpan(data));
      elapsed[rank] = absl::Now() - start;
      later[rank] = (*reducer)->AllReduceSum(absl::MakeSpan(data));
    }
    absl::MutexLock lock(&mu);
    if (++finished == 2) others_done.Notify();
  });
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_TRUE(created[rank].ok()) << "rank " << rank << ": " << created[rank];
  }
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(statuses[rank].code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << rank << ": " << statuses[rank];
    EXPECT_GE(elapsed[rank], absl::Milliseconds(900));
    EXPECT_LT(elapsed[rank], absl::Seconds(5));
    EXPECT_EQ(later[rank].code(), absl::StatusCode::kFailedPrecondition)
        << later[rank];
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AllReduceFailureTest,
                         ::testing::Values("gloo", "grpc-ring"),
                         [](const auto& info) {
                           return info.param == "gloo"
                                      ? std::string("gloo")
                                      : std::string("grpc_ring");
                         });

TEST(AllReduceRingTest, LengthMismatchIsInvalidArgument) {
  Coordinator coordinator;
  std::vector<absl::Status> statuses(2);
  RunRanks(2, [&](int rank) {
    auto reducer = CreateAllReducer(
        Options("grpc-ring", rank, 2, coordinator, "mismatch"));
    ASSERT_TRUE(reducer.ok()) << reducer.status();
    std::vector<float> data(rank == 0 ? 10 : 11, 1.0f);
    statuses[rank] = (*reducer)->AllReduceSum(absl::MakeSpan(data));
  });
  for (const absl::Status& s : statuses) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("floats"));
  }
}

// Rank 0 gives up on all-reduce 0 before rank 1 starts it. Rank 1 then
// finds rank 0's chunks waiting for it, applies them, and hears at once from
// rank 0 (still running, or gone) that the ring has failed, long before its
// own deadline. "Gone" is gone (its reducer destroyed) before rank 1 starts.
class LateRankTest : public ::testing::TestWithParam<bool> {};

TEST_P(LateRankTest, LearnsAtOnceThatItsPeerGaveUp) {
  const bool peer_stays = GetParam();
  Coordinator coordinator;
  absl::Notification rank0_gave_up, rank1_done;
  std::vector<absl::Status> statuses(2);
  absl::Duration late_elapsed;
  RunRanks(2, [&](int rank) {
    AllReduceOptions options =
        Options("grpc-ring", rank, 2, coordinator, "late");
    options.op_timeout =
        rank == 0 ? absl::Milliseconds(300) : absl::Seconds(20);
    auto reducer = CreateAllReducer(options);
    std::vector<float> data = RandomData(50000, rank, 0);
    if (rank == 0) {
      if (reducer.ok()) {
        statuses[0] = (*reducer)->AllReduceSum(absl::MakeSpan(data));
      }
      if (!peer_stays) reducer = absl::CancelledError("gone");
      rank0_gave_up.Notify();
      if (peer_stays) rank1_done.WaitForNotification();
      return;
    }
    rank0_gave_up.WaitForNotification();
    if (reducer.ok()) {
      const absl::Time start = absl::Now();
      statuses[1] = (*reducer)->AllReduceSum(absl::MakeSpan(data));
      late_elapsed = absl::Now() - start;
    } else {
      statuses[1] = reducer.status();
    }
    rank1_done.Notify();
  });
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded)
      << statuses[0];
  // A running peer refuses the chunks; a gone one refuses the connection.
  EXPECT_EQ(statuses[1].code(), peer_stays ? absl::StatusCode::kAborted
                                           : absl::StatusCode::kUnavailable)
      << statuses[1];
  EXPECT_LT(late_elapsed, absl::Seconds(10));
}

INSTANTIATE_TEST_SUITE_P(Peer, LateRankTest, ::testing::Bool(),
                         [](const auto& info) {
                           return std::string(info.param ? "stays" : "gone");
                         });

TEST(AllReducerFactoryTest, OneRankNeedsNoCoordinatorAndChangesNothing) {
  for (const char* backend : {"gloo", "grpc-ring"}) {
    AllReduceOptions options;
    options.backend = backend;
    absl::StatusOr<std::unique_ptr<AllReducer>> reducer =
        CreateAllReducer(options);
    ASSERT_TRUE(reducer.ok()) << backend << ": " << reducer.status();
    std::vector<float> data = {1.5f, -2.0f, 3.25f};
    ASSERT_TRUE((*reducer)->AllReduceSum(absl::MakeSpan(data)).ok());
    EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  }
}

TEST(AllReducerFactoryTest, BadOptionsAreInvalidArgument) {
  AllReduceOptions options;
  options.backend = "mpi";
  EXPECT_EQ(CreateAllReducer(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = AllReduceOptions();
  options.size = 2;
  options.rank = 2;
  options.coordinator = "127.0.0.1:1";
  EXPECT_EQ(CreateAllReducer(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.rank = 0;
  options.coordinator.clear();
  EXPECT_EQ(CreateAllReducer(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = AllReduceOptions();
  options.chunk_bytes = 2;
  EXPECT_EQ(CreateAllReducer(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = AllReduceOptions();
  options.max_in_flight = 0;
  EXPECT_EQ(CreateAllReducer(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Without NCCL in the build, or without a GPU, "nccl" is refused clearly
// (and the test skips; on the GPU machine's device check it fails); with
// both it works for one rank.
TEST(AllReducerFactoryTest, NcclWorksOrIsAFailedPrecondition) {
  AllReduceOptions options;
  options.backend = "nccl";
  absl::StatusOr<std::unique_ptr<AllReducer>> reducer =
      CreateAllReducer(options);
  if (!reducer.ok()) {
    ASSERT_EQ(reducer.status().code(), absl::StatusCode::kFailedPrecondition)
        << reducer.status();
    LOCKSTEP_SKIP_WITHOUT_GPU(reducer.status());
  }
  EXPECT_EQ((*reducer)->Name(), "nccl");
  std::vector<float> data = {1.0f, 2.0f};
  ASSERT_TRUE((*reducer)->AllReduceSum(absl::MakeSpan(data)).ok());
  EXPECT_EQ(data, (std::vector<float>{1.0f, 2.0f}));
}

}  // namespace
}  // namespace lockstep
