#include "tests/bench/study.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/status_macros.h"
#include "common/formats/json_writer.h"
#include "tests/bench/bench_hosts.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/child_runner.h"
#include "tests/bench/comm_bench.h"
#include "tests/bench/study_matrix.h"
#include "tests/bench/study_mlp.h"
#include "tests/bench/study_report.h"

namespace lockstep {
namespace {

// Runs a helper program (cluster.sh, python) to its end; returns its output.
absl::StatusOr<std::string> RunTool(const std::string& what,
                                    const std::vector<std::string>& argv,
                                    const std::string& log, int interrupt_fd,
                                    absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::unique_ptr<ChildRunner> runner,
                   ChildRunner::Create(log, interrupt_fd));
  ASSIGN_OR_RETURN(pid_t pid, runner->Start("tool", argv));
  RETURN_IF_ERROR(runner->WaitForExit(what, pid, timeout));
  return runner->OutputOf("tool");
}

// The simulated cluster for as long as this object lives: `up` in Create,
// `down` (idempotent) in the destructor, so no exit path leaves it behind.
class SimCluster final {
 public:
  static absl::StatusOr<std::unique_ptr<SimCluster>> Create(
      const StudyOptions& o, const std::string& scratch) {
    std::unique_ptr<SimCluster> cluster(new SimCluster(o, scratch));
    ASSIGN_OR_RETURN(
        std::string status,
        RunTool("starting the simulated cluster",
                {o.cluster_script, "up", absl::StrCat("--name=", o.sim_name),
                 absl::StrCat("--hosts=", kStudyMaxHosts),
                 absl::StrFormat("--rate=%gmbit", o.sim_rate_mbit),
                 absl::StrFormat("--delay=%gms", o.sim_delay_ms),
                 absl::StrCat("--cc=", o.sim_cc)},
                absl::StrCat(scratch, "/cluster-up.log"), o.interrupt_fd,
                absl::Seconds(120)));
    cluster->up_ = true;  // Now `down` has something to undo.
    cluster->delay_applied_ = SimStatusValue(status, "delay_applied") == "1";
    cluster->cc_ = SimStatusValue(status, "cc");
    ASSIGN_OR_RETURN(cluster->hosts_,
                     SimHosts(o.cluster_script, o.sim_name, status));
    return cluster;
  }
  ~SimCluster() {
    if (!up_) return;
    absl::StatusOr<std::string> down = RunTool(
        "removing the simulated cluster",
        {options_.cluster_script, "down",
         absl::StrCat("--name=", options_.sim_name)},
        absl::StrCat(scratch_, "/cluster-down.log"), -1, absl::Seconds(120));
    if (!down.ok()) {
      std::fprintf(stderr, "lockstep_bench study: %s\n",
                   down.status().ToString().c_str());
    }
  }
  const std::vector<BenchHost>& hosts() const { return hosts_; }
  bool delay_applied() const { return delay_applied_; }
  const std::string& cc() const { return cc_; }

 private:
  SimCluster(const StudyOptions& o, std::string scratch)
      : options_(o), scratch_(std::move(scratch)) {}
  const StudyOptions& options_;
  const std::string scratch_;
  std::vector<BenchHost> hosts_;
  bool delay_applied_ = false;
  std::string cc_;
  bool up_ = false;
};

absl::Status RunComm(const StudyOptions& o, const RunSpec& spec,
                     const std::vector<BenchHost>& hosts, StudyRow* row) {
  CommOptions c;
  c.params = spec.params;
  c.workers = spec.row.workers;
  c.ps = spec.row.shards;
  c.allreduce = spec.row.mode == "ps" ? "" : spec.row.mode;
  c.hosts = hosts;
  c.warmup = spec.warmup;
  c.iters = spec.iters;
  c.chunk_bytes = o.chunk_bytes;
  c.colocate = spec.colocate;
  c.bin_dir = o.bin_dir;
  c.self_exe = o.self_exe;
  c.interrupt_fd = o.interrupt_fd;
  c.timeout = o.run_timeout;
  ASSIGN_OR_RETURN(CommResult r, RunCommBench(c));
  row->steps = spec.iters;
  row->median_step_s = r.median_step_seconds;
  row->p90_step_s = r.p90_step_seconds;
  row->mean_step_s = r.mean_step_seconds;
  row->cpu_busy = r.cpu_busy;
  if (row->mode == "ps") {
    row->chunk_bytes = ResolveChunkBytes(c.chunk_bytes, c.params, c.ps);
  }
  if (row->link == "sim") {
    const double m = static_cast<double>(row->model_bytes);
    const double b = o.sim_rate_mbit * 1e6 / 8;  // The link's bytes a second.
    row->link_gbit = o.sim_rate_mbit / 1000;
    if (row->mode != "ps") {
      row->bandwidth_model_s = RingAllReduceModelSeconds(row->workers, m, b);
      row->model_step_s = RingModelWithHeadersSeconds(row->workers, m, b);
    } else if (spec.colocate) {
      row->bandwidth_model_s = BytePsModelSeconds(row->workers, 0, m, b);
      row->model_step_s =
          PsModelWithChunksSeconds(row->workers, row->shards, true, m,
                                   static_cast<double>(row->chunk_bytes), b);
    } else {
      row->bandwidth_model_s = PsModelSeconds(row->workers, row->shards, m, b);
      row->model_step_s =
          PsModelWithChunksSeconds(row->workers, row->shards, false, m,
                                   static_cast<double>(row->chunk_bytes), b);
    }
  }
  if (row->mode == "ps") {
    row->client_encode_s = r.client_encode_seconds;
    row->client_send_s = r.client_send_seconds;
    row->client_wait_s = r.client_wait_seconds;
    row->client_decode_s = r.client_decode_seconds;
    row->server_accumulate_s = r.server_accumulate_seconds;
    row->server_apply_s = r.server_apply_seconds;
    row->server_barrier_wait_s = r.server_barrier_wait_seconds;
    row->bytes_per_step = r.bytes_per_step;
  }
  return absl::OkStatus();
}

absl::Status RunMlp(const StudyOptions& o, const RunSpec& spec,
                    const std::vector<BenchHost>& hosts, StudyRow* row,
                    std::vector<StepRow>* steps) {
  ASSIGN_OR_RETURN(std::string dir, MakeScratchDir("lockstep_study"));
  ASSIGN_OR_RETURN(MlpJobResult r, RunMlpJob(spec.job, hosts, o.bin_dir, dir,
                                             o.interrupt_fd, o.run_timeout));
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);  // Kept after a failure.
  // Step times from rank 0's log; the first step also holds the start-up.
  std::vector<double> gaps;
  for (size_t i = 1; i < r.seconds.size(); ++i) {
    gaps.push_back(r.seconds[i] - r.seconds[i - 1]);
  }
  row->steps = static_cast<int64_t>(r.steps.size());
  row->median_step_s = Median(gaps);
  row->p90_step_s = Quantile(gaps, 0.9);
  row->mean_step_s = r.wall_seconds / static_cast<double>(r.steps.size());
  const size_t tail = std::min<size_t>(20, r.losses.size());
  double sum = 0;
  for (size_t i = r.losses.size() - tail; i < r.losses.size(); ++i) {
    sum += r.losses[i];
  }
  row->final_loss = sum / static_cast<double>(tail);
  row->test_accuracy = r.test_accuracy;
  row->wall_s = r.wall_seconds;
  row->tx_bytes_per_worker = r.tx_bytes_per_worker;
  for (size_t k = 0; k < r.epoch_seconds.size(); ++k) {
    if (r.epoch_accuracy[k] >= row->target_accuracy) {
      row->time_to_target_s = r.epoch_seconds[k];
      break;
    }
  }
  for (size_t i = 0; i < r.steps.size(); ++i) {
    steps->push_back({row->run_id, r.steps[i], r.seconds[i], r.losses[i]});
  }
  return absl::OkStatus();
}

std::vector<std::string> DataFlags(const StudyOptions& o,
                                   std::vector<std::string>* notes) {
  if (o.quick) {
    return {"--dataset=synthetic", "--synthetic_examples=2000"};
  }
  for (const char* name :
       {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz"}) {
    if (std::filesystem::exists(absl::StrCat(o.data_dir, "/", name))) {
      return {absl::StrCat("--data_dir=", o.data_dir)};
    }
  }
  notes->push_back(absl::StrCat("no Fashion-MNIST in ", o.data_dir,
                                "; the MLP runs train on synthetic data"));
  return {"--dataset=synthetic", "--synthetic_examples=15000"};
}

// Draws the PNGs with matplotlib, if this machine has it.
absl::Status Plot(const StudyOptions& o, const std::string& scratch,
                  std::vector<std::string>* notes) {
  const std::string log = absl::StrCat(scratch, "/plots.log");
  if (!RunTool("checking for matplotlib", {o.python, "-c", "import matplotlib"},
               log, o.interrupt_fd, absl::Seconds(60))
           .ok()) {
    notes->push_back(absl::StrCat(
        "no plots: ", o.python,
        " cannot import matplotlib (Debian package python3-matplotlib)"));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(
      std::string output,
      RunTool("drawing the plots", {o.python, o.plot_script, o.out_dir}, log,
              o.interrupt_fd, absl::Seconds(180)));
  std::fputs(output.c_str(), stdout);
  return absl::OkStatus();
}

// The links to study: --links, or loopback and (as root) the simulated
// cluster; a note in *meta says why the cluster is left out otherwise.
std::vector<std::string> StudyLinks(const StudyOptions& o, StudyMeta* meta) {
  std::vector<std::string> links = o.links;
  if (links.empty()) {
    links = {"loopback"};
    if (geteuid() == 0) {
      links.push_back("sim");
    } else {
      meta->notes.push_back(
          "not root: no simulated cluster (deploy/sim/cluster.sh needs "
          "network namespaces); loopback only, so no cost-model check");
    }
  }
  return links;
}

// Starts the simulated cluster into *cluster. One that cannot be made is
// noted in *meta, with loopback appended to *links when they lack it, and
// leaves *cluster null; a cancelled start is returned.
absl::Status OpenSimCluster(const StudyOptions& o, const std::string& scratch,
                            std::vector<std::string>* links, StudyMeta* meta,
                            std::unique_ptr<SimCluster>* cluster) {
  absl::StatusOr<std::unique_ptr<SimCluster>> made =
      SimCluster::Create(o, scratch);
  if (absl::IsCancelled(made.status())) return made.status();
  if (!made.ok()) {
    // The script's last words say why (not root, no `ip`, ...).
    std::vector<absl::string_view> lines =
        absl::StrSplit(made.status().message(), '\n', absl::SkipWhitespace());
    const bool fallback =
        std::find(links->begin(), links->end(), "loopback") == links->end();
    meta->notes.push_back(absl::StrCat(
        "no simulated cluster (",
        lines.empty() ? "" : absl::StripPrefix(lines.back(), "[tool] "),
        fallback ? "); loopback instead, so no cost-model check"
                 : "); its runs are left out"));
    if (fallback) links->push_back("loopback");
    return absl::OkStatus();
  }
  *cluster = *std::move(made);
  meta->sim_delay_applied = (*cluster)->delay_applied();
  meta->sim_cc = (*cluster)->cc();
  if (!meta->sim_delay_applied && o.sim_delay_ms > 0) {
    meta->notes.push_back(absl::StrFormat(
        "this kernel has no sch_netem: simulated links are rate-limited "
        "to %g Mbit/s but get no added %g ms delay",
        o.sim_rate_mbit, o.sim_delay_ms));
  }
  return absl::OkStatus();
}

// The study's rows and steps so far, its failed runs, and the
// interruption that stops it (OK while none).
struct StudyRuns {
  std::vector<StudyRow> rows;
  std::vector<StepRow> steps;
  int failures = 0;
  absl::Status interrupted;
};

// Runs `spec` on `hosts` into runs->rows, or records it as skipped once the
// study is interrupted or past `deadline`.
void RunOne(const StudyOptions& o, const RunSpec& spec,
            const std::vector<BenchHost>& hosts, absl::Time deadline,
            StudyRuns* runs) {
  StudyRow row = spec.row;
  if (!runs->interrupted.ok() || absl::Now() >= deadline) {
    row.status = runs->interrupted.ok() ? "skipped: the study's time is spent"
                                        : "skipped: interrupted";
    runs->rows.push_back(row);
    return;
  }
  row.load_average = LoadAverage();
  std::printf("[%s] %s %s, %d worker(s), %lld bytes ...", row.run_id.c_str(),
              row.kind.c_str(), row.label.c_str(), row.workers,
              static_cast<long long>(row.model_bytes));
  std::fflush(stdout);
  const absl::Status s = row.kind == "comm"
                             ? RunComm(o, spec, hosts, &row)
                             : RunMlp(o, spec, hosts, &row, &runs->steps);
  if (!s.ok()) {
    row.status = absl::StrCat("failed: ", s.message());
    ++runs->failures;
    if (absl::IsCancelled(s)) runs->interrupted = s;
  }
  std::printf(" %s\n",
              s.ok()
                  ? absl::StrFormat("median %.6f s", row.median_step_s).c_str()
                  : row.status.c_str());
  std::fflush(stdout);
  runs->rows.push_back(row);
}

// Writes the CSVs and JSON (and the plots) into --out_dir and prints the
// table; then the interruption, the failed runs or OK.
absl::Status WriteStudy(const StudyOptions& o, const std::string& scratch,
                        StudyMeta* meta, const StudyRuns& runs) {
  const std::string csv = absl::StrCat(o.out_dir, "/study.csv");
  RETURN_IF_ERROR(WriteFileAtomically(csv, RowsCsv(runs.rows)));
  RETURN_IF_ERROR(WriteFileAtomically(
      absl::StrCat(o.out_dir, "/study_steps.csv"), StepsCsv(runs.steps)));
  const std::string json = absl::StrCat(o.out_dir, "/study.json");
  RETURN_IF_ERROR(WriteFileAtomically(json, StudyJson(*meta, runs.rows)));
  if (o.plots && runs.interrupted.ok()) {
    // The script reads the files above; its notes go into the JSON too.
    RETURN_IF_ERROR(Plot(o, scratch, &meta->notes));
    RETURN_IF_ERROR(WriteFileAtomically(json, StudyJson(*meta, runs.rows)));
  }
  PrintStudyTable(*meta, runs.rows, stdout);
  std::printf("\nwritten to %s: study.csv, study_steps.csv, study.json\n",
              o.out_dir.c_str());
  std::error_code error;
  std::filesystem::remove_all(scratch, error);
  if (!runs.interrupted.ok()) return runs.interrupted;
  if (runs.failures > 0) {
    return absl::InternalError(absl::StrCat(
        runs.failures, " run(s) failed; see the status column of ", csv));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunStudy(const StudyOptions& o) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + o.total_timeout;
  StudyMeta meta;
  meta.command = o.command;
  meta.quick = o.quick;
  meta.cpus = static_cast<int>(std::thread::hardware_concurrency());
  meta.load_average_start = LoadAverage();
  meta.sim_rate_gbit = o.sim_rate_mbit / 1000;
  meta.sim_delay_ms = o.sim_delay_ms;
  std::vector<std::string> links = StudyLinks(o, &meta);
  std::error_code error;
  std::filesystem::create_directories(o.out_dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot create ", o.out_dir, ": ", error.message()));
  }
  ASSIGN_OR_RETURN(std::string scratch, MakeScratchDir("lockstep_study"));
  const std::vector<std::string> data_flags = DataFlags(o, &meta.notes);

  StudyRuns runs;
  // By index: a failed simulated cluster appends loopback.
  for (size_t i = 0; i < links.size(); ++i) {
    const std::string link = links[i];
    std::unique_ptr<SimCluster> cluster;
    std::vector<BenchHost> hosts = LoopbackHosts(kStudyMaxHosts);
    if (link == "sim") {
      const absl::Status opened =
          OpenSimCluster(o, scratch, &links, &meta, &cluster);
      if (!opened.ok()) {
        runs.interrupted = opened;
        break;
      }
      if (cluster == nullptr) continue;
      hosts = cluster->hosts();
    }
    meta.links.push_back(link);
    for (const RunSpec& spec : StudyMatrix(link, o.quick, data_flags)) {
      if (!o.kinds.empty() && std::find(o.kinds.begin(), o.kinds.end(),
                                        spec.row.kind) == o.kinds.end()) {
        continue;
      }
      RunOne(o, spec, hosts, deadline, &runs);
    }
  }
  meta.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  meta.load_average_end = LoadAverage();
  return WriteStudy(o, scratch, &meta, runs);
}

}  // namespace lockstep
