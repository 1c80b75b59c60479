#include "common/optim/optimizer.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/base/status_macros.h"
#include "common/kernels/kernels.h"
#include "common/model/model_signature.h"
#include "common/optim/lr_schedule.h"

namespace lockstep {
namespace {

absl::Status CheckPositiveFinite(const char* setting, double value) {
  if (value > 0 && std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(setting, " must be positive and finite, got ", value));
}

// Momentum and betas of 1 (or more) never forget a gradient, and Adam's bias
// correction divides by 1 - beta_1^t, so the interval is half-open.
absl::Status CheckUnitInterval(const char* setting, double value) {
  if (value >= 0 && value < 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(setting, " must be in [0, 1), got ", value));
}

absl::Status Validate(const OptimizerConfig& config, int64_t num_parameters) {
  if (!OptimizerConfig::IsServerName(config.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown optimizer \"", config.name, "\"; expected ",
                     OptimizerConfig::NamesText()));
  }
  if (num_parameters < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_parameters must not be negative, got ", num_parameters));
  }
  // Every setting is checked, used or not: the config is part of the model
  // signature all processes compare, and the defaults are always in range,
  // so an out-of-range value is a mistake worth reporting.
  RETURN_IF_ERROR(CheckPositiveFinite("learning_rate", config.learning_rate));
  RETURN_IF_ERROR(CheckUnitInterval("momentum", config.momentum));
  RETURN_IF_ERROR(CheckUnitInterval("beta_1", config.beta_1));
  RETURN_IF_ERROR(CheckUnitInterval("beta_2", config.beta_2));
  RETURN_IF_ERROR(CheckPositiveFinite("epsilon", config.epsilon));
  if (!(config.weight_decay >= 0 && std::isfinite(config.weight_decay))) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_decay must be non-negative and finite, got ",
                     config.weight_decay));
  }
  return ValidateLrSchedule(config.schedule);
}

// A slice outside the slots would silently corrupt memory; it can only come
// from a bug in the caller's chunking, so it is fatal rather than a Status.
void CheckRangeOrDie(int64_t offset, size_t size, int64_t num_parameters) {
  if (offset >= 0 && offset <= num_parameters &&
      static_cast<int64_t>(size) <= num_parameters - offset) {
    return;
  }
  std::fprintf(stderr,
               "Optimizer::Apply: range [%lld, %lld) outside %lld parameters\n",
               static_cast<long long>(offset),
               static_cast<long long>(offset) + static_cast<long long>(size),
               static_cast<long long>(num_parameters));
  std::abort();
}

// The source pointer for the loops: null in place (the loops then read `to`).
const float* Source(absl::Span<const float> from, absl::Span<float> to) {
  return from.data() == to.data() ? nullptr : from.data();
}

// Keras SGD (2.11+), with optional momentum, Nesterov and weight decay.
// "sgd" and "momentum" differ only in their defaults; momentum 0 keeps no
// velocity slot, like Keras.
// Thread-safety: updates of disjoint ranges may run concurrently.
class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& config, int64_t num_parameters)
      : config_(config),
        num_parameters_(num_parameters),
        momentum_(static_cast<float>(config.momentum)),
        weight_decay_(static_cast<float>(config.weight_decay)),
        velocity_(config.momentum != 0 ? num_parameters : 0, 0.0f) {}

  void ApplyMean(int64_t step, int64_t offset, absl::Span<const float> from,
                 absl::Span<float> to, absl::Span<const float> sum,
                 float scale) override {
    CheckRangeOrDie(offset, to.size(), num_parameters_);
    const size_t n = to.size();
    const float* source = Source(from, to);
    const float lr = static_cast<float>(LearningRateAt(config_, step));
    const float wd = weight_decay_;
    // Decay is skipped at zero so that infinite weights stay infinite.
    const bool in_place = source == nullptr, decay = wd != 0;
    const kernels::Table& k = kernels::Active();
    if (velocity_.empty()) {
      k.sgd[in_place][decay](n, lr, wd, scale, sum.data(), source, to.data());
    } else {
      k.momentum[in_place][decay][config_.nesterov](
          n, lr, wd, momentum_, scale, sum.data(), velocity_.data() + offset,
          source, to.data());
    }
  }

  const OptimizerConfig& config() const override { return config_; }

  std::vector<std::pair<std::string, absl::Span<float>>> Slots() override {
    if (velocity_.empty()) return {};
    return {{"momentum", absl::MakeSpan(velocity_)}};
  }

 private:
  const OptimizerConfig config_;
  const int64_t num_parameters_;
  const float momentum_;
  const float weight_decay_;
  std::vector<float> velocity_;
};

// Keras Adam and AdamW (2.11+); AdamW is Adam with a non-zero weight decay,
// so both names share this class.
// Thread-safety: updates of disjoint ranges may run concurrently.
class Adam final : public Optimizer {
 public:
  Adam(const OptimizerConfig& config, int64_t num_parameters)
      : config_(config),
        num_parameters_(num_parameters),
        factors_{static_cast<float>(config.beta_1),
                 static_cast<float>(config.beta_2),
                 static_cast<float>(1.0 - config.beta_1),
                 static_cast<float>(1.0 - config.beta_2),
                 /*alpha=*/0.0f,
                 static_cast<float>(config.epsilon),
                 static_cast<float>(config.weight_decay),
                 /*lr=*/0.0f},
        m_(num_parameters, 0.0f),
        v_(num_parameters, 0.0f) {}

  void ApplyMean(int64_t step, int64_t offset, absl::Span<const float> from,
                 absl::Span<float> to, absl::Span<const float> sum,
                 float scale) override {
    CheckRangeOrDie(offset, to.size(), num_parameters_);
    // In fp32, b^t and 1 - b^t lose most digits over a long run (and
    // 1 - b2^t at t = 1 is only 1e-3); double keeps alpha exact to fp32.
    const double t = static_cast<double>(step) + 1;
    const double lr = LearningRateAt(config_, step);
    const double alpha = lr * std::sqrt(1 - std::pow(config_.beta_2, t)) /
                         (1 - std::pow(config_.beta_1, t));
    kernels::AdamFactors factors = factors_;
    factors.alpha = static_cast<float>(alpha);
    factors.lr = static_cast<float>(lr);
    const size_t n = to.size();
    const float* source = Source(from, to);
    float* m = m_.data() + offset;
    float* v = v_.data() + offset;
    kernels::Active().adam[source == nullptr][factors.weight_decay != 0](
        n, factors, scale, sum.data(), m, v, source, to.data());
  }

  const OptimizerConfig& config() const override { return config_; }

  std::vector<std::pair<std::string, absl::Span<float>>> Slots() override {
    return {{"m", absl::MakeSpan(m_)}, {"v", absl::MakeSpan(v_)}};
  }

 private:
  const OptimizerConfig config_;
  const int64_t num_parameters_;
  // All but alpha and the learning rate, which depend on the step.
  const kernels::AdamFactors factors_;
  std::vector<float> m_;
  std::vector<float> v_;
};

// The summation mode (OptimizerConfig::kAverage): the new "weights" are the
// mean gradient itself, which every worker then hands to its own optimizer.
// No state, no learning rate.
// Thread-safety: updates of disjoint ranges may run concurrently.
class Average final : public Optimizer {
 public:
  Average(const OptimizerConfig& config, int64_t num_parameters)
      : config_(config), num_parameters_(num_parameters) {}

  void ApplyMean(int64_t step, int64_t offset, absl::Span<const float> from,
                 absl::Span<float> to, absl::Span<const float> sum,
                 float scale) override {
    (void)step;
    (void)from;
    CheckRangeOrDie(offset, to.size(), num_parameters_);
    kernels::Active().scale(to.size(), scale, sum.data(), to.data());
  }

  const OptimizerConfig& config() const override { return config_; }

  std::vector<std::pair<std::string, absl::Span<float>>> Slots() override {
    return {};
  }

 private:
  const OptimizerConfig config_;
  const int64_t num_parameters_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const OptimizerConfig& config, int64_t num_parameters) {
  RETURN_IF_ERROR(Validate(config, num_parameters));
  if (config.name == "sgd" || config.name == "momentum") {
    return std::make_unique<Sgd>(config, num_parameters);
  }
  if (config.name == OptimizerConfig::kAverage) {
    return std::make_unique<Average>(config, num_parameters);
  }
  return std::make_unique<Adam>(config, num_parameters);
}

}  // namespace lockstep
