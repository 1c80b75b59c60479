#include "worker/exchange/allreduce/ring_plan.h"

#include <algorithm>

namespace lockstep {

RingPlan::RingPlan(int size, int rank, size_t num_elements,
                   size_t chunk_elements)
    : size_(size),
      rank_(rank),
      num_elements_(num_elements),
      chunk_elements_(chunk_elements) {}

RingPlan::Range RingPlan::Segment(int segment) const {
  const size_t n = static_cast<size_t>(size_);
  const size_t k = static_cast<size_t>(segment);
  const size_t base = num_elements_ / n;
  const size_t extra = num_elements_ % n;  // The first `extra` get one more.
  return Range{k * base + std::min(k, extra), base + (k < extra ? 1 : 0)};
}

int64_t RingPlan::NumChunks(int segment) const {
  const size_t elements = Segment(segment).size;
  return static_cast<int64_t>((elements + chunk_elements_ - 1) /
                              chunk_elements_);
}

RingPlan::Range RingPlan::Chunk(int segment, int64_t chunk) const {
  const Range seg = Segment(segment);
  const size_t begin = static_cast<size_t>(chunk) * chunk_elements_;
  return Range{seg.offset + begin, std::min(chunk_elements_, seg.size - begin)};
}

int64_t RingPlan::NumSends() const {
  int64_t sends = 0;
  for (int step = 0; step < num_steps(); ++step) {
    sends += NumChunks(SendSegment(step));
  }
  return sends;
}

int64_t RingPlan::NumReceives() const {
  int64_t receives = 0;
  for (int step = 0; step < num_steps(); ++step) {
    receives += NumChunks(RecvSegment(step));
  }
  return receives;
}

}  // namespace lockstep
