#include "worker/exchange/allreduce/ring_op.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/wire/wire_codec.h"

namespace lockstep {

RingOp::RingOp(int64_t id, absl::Span<float> data, RingPlan plan,
               absl::Time deadline)
    : id_(id), data_(data), plan_(plan), deadline_(deadline) {
  receives_left_ = plan_.NumReceives();
  sends_left_ = plan_.NumSends();
  received_.resize(plan_.num_steps());
  for (int step = 0; step < plan_.num_steps(); ++step) {
    received_[step].assign(plan_.NumChunks(plan_.RecvSegment(step)), false);
  }
  if (plan_.num_steps() > 0) {
    const int first = plan_.SendSegment(0);
    for (int64_t c = 0; c < plan_.NumChunks(first); ++c) {
      ready_.push_back(SendId{0, c});
    }
  }
}

void RingOp::Fail(absl::Status status) {
  if (error_.ok()) error_ = std::move(status);
}

absl::Status RingOp::Accept(const RingChunkView& chunk, int left_rank,
                            uint64_t left_session) {
  const int rank = plan_.rank();
  if (!error_.ok()) {
    return absl::AbortedError(absl::StrCat(
        "rank ", rank, "'s all-reduce failed: ", error_.message()));
  }
  absl::Status status;
  if (chunk.sender_rank != left_rank) {
    status = absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " takes chunks from rank ", left_rank,
                     ", not from rank ", chunk.sender_rank));
  } else if (chunk.session != left_session) {
    status = absl::FailedPreconditionError(
        absl::StrCat("chunk from a stale session of rank ", chunk.sender_rank));
  } else if (chunk.total_elements !=
             static_cast<int64_t>(plan_.num_elements())) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "rank ", chunk.sender_rank, " all-reduces ", chunk.total_elements,
        " floats, rank ", rank, " ", plan_.num_elements()));
  } else if (chunk.step < 0 || chunk.step >= plan_.num_steps()) {
    status = absl::InvalidArgumentError(
        absl::StrCat("ring step ", chunk.step, " out of range"));
  } else if (chunk.chunk < 0 ||
             chunk.chunk >=
                 static_cast<int64_t>(received_[chunk.step].size())) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "chunk ", chunk.chunk, " of step ", chunk.step, " out of range"));
  } else if (received_[chunk.step][chunk.chunk]) {
    status = absl::InvalidArgumentError(
        absl::StrCat("duplicate chunk ", chunk.chunk, " of step ", chunk.step));
  } else {
    const size_t expected =
        plan_.Chunk(plan_.RecvSegment(chunk.step), chunk.chunk).size *
        sizeof(float);
    if (chunk.data.size() != expected) {
      status = absl::InvalidArgumentError(
          absl::StrCat("chunk ", chunk.chunk, " of step ", chunk.step, " has ",
                       chunk.data.size(), " bytes, expected ", expected));
    }
  }
  if (!status.ok()) {
    Fail(status);
    return status;
  }
  received_[chunk.step][chunk.chunk] = true;
  return absl::OkStatus();
}

void RingOp::Apply(const RingChunkView& chunk) const {
  const RingPlan::Range range =
      plan_.Chunk(plan_.RecvSegment(chunk.step), chunk.chunk);
  absl::Span<float> target = data_.subspan(range.offset, range.size);
  if (plan_.IsReduceStep(chunk.step)) {
    AccumulateTensor(chunk.data, WireDType::kFloat32, target);
  } else {
    DecodeFloat32(chunk.data, target).IgnoreError();  // Accept checked it.
  }
}

void RingOp::Applied(const RingChunkHeader& chunk) {
  --receives_left_;
  if (chunk.step + 1 < plan_.num_steps()) {
    ready_.push_back(SendId{chunk.step + 1, chunk.chunk});
  }
}

std::vector<RingOp::SendId> RingOp::TakeReady(int max_in_flight) {
  std::vector<SendId> sends;
  while (error_.ok() && !ready_.empty() && window_ < max_in_flight) {
    sends.push_back(ready_.front());
    ready_.pop_front();
    ++window_;
  }
  return sends;
}

void RingOp::SendDone(bool acknowledged) {
  --window_;
  if (acknowledged) --sends_left_;
}

RingChunkHeader RingOp::HeaderOf(SendId send, uint64_t session) const {
  RingChunkHeader header;
  header.sender_rank = plan_.rank();
  header.session = session;
  header.op = id_;
  header.step = send.step;
  header.chunk = send.chunk;
  header.total_elements = static_cast<int64_t>(plan_.num_elements());
  return header;
}

absl::Span<const float> RingOp::ValuesOf(SendId send) const {
  const RingPlan::Range range =
      plan_.Chunk(plan_.SendSegment(send.step), send.chunk);
  return data_.subspan(range.offset, range.size);
}

}  // namespace lockstep
