// How a ring all-reduce cuts a vector and moves its pieces: pure arithmetic,
// shared by every rank (see proto/lockstep/v1/ring.proto).
//
// With n ranks the vector is cut into n segments whose sizes differ by at
// most one (the first ones larger), and each segment into chunks of at most
// chunk_elements. Step t runs over 0 .. 2(n - 1) - 1: at step t rank r sends
// the chunks of segment (r - t) mod n to rank r + 1 and receives those of
// segment (r - t - 1) mod n from rank r - 1. In the reduce-scatter steps
// (t < n - 1) a received chunk is added to the rank's own values; after them
// rank r holds the complete sum of segment k = (r + 1) mod n: rank k's
// values, plus rank k + 1's, ..., plus rank r's, in that order. In the
// all-gather steps a received chunk is copied, so every rank ends with the
// same bits. A chunk received at step t is the one sent at step t + 1, so
// each chunk travels its own pipeline.
//
// Immutable.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_PLAN_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_PLAN_H_

#include <cstddef>
#include <cstdint>

namespace lockstep {

class RingPlan final {
 public:
  // A run of elements of the whole vector.
  struct Range {
    size_t offset = 0;
    size_t size = 0;
  };

  // Requires size >= 1, 0 <= rank < size and chunk_elements >= 1.
  RingPlan(int size, int rank, size_t num_elements, size_t chunk_elements);

  int size() const { return size_; }
  int rank() const { return rank_; }
  size_t num_elements() const { return num_elements_; }

  // 2(n - 1): reduce-scatter steps, then as many all-gather steps.
  int num_steps() const { return 2 * (size_ - 1); }
  bool IsReduceStep(int step) const { return step < size_ - 1; }
  int SendSegment(int step) const { return Mod(rank_ - step); }
  int RecvSegment(int step) const { return Mod(rank_ - step - 1); }

  Range Segment(int segment) const;
  int64_t NumChunks(int segment) const;
  // Requires 0 <= chunk < NumChunks(segment).
  Range Chunk(int segment, int64_t chunk) const;

  // Chunks this rank sends (and receives) over a whole all-reduce.
  int64_t NumSends() const;
  int64_t NumReceives() const;

 private:
  int Mod(int x) const { return ((x % size_) + size_) % size_; }

  const int size_;
  const int rank_;
  const size_t num_elements_;
  const size_t chunk_elements_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_RING_PLAN_H_
