#include "worker/exchange/allreduce/gloo_all_reducer.h"

#include <chrono>
#include <exception>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "gloo/allreduce.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/tcp/device.h"
#include "worker/exchange/allreduce/coordinator_client.h"
#include "worker/exchange/allreduce/coordinator_gloo_store.h"

namespace lockstep {
namespace {

std::chrono::milliseconds ToMilliseconds(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// c = a + b elementwise, for gloo's reduction hook. (gloo::sum counts with
// an int, which would overflow past 2^31 elements.)
void SumFloats(void* c, const void* a, const void* b, size_t n) {
  float* out = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

// The one boundary where gloo's exceptions become statuses. `what` names the
// operation. Our own store's errors keep their status; gloo's I/O timeouts
// ("Timed out ...") become DEADLINE_EXCEEDED and its other I/O errors
// UNAVAILABLE (a peer went away).
template <typename Fn>
absl::Status CallGloo(absl::string_view what, Fn&& fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const StoreError& e) {
    return absl::Status(e.status().code(),
                        absl::StrCat(what, ": ", e.status().message()));
  } catch (const gloo::IoException& e) {
    const bool timed_out = absl::StrContains(e.what(), "Timed out") ||
                           absl::StrContains(e.what(), "timed out");
    return absl::Status(timed_out ? absl::StatusCode::kDeadlineExceeded
                                  : absl::StatusCode::kUnavailable,
                        absl::StrCat(what, ": gloo: ", e.what()));
  } catch (const gloo::InvalidOperationException& e) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": gloo: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": gloo: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<AllReducer>> GlooAllReducer::Create(
    const AllReduceOptions& options) {
  if (options.size == 1) {
    return absl::WrapUnique(new GlooAllReducer(options, nullptr));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> client,
                   CoordinatorClient::Create(options.coordinator,
                                             options.tls));
  CoordinatorGlooStore store(client.get(),
                             absl::StrCat(options.group, "/gloo/"),
                             options.rendezvous_timeout);
  std::shared_ptr<gloo::rendezvous::Context> context;
  RETURN_IF_ERROR(CallGloo(
      absl::StrCat("gloo rendezvous of rank ", options.rank, " of ",
                   options.size, " through ", options.coordinator),
      [&] {
        gloo::transport::tcp::attr attr;
        attr.hostname = options.host;
        std::shared_ptr<gloo::transport::Device> device =
            gloo::transport::tcp::CreateDevice(attr);
        context = std::make_shared<gloo::rendezvous::Context>(options.rank,
                                                              options.size);
        // connectFullMesh waits this long for the other ranks' addresses
        // and connections; operations then get op_timeout.
        context->setTimeout(ToMilliseconds(options.rendezvous_timeout));
        context->connectFullMesh(store, device);
        context->setTimeout(ToMilliseconds(options.op_timeout));
      }));
  return absl::WrapUnique(new GlooAllReducer(options, std::move(context)));
}

GlooAllReducer::GlooAllReducer(const AllReduceOptions& options,
                               std::shared_ptr<gloo::Context> context)
    : options_(options), context_(std::move(context)) {}

GlooAllReducer::~GlooAllReducer() = default;

absl::Status GlooAllReducer::AllReduceSum(absl::Span<float> data) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("a previous gloo all-reduce failed: ", broken_.message()));
  }
  // Every rank has the same length, so all skip together.
  if (context_ == nullptr || data.empty()) return absl::OkStatus();
  absl::Status status = CallGloo(
      absl::StrCat("gloo all-reduce of ", data.size(), " floats on rank ",
                   options_.rank),
      [&] {
        gloo::AllreduceOptions opts(context_);
        opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
        opts.setOutput(data.data(), data.size());  // In place.
        opts.setReduceFunction(&SumFloats);
        opts.setMaxSegmentSize(static_cast<size_t>(
            options_.chunk_bytes == kAutoChunkBytes ? kDefaultChunkBytes
                                                    : options_.chunk_bytes));
        opts.setTimeout(ToMilliseconds(options_.op_timeout));
        gloo::allreduce(opts);
      });
  if (!status.ok()) broken_ = status;
  return status;
}

}  // namespace lockstep
