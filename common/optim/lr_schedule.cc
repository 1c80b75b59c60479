#include "common/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/status_macros.h"
#include "common/model/model_signature.h"

namespace lockstep {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The scheduled rate `s` steps after the warmup.
double Decayed(const OptimizerConfig& config, int64_t s) {
  const LrSchedule& schedule = config.schedule;
  const double lr = config.learning_rate;
  if (schedule.kind == "exponential") {
    double p =
        static_cast<double>(s) / static_cast<double>(schedule.decay_steps);
    if (schedule.staircase) p = std::floor(p);
    return lr * std::pow(schedule.decay_rate, p);
  }
  if (schedule.kind == "piecewise") {
    const auto above = std::lower_bound(schedule.boundaries.begin(),
                                        schedule.boundaries.end(), s);
    return schedule.values[above - schedule.boundaries.begin()];
  }
  if (schedule.kind == "cosine") {
    const double t = static_cast<double>(std::min(s, schedule.decay_steps)) /
                     static_cast<double>(schedule.decay_steps);
    const double cosine = 0.5 * (1 + std::cos(kPi * t));
    return lr * ((1 - schedule.alpha) * cosine + schedule.alpha);
  }
  return lr;
}

// What a check reports: "<prefix><setting> <what> (<kind> schedule)".
class Checker {
 public:
  Checker(const LrSchedule& s, absl::string_view prefix)
      : s_(s), prefix_(prefix) {}

  absl::Status Invalid(absl::string_view setting,
                       absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix_, setting, " ", what, " (", s_.kind, " schedule)"));
  }

  // A setting the schedule's kind does not use must keep its default.
  absl::Status Unused() const {
    const bool exponential = s_.kind == "exponential";
    const bool piecewise = s_.kind == "piecewise";
    const bool cosine = s_.kind == "cosine";
    constexpr char kKind[] = "is not used by this kind";
    struct Setting {
      const char* name;
      bool used;
      bool set;
      const char* why;  // The message when it is set but not used.
    };
    const Setting settings[] = {
        {"decay_steps", exponential || cosine, s_.decay_steps != 0, kKind},
        {"decay_rate", exponential, s_.decay_rate != 0, kKind},
        {"staircase", exponential, s_.staircase, kKind},
        {"boundaries", piecewise, !s_.boundaries.empty(), kKind},
        {"values", piecewise, !s_.values.empty(), kKind},
        {"alpha", cosine, s_.alpha != 0, kKind},
        {"warmup_from", s_.warmup_steps != 0, s_.warmup_from != 0,
         "is not used without warmup steps"},
    };
    for (const Setting& setting : settings) {
      if (setting.set && !setting.used) {
        return Invalid(setting.name, setting.why);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Piecewise() const {
    if (s_.boundaries.empty() ||
        s_.boundaries.size() > static_cast<size_t>(kMaxLrBoundaries)) {
      return Invalid("boundaries",
                     absl::StrCat("must list 1 to ", kMaxLrBoundaries,
                                  " steps, got ", s_.boundaries.size()));
    }
    if (s_.values.size() != s_.boundaries.size() + 1) {
      return Invalid("values",
                     absl::StrCat("must list one rate more than the ",
                                  s_.boundaries.size(), " boundaries, got ",
                                  s_.values.size()));
    }
    for (size_t i = 0; i < s_.boundaries.size(); ++i) {
      if (s_.boundaries[i] < 0 ||
          (i > 0 && s_.boundaries[i] <= s_.boundaries[i - 1])) {
        return Invalid("boundaries", "must be non-negative and increasing");
      }
    }
    for (double v : s_.values) {
      if (!(v > 0 && std::isfinite(v))) {
        return Invalid("values",
                       absl::StrCat("must be positive and finite, got ", v));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Decay() const {
    if (s_.decay_steps < 1) {
      return Invalid("decay_steps",
                     absl::StrCat("must be at least 1, got ", s_.decay_steps));
    }
    if (s_.kind == "exponential" &&
        !(s_.decay_rate > 0 && std::isfinite(s_.decay_rate))) {
      return Invalid("decay_rate", absl::StrCat("must be positive and finite, "
                                                "got ",
                                                s_.decay_rate));
    }
    if (s_.kind == "cosine" && !(s_.alpha >= 0 && s_.alpha <= 1)) {
      return Invalid("alpha",
                     absl::StrCat("must be in [0, 1], got ", s_.alpha));
    }
    return absl::OkStatus();
  }

  absl::Status Warmup() const {
    if (s_.warmup_steps < 0) {
      return Invalid("warmup_steps", absl::StrCat("must not be negative, got ",
                                                  s_.warmup_steps));
    }
    if (!(s_.warmup_from >= 0 && std::isfinite(s_.warmup_from))) {
      return Invalid("warmup_from",
                     absl::StrCat("must be non-negative and finite, got ",
                                  s_.warmup_from));
    }
    return absl::OkStatus();
  }

 private:
  const LrSchedule& s_;
  const absl::string_view prefix_;
};

}  // namespace

double LearningRateAt(const OptimizerConfig& config, int64_t step) {
  const LrSchedule& schedule = config.schedule;
  step = std::max<int64_t>(step, 0);
  if (step >= schedule.warmup_steps) {
    return Decayed(config, step - schedule.warmup_steps);
  }
  const double target = Decayed(config, 0);
  return schedule.warmup_from + (target - schedule.warmup_from) *
                                    static_cast<double>(step) /
                                    static_cast<double>(schedule.warmup_steps);
}

absl::Status ValidateLrSchedule(const LrSchedule& s,
                                absl::string_view name_prefix) {
  if (s.kind != "constant" && s.kind != "exponential" &&
      s.kind != "piecewise" && s.kind != "cosine") {
    return absl::InvalidArgumentError(
        absl::StrCat(name_prefix,
                     "schedule must be constant, exponential, piecewise or "
                     "cosine, got \"",
                     s.kind, "\""));
  }
  const Checker check(s, name_prefix);
  RETURN_IF_ERROR(check.Unused());
  RETURN_IF_ERROR(check.Warmup());
  if (s.kind == "piecewise") return check.Piecewise();
  if (s.kind == "exponential" || s.kind == "cosine") return check.Decay();
  return absl::OkStatus();
}

}  // namespace lockstep
