#include "tests/gpu/local_steps.h"

#include <functional>
#include <memory>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"
#include "worker/model/model.h"

namespace lockstep {
namespace bench {
namespace {

// One worker's model and data for the local training loop.
struct Replica {
  std::unique_ptr<Device> device;
  std::unique_ptr<Model> model;
  std::vector<float> weights;
  std::vector<float> gradient;
  int64_t steps = 0;
  absl::Status status;
};

// Warms `r` up, reports ready, and once `start` is notified runs steps
// until `seconds` after *t0, counting them.
void TrainLocally(Replica* r, const Workload& work,
                  const std::vector<float>& features,
                  const std::vector<int32_t>& labels,
                  absl::BlockingCounter* ready, const absl::Notification* start,
                  const Clock::time_point* t0, double seconds) {
  const size_t width = features.size() / labels.size();
  auto step = [&](int64_t i) -> absl::Status {
    const size_t b = static_cast<size_t>(i % work.batches) * work.batch;
    RETURN_IF_ERROR(r->model->SetWeights(r->weights));
    absl::StatusOr<BatchStats> stats = r->model->ComputeGradients(
        absl::MakeConstSpan(features).subspan(b * width, work.batch * width),
        absl::MakeConstSpan(labels).subspan(b, work.batch),
        absl::MakeSpan(r->gradient));
    if (!stats.ok()) return stats.status();
    for (size_t j = 0; j < r->weights.size(); ++j) {
      r->weights[j] -= 0.01f * r->gradient[j];
    }
    return absl::OkStatus();
  };
  // Warm-up: caches, page faults, cuBLAS's first calls.
  for (int64_t i = 0; i < work.warmup && r->status.ok(); ++i) {
    r->status = step(i);
  }
  ready->DecrementCount();
  start->WaitForNotification();
  if (!r->status.ok()) return;
  while (SecondsSince(*t0) < seconds) {
    if (r->status = step(r->steps); !r->status.ok()) return;
    ++r->steps;
  }
}

}  // namespace

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<float> RandomFloats(size_t n, uint64_t seed) {
  Random random(seed);
  std::vector<float> v(n);
  for (float& x : v) x = random.Uniform(-1.0f, 1.0f);
  return v;
}

std::vector<int32_t> RandomLabels(size_t n, int classes, uint64_t seed) {
  Random random(seed);
  std::vector<int32_t> v(n);
  for (int32_t& y : v) y = static_cast<int32_t>(random.UniformInt(classes));
  return v;
}

Workload Tutorial() {
  Workload w;
  w.spec.name = "mlp";
  w.spec.input = {1, 1, 784};
  w.spec.hidden_units = {128};
  return w;
}

Workload ResNet50(int batch) {
  Workload w;
  w.spec.name = "resnet50";
  w.spec.input = {32, 32, 3};
  w.batch = batch;
  w.batches = 2;
  w.warmup = 3;
  return w;
}

absl::StatusOr<Rate> LocalRate(const Workload& work,
                               const DeviceOptions& options, int threads,
                               double seconds) {
  const size_t rows = size_t{1} * work.batch * work.batches;
  const size_t width = static_cast<size_t>(work.spec.input.size());
  const std::vector<float> features = RandomFloats(rows * width, 1);
  const std::vector<int32_t> labels =
      RandomLabels(rows, work.spec.num_classes, 2);
  std::vector<Replica> replicas(threads);
  for (Replica& r : replicas) {
    ASSIGN_OR_RETURN(r.device, CreateDevice(options));
    ASSIGN_OR_RETURN(r.model,
                     CreateModel(work.spec, work.batch, r.device.get()));
    r.weights = r.model->InitialWeights(42);
    r.gradient.resize(r.weights.size());
  }
  absl::BlockingCounter ready(threads);
  absl::Notification start;
  Clock::time_point t0;
  std::vector<std::thread> workers;
  for (Replica& r : replicas) {
    workers.emplace_back(TrainLocally, &r, std::cref(work), std::cref(features),
                         std::cref(labels), &ready, &start, &t0, seconds);
  }
  ready.Wait();  // The clock starts once every worker is warm.
  t0 = Clock::now();
  start.Notify();
  for (std::thread& w : workers) w.join();
  const double elapsed = SecondsSince(t0);
  int64_t steps = 0;
  for (const Replica& r : replicas) {
    RETURN_IF_ERROR(r.status);
    steps += r.steps;
  }
  if (steps == 0) {
    return absl::DeadlineExceededError(
        absl::StrFormat("no step finished within %.1f s", seconds));
  }
  return Rate{steps * work.batch / elapsed, elapsed * threads / steps * 1e3};
}

}  // namespace bench
}  // namespace lockstep
