#include "tests/bench/comm_worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"
#include "common/formats/json_writer.h"
#include "common/model/model_signature.h"
#include "worker/exchange/allreduce/all_reducer.h"

namespace lockstep {
namespace {

StepTimings Minus(const StepTimings& a, const StepTimings& b) {
  StepTimings d;
  d.steps = a.steps - b.steps;
  d.encode_seconds = a.encode_seconds - b.encode_seconds;
  d.send_seconds = a.send_seconds - b.send_seconds;
  d.wait_seconds = a.wait_seconds - b.wait_seconds;
  d.decode_seconds = a.decode_seconds - b.decode_seconds;
  return d;
}

ModelSignature BenchSignature(const CommWorkerOptions& options) {
  ModelSignature signature;
  signature.tensors.push_back({"bench/params", {options.params}});
  signature.optimizer = OptimizerConfig::Defaults("sgd");
  signature.optimizer.learning_rate = 0.01;
  signature.chunk_bytes = options.chunk_bytes;
  signature.num_workers = options.workers;
  signature.num_shards = static_cast<int>(options.servers.size());
  return signature;
}

}  // namespace

std::string ReadyFile(const std::string& out_dir, int rank) {
  return absl::StrCat(out_dir, "/ready.", rank);
}

std::string ResultFile(const std::string& out_dir, int rank) {
  return absl::StrCat(out_dir, "/result.", rank);
}

// A handler, not a blocked signal: threads that libraries start before
// main (OpenBLAS's) leave the signal open, and a blocked one that reached
// them would end the process. The handler runs in whichever thread the
// signal reaches and writes a byte that WaitForGo reads.
namespace {
int go_pipe[2] = {-1, -1};

void OnGoSignal(int) {
  const int saved = errno;
  const char byte = 1;
  (void)!write(go_pipe[1], &byte, 1);  // Nonblocking; a full pipe is fine.
  errno = saved;
}
}  // namespace

void PrepareGoSignal() {
  if (go_pipe[0] >= 0) return;
  if (pipe2(go_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::perror("lockstep_bench: pipe2");
    std::abort();
  }
  struct sigaction action = {};
  action.sa_handler = OnGoSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(kGoSignal, &action, nullptr);
}

absl::Status WaitForGo(absl::Duration timeout) {
  if (go_pipe[0] < 0) {
    return absl::FailedPreconditionError("PrepareGoSignal was not called");
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    char byte = 0;
    if (read(go_pipe[0], &byte, 1) == 1) return absl::OkStatus();
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("no go signal from lockstep_bench within ",
                       absl::FormatDuration(timeout)));
    }
    pollfd wait = {go_pipe[0], POLLIN, 0};
    poll(&wait, 1,
         static_cast<int>(std::min<int64_t>(
             absl::ToInt64Milliseconds(left) + 1, 1000)));
  }
}

std::string FormatWorkerResult(const CommWorkerResult& result) {
  std::string out = "step_seconds";
  for (double s : result.step_seconds) absl::StrAppendFormat(&out, " %.9g", s);
  const StepTimings& t = result.timings;
  absl::StrAppendFormat(&out,
                        "\nsteps %d\nencode_seconds %.9g\nsend_seconds %.9g\n"
                        "wait_seconds %.9g\ndecode_seconds %.9g\n",
                        t.steps, t.encode_seconds, t.send_seconds,
                        t.wait_seconds, t.decode_seconds);
  return out;
}

absl::StatusOr<CommWorkerResult> ParseWorkerResult(const std::string& text) {
  CommWorkerResult result;
  int fields = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    std::vector<double> numbers;
    for (size_t i = 1; i < words.size(); ++i) {
      double v = 0;
      if (!absl::SimpleAtod(words[i], &v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad number in result line \"", line, "\""));
      }
      numbers.push_back(v);
    }
    const absl::string_view key = words[0];
    if (key == "step_seconds") {
      result.step_seconds = std::move(numbers);
      ++fields;
      continue;
    }
    if (numbers.size() != 1) continue;
    StepTimings& t = result.timings;
    if (key == "steps") t.steps = static_cast<int64_t>(numbers[0]);
    if (key == "encode_seconds") t.encode_seconds = numbers[0];
    if (key == "send_seconds") t.send_seconds = numbers[0];
    if (key == "wait_seconds") t.wait_seconds = numbers[0];
    if (key == "decode_seconds") t.decode_seconds = numbers[0];
    ++fields;
  }
  if (fields != 6) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker result has ", fields, " of 6 fields"));
  }
  return result;
}


namespace {

// The all-reduce counterpart of RunCommWorker's loop: the same kind of fixed
// gradient, summed in place by the backend each step. It is copied into the
// buffer before each timed call, so that sums never grow to infinities and
// every step moves the same values.
absl::Status RunAllReduceWorker(const CommWorkerOptions& options) {
  AllReduceOptions reduce;
  reduce.backend = options.allreduce;
  reduce.rank = options.rank;
  reduce.size = options.workers;
  reduce.coordinator = options.servers.front();
  reduce.host = options.host;
  reduce.group = "bench";
  reduce.tls = options.tls;
  ASSIGN_OR_RETURN(std::unique_ptr<AllReducer> reducer,
                   CreateAllReducer(reduce));
  const size_t n = static_cast<size_t>(options.params);
  std::vector<float> gradient(n), buffer(n);
  Random random(Random::Derive(4, static_cast<uint64_t>(options.rank)));
  for (float& g : gradient) g = random.Uniform(-1.0f, 1.0f);

  CommWorkerResult result;
  const int steps = options.warmup + options.iters;
  for (int step = 0; step < steps; ++step) {
    if (step == options.warmup) {
      RETURN_IF_ERROR(
          WriteFileAtomically(ReadyFile(options.out_dir, options.rank), "1\n"));
      RETURN_IF_ERROR(WaitForGo(options.go_timeout));
    }
    std::copy(gradient.begin(), gradient.end(), buffer.begin());
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(reducer->AllReduceSum(absl::MakeSpan(buffer)));
    if (step >= options.warmup) {
      result.step_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
  }
  // No client phases: the backends do not split their time.
  result.timings.steps = options.iters;
  return WriteFileAtomically(ResultFile(options.out_dir, options.rank),
                             FormatWorkerResult(result));
}

}  // namespace

absl::Status RunCommWorker(const CommWorkerOptions& options) {
  if (!options.allreduce.empty()) return RunAllReduceWorker(options);
  PsClientOptions client_options;
  client_options.servers = options.servers;
  client_options.tls = options.tls;
  client_options.wire_dtype = options.wire_dtype;
  client_options.max_pushes_in_flight = options.push_window;
  ASSIGN_OR_RETURN(std::unique_ptr<PsClient> client,
                   PsClient::Create(client_options));
  ASSIGN_OR_RETURN(RegisterResult reg,
                   client->Register(options.rank, BenchSignature(options)));

  const size_t n = static_cast<size_t>(options.params);
  std::vector<float> weights(n);
  std::vector<float> gradient(n);
  Random random(Random::Derive(4, static_cast<uint64_t>(options.rank)));
  if (reg.must_initialize) {
    for (float& w : weights) w = random.Uniform(-0.05f, 0.05f);
    RETURN_IF_ERROR(client->Initialize(weights));
  }
  ASSIGN_OR_RETURN(int64_t version, client->Pull(0, absl::MakeSpan(weights)));
  if (version != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the servers are at version ", version,
                     "; the bench needs fresh ones"));
  }
  // Random and never zero, so no encoding can take a shortcut.
  for (float& g : gradient) {
    const float magnitude = random.Uniform(0.5f, 1.0f);
    g = random.UniformFloat() < 0.5f ? -magnitude : magnitude;
  }

  CommWorkerResult result;
  StepTimings before;
  const int steps = options.warmup + options.iters;
  for (int step = 0; step < steps; ++step) {
    if (step == options.warmup) {
      RETURN_IF_ERROR(
          WriteFileAtomically(ReadyFile(options.out_dir, options.rank), "1\n"));
      RETURN_IF_ERROR(WaitForGo(options.go_timeout));
      before = client->step_timings();
    }
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(
        client->PushPull(step, gradient, absl::MakeSpan(weights)).status());
    if (step >= options.warmup) {
      result.step_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
  }
  result.timings = Minus(client->step_timings(), before);
  RETURN_IF_ERROR(WriteFileAtomically(ResultFile(options.out_dir, options.rank),
                                      FormatWorkerResult(result)));
  return client->Leave();
}

}  // namespace lockstep
