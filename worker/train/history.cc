#include "worker/train/history.h"

#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

// `name`: [figure of each epoch].
std::string List(const char* name, const std::vector<EpochLogs>& epochs,
                 const std::function<double(const EpochLogs&)>& figure) {
  std::vector<std::string> values;
  for (const EpochLogs& e : epochs) {
    const double v = figure(e);
    // JSON has no NaN or Inf; null says "not measured".
    values.push_back(std::isfinite(v) ? absl::StrFormat("%.17g", v) : "null");
  }
  return absl::StrCat("\"", name, "\": [", absl::StrJoin(values, ", "), "]");
}

}  // namespace

std::string History::ToJson() const {
  std::vector<std::string> lists = {
      List("epoch", epochs_, [](const EpochLogs& e) { return e.epoch; }),
      List("loss", epochs_, [](const EpochLogs& e) { return e.loss; }),
      List("accuracy", epochs_, [](const EpochLogs& e) { return e.accuracy; }),
      List("examples_per_sec", epochs_,
           [](const EpochLogs& e) { return e.examples_per_sec; })};
  const bool validated = !epochs_.empty() && epochs_.front().has_validation;
  if (validated) {
    lists.push_back(List("val_loss", epochs_,
                         [](const EpochLogs& e) { return e.val_loss; }));
    lists.push_back(List("val_accuracy", epochs_,
                         [](const EpochLogs& e) { return e.val_accuracy; }));
  }
  return absl::StrCat("{", absl::StrJoin(lists, ", "), "}");
}

}  // namespace lockstep
