// Process metrics in the Prometheus text exposition format (version 0.0.4).
//
// MetricsRegistry owns every series of a process: counters, gauges and
// histograms with fixed buckets, each a family name plus optional labels
// (`lockstep_server_barrier_wait_seconds{rank="1"}`). A caller asks for a
// series once, keeps the pointer (valid as long as the registry) and updates
// it lock-free from any thread. Values that live elsewhere (a core's
// cumulative counters) are copied in by collectors, which Render() runs
// before it writes the text, so a scrape always sees fresh ones.
//
//   MetricsRegistry registry;
//   Counter* steps = registry.GetCounter("lockstep_worker_steps_total",
//                                        "Training steps completed.");
//   steps->Increment();
//   std::string text = registry.Render();  // What GET /metrics returns.
//
// Names must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
// [a-zA-Z_][a-zA-Z0-9_]* (not "le", which histograms own), and one family
// has one type, help text and bucket set: anything else is a programmer
// error and aborts with a message. Thread-safe.
#ifndef LOCKSTEP_COMMON_OPS_METRICS_H_
#define LOCKSTEP_COMMON_OPS_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace lockstep {

// Label name/value pairs of one series, in the order they are written.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A value that only goes up. Lock-free.
class Counter final {
 public:
  // `delta` below zero is ignored: counters never go down.
  void Increment(double delta = 1);
  // Raises the value to `total` when it is higher: mirrors a cumulative
  // count kept elsewhere without ever going down.
  void IncrementTo(double total);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down. Lock-free.
class Gauge final {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Counts observations into fixed buckets (upper bounds, increasing; +Inf is
// implied). Lock-free; a reading taken while others observe may miss the
// newest observations but is always self-consistent in its buckets.
class Histogram final {
 public:
  explicit Histogram(std::vector<double> bounds);

  // NaN is ignored.
  void Observe(double value);

  struct Reading {
    std::vector<uint64_t> cumulative;  // One per bound, then +Inf.
    uint64_t count = 0;                // == cumulative.back().
    double sum = 0;
  };
  Reading Read() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // Per bucket, +Inf last.
  std::atomic<double> sum_{0};
};

// Bucket bounds in seconds, 100 us to 60 s, for step and phase times.
std::vector<double> SecondsBuckets();

class MetricsRegistry final {
 public:
  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The series `name{labels}`, made on first use. `help` is the family's
  // one-line description.
  Counter* GetCounter(absl::string_view name, absl::string_view help,
                      const MetricLabels& labels = {});
  Gauge* GetGauge(absl::string_view name, absl::string_view help,
                  const MetricLabels& labels = {});
  Histogram* GetHistogram(absl::string_view name, absl::string_view help,
                          const std::vector<double>& bounds,
                          const MetricLabels& labels = {});

  // `collect` runs at the start of every Render(), on the rendering thread
  // and without the registry's lock (so it may call Get*). It must stay
  // valid as long as the registry.
  void AddCollector(std::function<void()> collect);

  // Every family, sorted by name, with # HELP and # TYPE lines; series
  // sorted by labels.
  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Family;

  Family* FamilyLocked(absl::string_view name, absl::string_view help,
                       Type type, const std::vector<double>* bounds,
                       const MetricLabels& labels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Family>> families_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
};

// The exposition's number format: shortest round-trip decimal, "+Inf",
// "-Inf" or "NaN".
std::string FormatMetricValue(double value);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPS_METRICS_H_
