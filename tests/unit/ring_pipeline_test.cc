// RingPipeline, the ring passes, with ranks as threads in one process and
// chunks carried by an in-process RingLink on a thread of its own, as
// gRPC's threads would.
#include "worker/exchange/allreduce/ring_pipeline.h"

#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/wire/wire_codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/in_process_coordinator.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

// Delivers chunks to `sink` in order on one thread. A send ends with the
// sink's answer or with Cancel's CANCELLED, whichever comes first.
class ThreadLink final : public RingLink {
 public:
  explicit ThreadLink(RingChunkSink* sink)
      : sink_(sink), thread_([this] { Deliver(); }) {}
  ~ThreadLink() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  std::unique_ptr<RingSend> NewSend() override {
    return std::make_unique<Send>(this);
  }

 private:
  // What a send and its delivery share: the answer goes out once.
  struct State {
    absl::Mutex mu;
    bool ended = false;
    RingSend::Done done;
    void End(absl::Status status) {
      RingSend::Done to_call;
      {
        absl::MutexLock lock(&mu);
        if (ended || !done) {
          ended = true;
          return;
        }
        ended = true;
        to_call = std::move(done);
      }
      to_call(std::move(status));
    }
  };
  struct Item {
    RingChunkHeader header;
    std::shared_ptr<std::string> payload;
    std::shared_ptr<State> state;
  };
  class Send final : public RingSend {
   public:
    explicit Send(ThreadLink* link) : link_(link) {}
    void Start(const RingChunkHeader& header, absl::Span<const float> values,
               absl::Time, Done done) override {
      auto payload = std::make_shared<std::string>();
      EncodeFloat32(values, payload.get());
      bool cancelled;
      {
        absl::MutexLock lock(&state_->mu);
        cancelled = state_->ended;
        if (!cancelled) state_->done = std::move(done);
      }
      if (cancelled) return done(absl::CancelledError("cancelled"));
      absl::MutexLock lock(&link_->mu_);
      link_->queue_.push_back(Item{header, std::move(payload), state_});
    }
    void Cancel() override { state_->End(absl::CancelledError("cancelled")); }

   private:
    ThreadLink* const link_;
    const std::shared_ptr<State> state_ = std::make_shared<State>();
  };

  void Deliver() {
    while (true) {
      Item item;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &ThreadLink::StoppingOrBusy));
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      RingChunkView view;
      static_cast<RingChunkHeader&>(view) = item.header;
      view.data = *item.payload;
      sink_->OnChunk(view, [item](absl::Status status) {
        item.state->End(std::move(status));
      });
    }
  }

  bool StoppingOrBusy() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || !queue_.empty();
  }

  RingChunkSink* const sink_;  // Not owned.
  absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

AllReduceOptions Options(int rank, int size) {
  AllReduceOptions options;
  options.rank = rank;
  options.size = size;
  options.chunk_bytes = 8;  // Two floats: many chunks, many pipelines.
  options.max_in_flight = 2;
  options.op_timeout = absl::Seconds(20);
  return options;
}

// `n` pipelines joined into a ring (rank r's session is 100 + r).
struct Ring {
  explicit Ring(int n, absl::Duration op_timeout = absl::Seconds(20)) {
    for (int r = 0; r < n; ++r) {
      AllReduceOptions options = Options(r, n);
      options.op_timeout = op_timeout;
      pipelines.push_back(std::make_unique<RingPipeline>(options, 100 + r));
    }
    for (int r = 0; r < n; ++r) {
      links.push_back(
          std::make_unique<ThreadLink>(pipelines[(r + 1) % n].get()));
    }
    for (int r = 0; r < n; ++r) {
      pipelines[r]->Connect(links[r].get(), 100 + (r + n - 1) % n);
    }
  }
  ~Ring() {
    for (auto& pipeline : pipelines) pipeline->Close();
    links.clear();
  }
  std::vector<std::unique_ptr<RingPipeline>> pipelines;
  std::vector<std::unique_ptr<ThreadLink>> links;
};

// Integers in [-1000, 1000]: their fp32 sums over a few ranks are exact.
std::vector<float> IntegerData(size_t length, int rank) {
  std::mt19937 gen(11 + rank);
  std::uniform_int_distribution<int> dist(-1000, 1000);
  std::vector<float> data(length);
  for (float& x : data) x = static_cast<float>(dist(gen));
  return data;
}

TEST(RingPipelineTest, ThreeRanksSumExactlyInRingOrderAndStayInStep) {
  const int n = 3;
  Ring ring(n);
  // Call 0: segment k is summed as rank k's value plus rank k + 1's plus
  // rank k + 2's; 1 + 1e8 rounds to 1e8, so the ring's sums are 0 where the
  // true ones are 1. Call 1: nothing to exchange. Calls 2 and 3: integers.
  const std::vector<std::vector<float>> ordered = {
      {1, -1e8f, 1e8f}, {1e8f, 1, -1e8f}, {-1e8f, 1e8f, 1}};
  std::vector<std::vector<std::vector<float>>> results(n);
  std::vector<absl::Status> statuses(n);
  RunRanks(n, [&](int rank) {
    std::vector<std::vector<float>> calls = {
        ordered[rank], {}, IntegerData(1001, rank), IntegerData(7, rank)};
    for (std::vector<float>& data : calls) {
      statuses[rank].Update(
          ring.pipelines[rank]->AllReduceSum(absl::MakeSpan(data)));
    }
    results[rank] = std::move(calls);
  });
  for (int rank = 0; rank < n; ++rank) {
    ASSERT_TRUE(statuses[rank].ok())
        << "rank " << rank << ": " << statuses[rank];
    EXPECT_EQ(results[rank][0], (std::vector<float>{0, 0, 0}));
    EXPECT_TRUE(results[rank][1].empty());
    for (size_t call : {size_t{2}, size_t{3}}) {
      const size_t length = call == 2 ? 1001 : 7;
      std::vector<float> expected(length, 0.0f);
      for (int r = 0; r < n; ++r) {
        const std::vector<float> input = IntegerData(length, r);
        for (size_t i = 0; i < length; ++i) expected[i] += input[i];
      }
      EXPECT_EQ(results[rank][call], expected) << "rank " << rank;
    }
  }
}

TEST(RingPipelineTest, HeldChunksAreRefusedWhenItCloses) {
  RingPipeline pipeline(Options(1, 2), 101);
  std::string payload(8, '\0');
  RingChunkView chunk;
  chunk.sender_rank = 0;
  chunk.session = 100;
  chunk.total_elements = 4;
  chunk.data = payload;
  absl::Status held_answer = absl::UnknownError("not answered");
  pipeline.OnChunk(chunk, [&](absl::Status s) { held_answer = s; });
  // All-reduce 0 has not started: the chunk waits, unanswered.
  EXPECT_EQ(held_answer.code(), absl::StatusCode::kUnknown);
  pipeline.Close();
  EXPECT_EQ(held_answer.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(held_answer.message(), "rank 1 is closing its ring");
  absl::Status late;
  pipeline.OnChunk(chunk, [&](absl::Status s) { late = s; });
  EXPECT_EQ(late, held_answer);
}

// A chunk from another rank, or from the left rank under a session that is
// not its own (made up, or a process before it), is refused at once and
// held nowhere: the ring's own all-reduce then runs as if it never came.
// (Before, both were held until the op began: 40 made-up 1 MiB chunks
// cost a worker 46 MiB, and the wrong rank's failed the op.)
TEST(RingPipelineTest, ChunksNotFromTheLeftRanksSessionAreRefusedAtOnce) {
  Ring ring(2);
  std::string payload(8, '\0');
  RingChunkView chunk;
  chunk.sender_rank = 0;  // Rank 0's left neighbour is rank 1 (session 101).
  chunk.session = 101;
  chunk.op = 5;  // A later all-reduce: such a chunk would be held.
  chunk.total_elements = 4;
  chunk.data = payload;
  absl::Status wrong_rank = absl::UnknownError("not answered");
  ring.pipelines[0]->OnChunk(chunk, [&](absl::Status s) { wrong_rank = s; });
  EXPECT_EQ(wrong_rank.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(wrong_rank.message(),
            "rank 0 takes chunks from rank 1 of session 101, not from rank 0 "
            "of session 101");
  chunk.sender_rank = 1;
  chunk.session = 7;  // Made up.
  absl::Status made_up = absl::UnknownError("not answered");
  ring.pipelines[0]->OnChunk(chunk, [&](absl::Status s) { made_up = s; });
  EXPECT_EQ(made_up.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(made_up.message(), HasSubstr("not from rank 1 of session 7"));
  // The ring is unharmed: both ranks sum as ever.
  std::vector<std::vector<float>> data = {{1, 2, 3, 4}, {10, 20, 30, 40}};
  std::vector<absl::Status> status(2);
  std::thread other([&] {
    status[1] = ring.pipelines[1]->AllReduceSum(absl::MakeSpan(data[1]));
  });
  status[0] = ring.pipelines[0]->AllReduceSum(absl::MakeSpan(data[0]));
  other.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_EQ(data[r], (std::vector<float>{11, 22, 33, 44}));
  }
}

// Rank 1 never reduces: rank 0 fails at its deadline (its sends, held by
// rank 1, cancelled), and stays failed.
TEST(RingPipelineTest, APeerThatNeverReducesFailsTheOpAtItsDeadline) {
  Ring ring(2, absl::Milliseconds(200));
  std::vector<float> data = IntegerData(100, 0);
  const absl::Time start = absl::Now();
  const absl::Status status =
      ring.pipelines[0]->AllReduceSum(absl::MakeSpan(data));
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_GE(elapsed, absl::Milliseconds(190));
  EXPECT_LT(elapsed, absl::Seconds(10));
  EXPECT_EQ(ring.pipelines[0]->AllReduceSum(absl::MakeSpan(data)).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace lockstep
