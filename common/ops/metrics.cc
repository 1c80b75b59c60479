#include "common/ops/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

void AtomicAdd(std::atomic<double>* target, double delta) {
  double old = target->load(std::memory_order_relaxed);
  while (!target->compare_exchange_weak(old, old + delta,
                                        std::memory_order_relaxed)) {
  }
}

// A programmer error: a bad name or two uses of a family that disagree.
[[noreturn]] void Misuse(const std::string& message) {
  std::fprintf(stderr, "lockstep metrics: %s\n", message.c_str());
  std::abort();
}

bool ValidName(absl::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    c == '_' || (allow_colon && c == ':') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// Label values escape backslash, double quote and newline; help text
// backslash and newline.
std::string Escape(absl::string_view text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// `{a="x",b="y"}`, with `extra` (a histogram's le) last; empty for none.
std::string LabelText(const MetricLabels& labels,
                      const std::pair<std::string, std::string>* extra) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  for (const auto& [name, value] : labels) {
    absl::StrAppend(&out, out.size() > 1 ? "," : "", name, "=\"",
                    Escape(value, true), "\"");
  }
  if (extra != nullptr) {
    absl::StrAppend(&out, out.size() > 1 ? "," : "", extra->first, "=\"",
                    extra->second, "\"");
  }
  out += "}";
  return out;
}

}  // namespace

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Shortest round-trip digits; plain decimals ("0.0001", "123456789")
  // unless the exponent is extreme.
  const double magnitude = std::fabs(value);
  const std::chars_format format =
      value == 0 || (magnitude >= 1e-6 && magnitude < 1e15)
          ? std::chars_format::fixed
          : std::chars_format::general;
  char buffer[400];
  const std::to_chars_result r =
      std::to_chars(buffer, buffer + sizeof(buffer), value, format);
  return std::string(buffer, r.ptr);
}

void Counter::Increment(double delta) {
  if (delta > 0) AtomicAdd(&value_, delta);
}

void Counter::IncrementTo(double total) {
  double old = value_.load(std::memory_order_relaxed);
  while (total > old && !value_.compare_exchange_weak(
                            old, total, std::memory_order_relaxed)) {
  }
}

void Gauge::Add(double delta) { AtomicAdd(&value_, delta); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // Bucket i counts bounds_[i - 1] < value <= bounds_[i].
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) -
      bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, value);
}

Histogram::Reading Histogram::Read() const {
  Reading reading;
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    reading.cumulative.push_back(running);
  }
  reading.count = running;
  reading.sum = sum_.load(std::memory_order_relaxed);
  return reading;
}

std::vector<double> SecondsBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10,
          30,     60};
}

struct MetricsRegistry::Family {
  std::string help;
  Type type;
  std::vector<double> bounds;  // Histograms only.
  // By labels, so that the exposition is sorted.
  std::map<MetricLabels, std::unique_ptr<Counter>> counters;
  std::map<MetricLabels, std::unique_ptr<Gauge>> gauges;
  std::map<MetricLabels, std::unique_ptr<Histogram>> histograms;
};

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

MetricsRegistry::Family* MetricsRegistry::FamilyLocked(
    absl::string_view name, absl::string_view help, Type type,
    const std::vector<double>* bounds, const MetricLabels& labels) {
  if (!ValidName(name, /*allow_colon=*/true)) {
    Misuse(absl::StrCat("invalid metric name \"", name, "\""));
  }
  for (const auto& [label, value] : labels) {
    if (!ValidName(label, /*allow_colon=*/false) || label == "le" ||
        absl::StartsWith(label, "__")) {
      Misuse(absl::StrCat("invalid label name \"", label, "\" on ", name));
    }
  }
  auto [it, inserted] = families_.try_emplace(std::string(name));
  if (inserted) {
    it->second = std::make_unique<Family>();
    it->second->help = std::string(help);
    it->second->type = type;
    if (bounds != nullptr) {
      if (!std::is_sorted(bounds->begin(), bounds->end()) ||
          std::adjacent_find(bounds->begin(), bounds->end()) != bounds->end()) {
        Misuse(absl::StrCat("histogram ", name, " needs increasing bounds"));
      }
      it->second->bounds = *bounds;
    }
    return it->second.get();
  }
  Family* family = it->second.get();
  if (family->type != type || family->help != help ||
      (bounds != nullptr && family->bounds != *bounds)) {
    Misuse(absl::StrCat("metric ", name,
                        " is used with two types, help texts or bucket sets"));
  }
  return family;
}

Counter* MetricsRegistry::GetCounter(absl::string_view name,
                                     absl::string_view help,
                                     const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Family* family = FamilyLocked(name, help, Type::kCounter, nullptr, labels);
  std::unique_ptr<Counter>& series = family->counters[labels];
  if (series == nullptr) series = std::make_unique<Counter>();
  return series.get();
}

Gauge* MetricsRegistry::GetGauge(absl::string_view name,
                                 absl::string_view help,
                                 const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Family* family = FamilyLocked(name, help, Type::kGauge, nullptr, labels);
  std::unique_ptr<Gauge>& series = family->gauges[labels];
  if (series == nullptr) series = std::make_unique<Gauge>();
  return series.get();
}

Histogram* MetricsRegistry::GetHistogram(absl::string_view name,
                                         absl::string_view help,
                                         const std::vector<double>& bounds,
                                         const MetricLabels& labels) {
  absl::MutexLock lock(&mu_);
  Family* family = FamilyLocked(name, help, Type::kHistogram, &bounds, labels);
  std::unique_ptr<Histogram>& series = family->histograms[labels];
  if (series == nullptr) series = std::make_unique<Histogram>(bounds);
  return series.get();
}

void MetricsRegistry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collect));
}

std::string MetricsRegistry::Render() const {
  std::vector<std::function<void()>> collectors;
  {
    absl::MutexLock lock(&mu_);
    collectors = collectors_;
  }
  for (const auto& collect : collectors) collect();

  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, family] : families_) {
    static constexpr const char* kTypeNames[] = {"counter", "gauge",
                                                 "histogram"};
    absl::StrAppend(&out, "# HELP ", name, " ", Escape(family->help, false),
                    "\n# TYPE ", name, " ",
                    kTypeNames[static_cast<int>(family->type)], "\n");
    for (const auto& [labels, counter] : family->counters) {
      absl::StrAppend(&out, name, LabelText(labels, nullptr), " ",
                      FormatMetricValue(counter->Value()), "\n");
    }
    for (const auto& [labels, gauge] : family->gauges) {
      absl::StrAppend(&out, name, LabelText(labels, nullptr), " ",
                      FormatMetricValue(gauge->Value()), "\n");
    }
    for (const auto& [labels, histogram] : family->histograms) {
      const Histogram::Reading r = histogram->Read();
      for (size_t i = 0; i < r.cumulative.size(); ++i) {
        const std::pair<std::string, std::string> le(
            "le", i < family->bounds.size()
                      ? FormatMetricValue(family->bounds[i])
                      : std::string("+Inf"));
        absl::StrAppend(&out, name, "_bucket", LabelText(labels, &le), " ",
                        r.cumulative[i], "\n");
      }
      absl::StrAppend(&out, name, "_sum", LabelText(labels, nullptr), " ",
                      FormatMetricValue(r.sum), "\n", name, "_count",
                      LabelText(labels, nullptr), " ", r.count, "\n");
    }
  }
  return out;
}

}  // namespace lockstep
