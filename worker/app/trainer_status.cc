#include "worker/app/trainer_status.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/formats/json_writer.h"
#include "common/security/https_post.h"

namespace lockstep {
namespace {

std::string Getenv(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string Figure(double value) { return absl::StrFormat("%.4f", value); }

}  // namespace

std::optional<TrainerStatusEndpoint> TrainerStatusEndpointFromEnvironment() {
  TrainerStatusEndpoint endpoint;
  endpoint.url = Getenv("KUBEFLOW_TRAINER_STATUS_SERVER_URL");
  if (endpoint.url.empty()) return std::nullopt;
  endpoint.ca_file = Getenv("KUBEFLOW_TRAINER_STATUS_SERVER_CA_CERT");
  endpoint.token_file = Getenv("KUBEFLOW_TRAINER_STATUS_SERVER_TOKEN");
  return endpoint;
}

std::string TrainerStatusJson(const TrainerStatus& status) {
  std::string metrics = "[";
  for (size_t i = 0; i < status.metrics.size(); ++i) {
    absl::StrAppend(&metrics, i == 0 ? "" : ", ",
                    "{\"name\": ", JsonQuote(status.metrics[i].first),
                    ", \"value\": ", JsonQuote(status.metrics[i].second), "}");
  }
  metrics += "]";
  std::string out =
      absl::StrCat("{\"trainerStatus\": {\"progressPercentage\": ",
                   status.progress_percentage);
  if (status.remaining_seconds.has_value()) {
    absl::StrAppend(
        &out, ", \"estimatedRemainingSeconds\": ", *status.remaining_seconds);
  }
  absl::StrAppend(
      &out, ", \"metrics\": ", metrics, ", \"lastUpdatedTime\": ",
      JsonQuote(absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", status.updated,
                                 absl::UTCTimeZone())),
      "}}");
  return out;
}

TrainerStatusReporter::TrainerStatusReporter(TrainerStatusEndpoint endpoint,
                                             absl::Duration every)
    : endpoint_(std::move(endpoint)),
      every_(every),
      thread_([this] { Loop(); }) {}

TrainerStatusReporter::~TrainerStatusReporter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void TrainerStatusReporter::OnStepEnd(const StepLogs& logs) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  if (first_step_ < 0) {
    first_step_ = logs.step;  // The rate counts from here.
    first_time_ = now;
  }
  if (now - last_queued_ < every_ && logs.step < logs.total_steps) return;
  TrainerStatus status;
  status.updated = now;
  if (logs.total_steps > 0) {
    status.progress_percentage =
        static_cast<int>(100 * logs.step / logs.total_steps);
    const int64_t done = logs.step - first_step_;
    if (done > 0) {
      status.remaining_seconds =
          static_cast<int64_t>(absl::ToDoubleSeconds(now - first_time_) / done *
                               (logs.total_steps - logs.step));
    }
  }
  status.metrics = {
      {"loss", Figure(logs.loss)},
      {"accuracy", Figure(logs.accuracy)},
      {"currentStep", absl::StrCat(logs.step)},
      {"totalSteps", absl::StrCat(logs.total_steps)},
      {"currentEpoch", absl::StrCat(logs.epoch)},
      {"totalEpochs", absl::StrCat(logs.epochs)},
      {"examplesPerSecond", absl::StrFormat("%.0f", logs.examples_per_sec)}};
  last_ = status;
  for (const auto& m : epoch_metrics_) status.metrics.push_back(m);
  pending_ = std::move(status);
  last_queued_ = now;
}

void TrainerStatusReporter::OnEpochEnd(const EpochLogs& logs) {
  absl::MutexLock lock(&mu_);
  epoch_metrics_.clear();
  if (logs.has_validation) {
    epoch_metrics_ = {{"val_loss", Figure(logs.val_loss)},
                      {"val_accuracy", Figure(logs.val_accuracy)}};
  }
  last_queued_ = absl::InfinitePast();  // The next step reports.
}

void TrainerStatusReporter::Finish(int64_t steps, double test_loss,
                                   double test_accuracy) {
  TrainerStatus status;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    status = last_.value_or(TrainerStatus());
    for (const auto& m : epoch_metrics_) status.metrics.push_back(m);
    pending_.reset();
  }
  if (thread_.joinable()) thread_.join();
  status.progress_percentage = 100;
  status.remaining_seconds = 0;
  status.updated = absl::Now();
  for (auto& m : status.metrics) {
    if (m.first == "currentStep") m.second = absl::StrCat(steps);
  }
  if (test_accuracy >= 0) {
    status.metrics.push_back({"test_loss", Figure(test_loss)});
    status.metrics.push_back({"test_accuracy", Figure(test_accuracy)});
  }
  Post(status);
}

void TrainerStatusReporter::Loop() {
  while (true) {
    std::optional<TrainerStatus> status;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || pending_.has_value();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      status = std::move(pending_);
      pending_.reset();
    }
    Post(*status);
  }
}

void TrainerStatusReporter::Post(const TrainerStatus& status) {
  absl::MutexLock lock(&post_mu_);
  HttpsPostRequest request;
  request.url = endpoint_.url;
  request.ca_file = endpoint_.ca_file;
  request.body = TrainerStatusJson(status);
  request.timeout = absl::Seconds(5);
  std::string error;
  if (!endpoint_.token_file.empty()) {
    std::ifstream in(endpoint_.token_file);
    std::stringstream token;
    token << in.rdbuf();
    request.bearer_token = std::string(absl::StripAsciiWhitespace(token.str()));
    if (!in) error = absl::StrCat("cannot read ", endpoint_.token_file);
  }
  if (error.empty()) {
    const absl::StatusOr<int> code = HttpsPost(request);
    if (!code.ok()) {
      error = code.status().ToString();
    } else if (*code < 200 || *code > 299) {
      error = absl::StrCat("the endpoint answered HTTP ", *code);
    }
  }
  if (error.empty() || error == said_) return;
  said_ = error;
  std::fprintf(stderr,
               "lockstep_worker: cannot report progress to %s (the TrainJob's "
               "status; training goes on): %s\n",
               endpoint_.url.c_str(), error.c_str());
}

}  // namespace lockstep
