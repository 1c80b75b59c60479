// The wire codec over payloads that arrive in pieces (gRPC's slices):
// finiteness checks, sums and decoding straight from the pieces, without
// joining them, in parallel blocks on a WorkPool where one is given. The
// whole-buffer codec is wire_codec.cc.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/work_pool.h"
#include "common/kernels/kernels.h"
#include "common/wire/wire_codec.h"

namespace lockstep {
namespace {

int KernelIndex(WireDType dtype) { return static_cast<int>(dtype); }

}  // namespace

namespace {

// Index of the first NaN or Inf in a contiguous encoded run. The
// vectorized pass of common/kernels/kernels.h comes first; the search runs only
// when something is wrong. Reads go through memcpy, so unaligned payloads
// are fine.
template <typename Bits>
std::optional<size_t> FindNonFiniteIn(const char* p, size_t n, Bits exponent) {
  for (size_t i = 0; i < n; ++i) {
    Bits bits;
    std::memcpy(&bits, p + sizeof(Bits) * i, sizeof(Bits));
    if ((bits & exponent) == exponent) return i;
  }
  return std::nullopt;
}

std::optional<size_t> FindNonFinite(absl::string_view bytes, WireDType dtype) {
  const size_t n = bytes.size() / BytesPerElement(dtype);
  if (!kernels::Active().any_nonfinite[KernelIndex(dtype)](bytes.data(), n)) {
    return std::nullopt;
  }
  switch (dtype) {
    case WireDType::kFloat32:
      return FindNonFiniteIn<uint32_t>(bytes.data(), n, 0x7f800000u);
    case WireDType::kBfloat16:
      return FindNonFiniteIn<uint16_t>(bytes.data(), n, 0x7f80);
    case WireDType::kFloat16:
      return FindNonFiniteIn<uint16_t>(bytes.data(), n, 0x7c00);
  }
  return std::nullopt;
}

// Calls fn(run, first_element, carried) for runs of whole elements in
// order: runs inside a piece are passed in place; an element split across
// pieces is assembled in a small buffer first (`carried`: the run points
// there, and only until fn returns).
template <typename Fn>
void ForEachRunOrCarried(absl::Span<const absl::string_view> pieces,
                         size_t width, Fn fn) {
  char carry[4];
  size_t carried = 0;
  size_t element = 0;
  for (absl::string_view piece : pieces) {
    if (carried > 0) {
      const size_t take = std::min(width - carried, piece.size());
      if (take > 0) std::memcpy(carry + carried, piece.data(), take);
      carried += take;
      piece.remove_prefix(take);
      if (carried < width) continue;
      fn(absl::string_view(carry, width), element++, true);
      carried = 0;
    }
    const size_t whole = piece.size() / width * width;
    if (whole > 0) {
      fn(piece.substr(0, whole), element, false);
      element += whole / width;
    }
    carried = piece.size() - whole;
    // memcpy from null (an empty piece's data) is undefined even for 0.
    if (carried > 0) std::memcpy(carry, piece.data() + whole, carried);
  }
}

// The same for callers that read each run at once: fn(run, first_element).
template <typename Fn>
void ForEachRun(absl::Span<const absl::string_view> pieces, size_t width,
                Fn fn) {
  ForEachRunOrCarried(
      pieces, width,
      [&](absl::string_view run, size_t first, bool) { fn(run, first); });
}

}  // namespace

size_t PiecesSize(absl::Span<const absl::string_view> pieces) {
  size_t n = 0;
  for (absl::string_view p : pieces) n += p.size();
  return n;
}

absl::Status CheckFinitePieces(absl::Span<const absl::string_view> pieces,
                               WireDType dtype) {
  std::optional<size_t> bad;
  ForEachRun(pieces, BytesPerElement(dtype),
             [&](absl::string_view run, size_t first) {
               if (bad.has_value()) return;
               if (std::optional<size_t> i = FindNonFinite(run, dtype)) {
                 bad = first + *i;
               }
             });
  if (!bad.has_value()) return absl::OkStatus();
  // Decode the offending element for the message.
  const size_t width = BytesPerElement(dtype);
  char element[4];
  size_t skipped = 0, copied = 0;
  for (absl::string_view piece : pieces) {
    for (char c : piece) {
      if (skipped < *bad * width) {
        ++skipped;
      } else if (copied < width) {
        element[copied++] = c;
      }
    }
  }
  std::vector<float> value(1);
  DecodeTensor(absl::string_view(element, width), dtype, absl::MakeSpan(value))
      .IgnoreError();
  return absl::InvalidArgumentError(
      absl::StrCat("element ", *bad, " is ", value[0], " (not finite)"));
}

void AccumulatePieces(absl::Span<const absl::string_view> pieces,
                      WireDType dtype, absl::Span<float> sum) {
  const size_t width = BytesPerElement(dtype);
  ForEachRun(pieces, width, [&](absl::string_view run, size_t first) {
    AccumulateTensor(run, dtype, sum.subspan(first, run.size() / width));
  });
}

namespace {

// A payload's whole elements in place, for splitting by element: an
// element split across pieces is assembled in `carried`, whose capacity
// (one per piece) keeps the pointers into it valid.
struct Run {
  const char* data;
  size_t elements;
  size_t first;  // Index of its first element in the payload.
};
using Carried = std::vector<std::array<char, 4>>;

std::vector<Run> Runs(absl::Span<const absl::string_view> pieces, size_t width,
                      Carried* carried) {
  std::vector<Run> runs;
  carried->reserve(pieces.size());
  ForEachRunOrCarried(
      pieces, width, [&](absl::string_view run, size_t first, bool is_carried) {
        const char* data = run.data();
        if (is_carried) {
          carried->emplace_back();
          std::memcpy(carried->back().data(), data, width);
          data = carried->back().data();
        }
        runs.push_back({data, run.size() / width, first});
      });
  return runs;
}

// Calls fn(data, n, first) for the parts of `runs` in elements [begin, end).
template <typename Fn>
void ForEachInRange(const std::vector<Run>& runs, size_t width, size_t begin,
                    size_t end, Fn fn) {
  auto it = std::upper_bound(
      runs.begin(), runs.end(), begin,
      [](size_t element, const Run& run) { return element < run.first; });
  if (it != runs.begin()) --it;
  for (; it != runs.end() && it->first < end; ++it) {
    const size_t from = std::max(begin, it->first);
    const size_t to = std::min(end, it->first + it->elements);
    if (from >= to) continue;
    fn(it->data + (from - it->first) * width, to - from, from);
  }
}

bool Parallel(WorkPool* pool, int64_t grain, size_t elements) {
  return pool != nullptr && pool->threads() > 1 && grain > 0 &&
         static_cast<int64_t>(elements) > grain;
}

// Calls fn(data, n, first) for every part of `runs` (which cover
// `elements`), split over `pool` in blocks of `grain` elements.
template <typename Fn>
void ForEachRunInParallel(WorkPool* pool, int64_t grain,
                          const std::vector<Run>& runs, size_t width,
                          size_t elements, Fn fn) {
  pool->ParallelFor(static_cast<int64_t>(elements), grain,
                    [&](int64_t begin, int64_t end) {
                      ForEachInRange(runs, width, begin, end, fn);
                    });
}

// sum op= the payload, where op is the decode (overwrite) or the sum.
void SumRuns(absl::Span<const absl::string_view> pieces, WireDType dtype,
             absl::Span<float> sum, bool overwrite, WorkPool* pool,
             int64_t grain, const std::vector<Run>* runs) {
  const kernels::Table& k = kernels::Active();
  const int index = KernelIndex(dtype);
  const size_t width = BytesPerElement(dtype);
  const auto op = overwrite ? k.decode[index] : k.accumulate[index];
  if (runs != nullptr) {
    ForEachRunInParallel(pool, grain, *runs, width, sum.size(),
                         [&](const char* p, size_t n, size_t first) {
                           op(p, n, sum.data() + first);
                         });
    return;
  }
  ForEachRun(pieces, width, [&](absl::string_view run, size_t first) {
    op(run.data(), run.size() / width, sum.data() + first);
  });
}

}  // namespace

absl::Status AccumulateCheckedPieces(absl::Span<const absl::string_view> pieces,
                                     WireDType dtype, absl::Span<float> sum,
                                     bool overwrite, WorkPool* pool,
                                     int64_t grain) {
  const kernels::Table& k = kernels::Active();
  const int index = KernelIndex(dtype);
  const size_t width = BytesPerElement(dtype);
  std::atomic<bool> bad{false};
  Carried carried;
  std::vector<Run> runs;
  const bool parallel = Parallel(pool, grain, sum.size());
  if (parallel) {
    runs = Runs(pieces, width, &carried);
    ForEachRunInParallel(pool, grain, runs, width, sum.size(),
                         [&](const char* p, size_t n, size_t) {
                           if (k.any_nonfinite[index](p, n)) bad = true;
                         });
  } else {
    ForEachRun(pieces, width, [&](absl::string_view run, size_t) {
      if (!bad && k.any_nonfinite[index](run.data(), run.size() / width)) {
        bad = true;
      }
    });
  }
  // Names the first bad element (a second, slow pass, on bad input only).
  if (bad) return CheckFinitePieces(pieces, dtype);
  SumRuns(pieces, dtype, sum, overwrite, pool, grain,
          parallel ? &runs : nullptr);
  return absl::OkStatus();
}

void AccumulateUncheckedPieces(absl::Span<const absl::string_view> pieces,
                               WireDType dtype, absl::Span<float> sum,
                               bool overwrite, WorkPool* pool, int64_t grain) {
  if (!Parallel(pool, grain, sum.size())) {
    SumRuns(pieces, dtype, sum, overwrite, pool, grain, nullptr);
    return;
  }
  Carried carried;
  const std::vector<Run> runs = Runs(pieces, BytesPerElement(dtype), &carried);
  SumRuns(pieces, dtype, sum, overwrite, pool, grain, &runs);
}

absl::Status DecodePieces(absl::Span<const absl::string_view> pieces,
                          WireDType dtype, absl::Span<float> out) {
  const size_t width = BytesPerElement(dtype);
  const size_t bytes = PiecesSize(pieces);
  if (bytes != out.size() * width) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload has ", bytes, " bytes, expected ",
                     out.size() * width, " (", out.size(), " ",
                     WireDTypeName(dtype), " values)"));
  }
  ForEachRun(pieces, width, [&](absl::string_view run, size_t first) {
    DecodeTensor(run, dtype, out.subspan(first, run.size() / width))
        .IgnoreError();  // Sizes match by construction.
  });
  return absl::OkStatus();
}

}  // namespace lockstep
