#include "server/core/metric_rounds.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// Answers each callback with `result` (no lock held).
void AnswerAll(std::vector<MetricRounds::Callback> waiting,
               const absl::StatusOr<std::vector<double>>& result) {
  for (MetricRounds::Callback& done : waiting) done(result);
}

}  // namespace

void MetricRounds::Contribute(int rank, int64_t round, const std::string& name,
                              std::vector<double> values, Callback done) {
  if (round < 0 || values.size() > static_cast<size_t>(kMaxValues)) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("an average takes round >= 0 and at most ", kMaxValues,
                     " values, got round ", round, " and ", values.size())));
  }
  for (double v : values) {
    if (!std::isfinite(v)) {
      return done(absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " sent a non-finite value to average '", name, "'")));
    }
  }
  std::vector<Callback> answer;
  absl::StatusOr<std::vector<double>> result;
  bool queued = false;  // `done` waits in its round (and is answered there).
  {
    absl::MutexLock lock(&mu_);
    if (!shut_down_.ok()) {
      result = shut_down_;
    } else if (auto it = answered_.find(round); it != answered_.end()) {
      result = it->second;  // A retry of a round already answered.
    } else if (!answered_.empty() && round < answered_.begin()->first &&
               open_.count(round) == 0) {
      result = absl::FailedPreconditionError(
          absl::StrCat("average round ", round, " is older than the ",
                       kKeptAnswers, " rounds the server keeps"));
    } else {
      Round& r = open_[round];
      if (r.contributed.empty()) {
        r.name = name;
        r.sum.assign(values.size(), 0.0);
        r.contributed.assign(num_workers_, false);
      }
      if (r.name != name || r.sum.size() != values.size()) {
        result = absl::FailedPreconditionError(absl::StrCat(
            "the workers average different things in round ", round, ": rank ",
            rank, " sent '", name, "' (", values.size(),
            " values), an earlier rank '", r.name, "' (", r.sum.size(),
            "); every worker must call average the same number of times, "
            "with the same name and length"));
        answer = std::move(r.waiting);
        answered_[round] = result;
        open_.erase(round);
      } else {
        if (!r.contributed[rank]) {
          r.contributed[rank] = true;
          ++r.count;
          for (size_t i = 0; i < values.size(); ++i) r.sum[i] += values[i];
        }
        r.waiting.push_back(std::move(done));
        queued = true;
        if (r.count < num_workers_) return;
        std::vector<double> mean = std::move(r.sum);
        for (double& v : mean) v /= num_workers_;
        result = std::move(mean);
        answer = std::move(r.waiting);
        answered_[round] = result;
        open_.erase(round);
      }
      while (answered_.size() > static_cast<size_t>(kKeptAnswers)) {
        answered_.erase(answered_.begin());
      }
    }
  }
  if (!queued) answer.push_back(std::move(done));
  AnswerAll(std::move(answer), result);
}

void MetricRounds::Leave(int rank) {
  std::vector<std::pair<std::vector<Callback>, absl::Status>> failed;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = open_.begin(); it != open_.end();) {
      if (it->second.contributed[rank]) {
        ++it;
        continue;
      }
      absl::Status why = absl::FailedPreconditionError(
          absl::StrCat("rank ", rank, " left the job while average round ",
                       it->first, " ('", it->second.name, "') waited for it"));
      answered_[it->first] = why;
      failed.emplace_back(std::move(it->second.waiting), why);
      it = open_.erase(it);
    }
  }
  for (auto& [waiting, why] : failed) AnswerAll(std::move(waiting), why);
}

void MetricRounds::Shutdown(const absl::Status& why) {
  std::vector<Callback> waiting;
  absl::Status answer;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = why.ok() ? absl::UnavailableError("shutting down") : why;
    answer = shut_down_;
    for (auto& [round, r] : open_) {
      for (Callback& done : r.waiting) waiting.push_back(std::move(done));
    }
    open_.clear();
  }
  AnswerAll(std::move(waiting), answer);
}

}  // namespace lockstep
