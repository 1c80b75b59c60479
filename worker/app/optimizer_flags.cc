#include "worker/app/optimizer_flags.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"
#include "common/optim/lr_schedule.h"

ABSL_FLAG(std::string, optimizer, "adam", "sgd | momentum | adam | adamw.");
// Unset (std::nullopt): the optimizer's default. Every value given is
// checked: none stands for the default.
ABSL_FLAG(std::optional<double>, lr, std::nullopt,
          "Learning rate, finite and > 0 (default: Keras's for the "
          "optimizer: 0.01 for sgd/momentum, 0.001 for adam/adamw).");
ABSL_FLAG(std::optional<double>, momentum, std::nullopt,
          "Momentum in [0, 1) (default 0.9 for momentum, 0 for sgd).");
ABSL_FLAG(bool, nesterov, false, "Nesterov momentum (momentum optimizer).");
ABSL_FLAG(double, beta_1, 0.9, "Adam beta_1.");
ABSL_FLAG(double, beta_2, 0.999, "Adam beta_2.");
ABSL_FLAG(double, epsilon, 1e-7, "Adam epsilon (Keras's default).");
ABSL_FLAG(std::optional<double>, weight_decay, std::nullopt,
          "AdamW weight decay, finite and >= 0 (default 0.004).");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "How the learning rate follows the global step: constant, "
          "exponential (--lr_decay_steps, --lr_decay_rate, --lr_staircase), "
          "piecewise (--lr_boundaries, --lr_values) or cosine "
          "(--lr_decay_steps, --lr_alpha); Keras's schedules, applied where "
          "the optimizer runs. See docs/flags.md.");
ABSL_FLAG(int64_t, lr_decay_steps, 0,
          "exponential: steps per factor of --lr_decay_rate; cosine: steps "
          "from --lr down to --lr_alpha * --lr.");
ABSL_FLAG(double, lr_decay_rate, 0,
          "exponential: the rate is --lr * rate^(step / --lr_decay_steps).");
ABSL_FLAG(bool, lr_staircase, false,
          "exponential: decay in whole periods of --lr_decay_steps.");
ABSL_FLAG(std::string, lr_boundaries, "",
          "piecewise: increasing steps, comma-separated; --lr_values[i] "
          "holds up to and including boundary i.");
ABSL_FLAG(std::string, lr_values, "",
          "piecewise: the rates, comma-separated, one more than "
          "--lr_boundaries (--lr is not used).");
ABSL_FLAG(double, lr_alpha, 0,
          "cosine: the final rate as a fraction of --lr, in [0, 1].");
ABSL_FLAG(int64_t, lr_warmup_steps, 0,
          "Steps of linear warmup from --lr_warmup_from to the schedule's "
          "first rate; the schedule starts after them (0: none).");
ABSL_FLAG(double, lr_warmup_from, 0,
          "The rate of the first warmup step (with --lr_warmup_steps).");

namespace lockstep {
namespace {

// "100,200" as numbers; INVALID_ARGUMENT naming `flag` for a bad item.
template <typename T>
absl::StatusOr<std::vector<T>> ParseList(absl::string_view flag,
                                         absl::string_view text) {
  std::vector<T> items;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    T value;
    bool parsed;
    if constexpr (std::is_same_v<T, double>) {
      parsed = absl::SimpleAtod(item, &value);
    } else {
      parsed = absl::SimpleAtoi(item, &value);
    }
    if (!parsed) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", item,
                       "\" is not a number (expected a "
                       "comma-separated list)"));
    }
    items.push_back(value);
  }
  return items;
}

// `value` (when given) if `in_range`, else INVALID_ARGUMENT naming the
// flag, the range and the value.
absl::Status CheckRange(const char* flag, std::optional<double> value,
                        bool in_range, const char* range) {
  if (!value.has_value() || in_range) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " must be ", range, ", got ", *value));
}

}  // namespace

absl::StatusOr<LrSchedule> LrScheduleFromFlags(bool lr_given) {
  LrSchedule s;
  s.kind = absl::GetFlag(FLAGS_lr_schedule);
  s.decay_steps = absl::GetFlag(FLAGS_lr_decay_steps);
  s.decay_rate = absl::GetFlag(FLAGS_lr_decay_rate);
  s.staircase = absl::GetFlag(FLAGS_lr_staircase);
  ASSIGN_OR_RETURN(
      s.boundaries,
      ParseList<int64_t>("lr_boundaries", absl::GetFlag(FLAGS_lr_boundaries)));
  ASSIGN_OR_RETURN(
      s.values, ParseList<double>("lr_values", absl::GetFlag(FLAGS_lr_values)));
  s.alpha = absl::GetFlag(FLAGS_lr_alpha);
  s.warmup_steps = absl::GetFlag(FLAGS_lr_warmup_steps);
  s.warmup_from = absl::GetFlag(FLAGS_lr_warmup_from);
  RETURN_IF_ERROR(ValidateLrSchedule(s, "--lr_"));
  if (s.kind == "piecewise" && lr_given) {
    return absl::InvalidArgumentError(
        "--lr is not used with --lr_schedule=piecewise: --lr_values gives "
        "the rates");
  }
  return s;
}

absl::StatusOr<OptimizerConfig> OptimizerFromFlags() {
  const std::string name = absl::GetFlag(FLAGS_optimizer);
  if (!OptimizerConfig::IsName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("--optimizer must be ",
                                                   OptimizerConfig::NamesText(),
                                                   ", got \"", name, "\""));
  }
  OptimizerConfig config = OptimizerConfig::Defaults(name);
  // The optimizer's own ranges (Optimizer::Create), found here with the
  // flag's name rather than when a server or rank makes the optimizer.
  const std::optional<double> lr = absl::GetFlag(FLAGS_lr);
  const std::optional<double> momentum = absl::GetFlag(FLAGS_momentum);
  const std::optional<double> decay = absl::GetFlag(FLAGS_weight_decay);
  RETURN_IF_ERROR(
      CheckRange("lr", lr, lr > 0.0 && std::isfinite(*lr), "finite and > 0"));
  RETURN_IF_ERROR(CheckRange("momentum", momentum,
                             momentum >= 0.0 && momentum < 1.0, "in [0, 1)"));
  RETURN_IF_ERROR(CheckRange("weight_decay", decay,
                             decay >= 0.0 && std::isfinite(*decay),
                             "finite and >= 0"));
  config.learning_rate = lr.value_or(config.learning_rate);
  config.momentum = momentum.value_or(config.momentum);
  config.nesterov = absl::GetFlag(FLAGS_nesterov);
  config.beta_1 = absl::GetFlag(FLAGS_beta_1);
  config.beta_2 = absl::GetFlag(FLAGS_beta_2);
  config.epsilon = absl::GetFlag(FLAGS_epsilon);
  config.weight_decay = decay.value_or(config.weight_decay);
  ASSIGN_OR_RETURN(config.schedule, LrScheduleFromFlags(lr.has_value()));
  return config;
}

}  // namespace lockstep
