#include "tests/bench/e2e_bench.h"

#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/formats/json_writer.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/child_runner.h"

namespace lockstep {

std::vector<std::string> DefaultE2eArgs() {
  return {"--data_dir=/usr/share/datasets/fashion-mnist", "--batch_size=64",
          "--epochs=2", "--progress=none"};
}

absl::StatusOr<E2eRun> RunE2eOnce(const E2eOptions& options,
                                  const std::string& log_dir, int index) {
  const std::string summary = absl::StrCat(log_dir, "/e2e.", index, ".json");
  std::vector<std::string> argv = {
      absl::StrCat(options.bin_dir, "/lockstep_launch"),
      absl::StrCat("--workers=", options.workers),
      absl::StrCat("--ps=", options.ps),
      absl::StrCat("--summary_json=", summary)};
  for (const std::string& arg : DefaultE2eArgs()) argv.push_back(arg);
  for (const std::string& arg : options.extra_args) argv.push_back(arg);
  ASSIGN_OR_RETURN(
      std::unique_ptr<ChildRunner> runner,
      ChildRunner::Create(absl::StrCat(log_dir, "/e2e.", index, ".log"),
                          options.interrupt_fd));
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(pid_t pid, runner->Start("lockstep_launch", argv));
  RETURN_IF_ERROR(runner->WaitForExit(
      absl::StrCat("end-to-end run ", index + 1), pid, options.timeout));
  E2eRun run;
  run.launch_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  ASSIGN_OR_RETURN(std::string json, ReadWholeFile(summary));
  ASSIGN_OR_RETURN(run.examples_per_sec,
                   FindJsonNumber(json, {"examples_per_sec"}));
  ASSIGN_OR_RETURN(run.test_accuracy, FindJsonNumber(json, {"test_accuracy"}));
  ASSIGN_OR_RETURN(run.wall_seconds, FindJsonNumber(json, {"wall_seconds"}));
  return run;
}

absl::StatusOr<E2eResult> RunE2eBench(const E2eOptions& options) {
  ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("lockstep_bench"));
  E2eResult result;
  result.options = options;
  result.load_average_before = LoadAverage();
  std::vector<double> rates, accuracies;
  for (int i = 0; i < options.runs; ++i) {
    ASSIGN_OR_RETURN(E2eRun run, RunE2eOnce(options, dir, i));
    rates.push_back(run.examples_per_sec);
    accuracies.push_back(run.test_accuracy);
    result.runs.push_back(run);
  }
  result.median_examples_per_sec = Median(rates);
  result.median_test_accuracy = Median(accuracies);
  result.load_average_after = LoadAverage();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return result;
}

std::string E2eResultJson(const E2eResult& r) {
  JsonObjectWriter json;
  json.Add("mode", "e2e")
      .Add("workers", r.options.workers)
      .Add("ps", r.options.ps)
      .Add("runs", static_cast<int>(r.runs.size()))
      .Add("args", absl::StrJoin(DefaultE2eArgs(), " ") +
                       (r.options.extra_args.empty() ? "" : " ") +
                       absl::StrJoin(r.options.extra_args, " "))
      .Add("median_examples_per_sec", r.median_examples_per_sec)
      .Add("median_test_accuracy", r.median_test_accuracy)
      .Add("load_average_before", r.load_average_before)
      .Add("load_average_after", r.load_average_after);
  for (size_t i = 0; i < r.runs.size(); ++i) {
    json.Add(absl::StrCat("run", i, "_examples_per_sec"),
             r.runs[i].examples_per_sec)
        .Add(absl::StrCat("run", i, "_test_accuracy"), r.runs[i].test_accuracy)
        .Add(absl::StrCat("run", i, "_launch_seconds"),
             r.runs[i].launch_seconds);
  }
  return json.ToString();
}

void PrintE2eTable(const E2eResult& r, std::FILE* out) {
  std::string text = absl::StrFormat(
      "e2e: lockstep_launch --workers=%d --ps=%d %s %s\n", r.options.workers,
      r.options.ps, absl::StrJoin(DefaultE2eArgs(), " "),
      absl::StrJoin(r.options.extra_args, " "));
  absl::StrAppend(&text, "  run  examples/s  test accuracy  launch seconds\n");
  for (size_t i = 0; i < r.runs.size(); ++i) {
    absl::StrAppendFormat(&text, "  %3d  %10.0f  %13.4f  %14.1f\n", i + 1,
                          r.runs[i].examples_per_sec, r.runs[i].test_accuracy,
                          r.runs[i].launch_seconds);
  }
  absl::StrAppendFormat(&text,
                        "  median examples/s %.0f, test accuracy %.4f (load "
                        "average %.2f before, %.2f after)\n",
                        r.median_examples_per_sec, r.median_test_accuracy,
                        r.load_average_before, r.load_average_after);
  std::fputs(text.c_str(), out);
  std::fflush(out);
}

}  // namespace lockstep
