// The figures of `lockstep_bench study`: one row per run of the matrix, the
// per-step loss logs of the MLP runs, the analytic cost model, and their
// CSV, JSON and printed forms. Plain data and free functions;
// thread-compatible.
#ifndef LOCKSTEP_TESTS_BENCH_STUDY_REPORT_H_
#define LOCKSTEP_TESTS_BENCH_STUDY_REPORT_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace lockstep {

// The cost model: seconds one synchronous exchange of M = `bytes` of
// gradients takes among n = `workers` hosts on full-duplex links of
// B = `bytes_per_second` each (docs/study.md derives every term).
//
// Bandwidth only, after BytePS (OSDI '20):
//   ring all-reduce              2 (n - 1) M / (n B)
//   k PS shards, own hosts       max(M / B, n M / (k B))
//   BytePS, n workers and k      2 n (n - 1) M / ((n^2 + k n - 2 k) B)
//   extra CPU-only hosts (k <= n); k = 0 is every shard colocated with a
//   worker (= the ring's time), k = n is the dedicated-shard case.
double RingAllReduceModelSeconds(int workers, double bytes,
                                 double bytes_per_second);
double PsModelSeconds(int workers, int shards, double bytes,
                      double bytes_per_second);
double BytePsModelSeconds(int workers, int extra_hosts, double bytes,
                          double bytes_per_second);

// What the bandwidth-only model leaves out, both measured on the
// simulated links (docs/study.md):
//   headers   TCP/IP and Ethernet take 4.4% of each link (iperf3 --bidir
//             gets 953 of 1000 Mbit/s): B is kLinkPayloadShare of the rate;
//   drain     a shard answers a chunk once every worker's copy has arrived,
//             so after the last chunk's pushes its replies still leave the
//             shard: n c / B more for dedicated shards, (n - 1) c / B for
//             colocated ones (one worker is local), c = the chunk size.
// The all-reduce rows keep the bandwidth model with headers: gloo and
// grpc-ring pipeline their segments below a chunk's size.
inline constexpr double kLinkPayloadShare = 0.956;
double PsModelWithChunksSeconds(int workers, int shards, bool colocated,
                                double bytes, double chunk_bytes,
                                double link_bytes_per_second);
double RingModelWithHeadersSeconds(int workers, double bytes,
                                   double link_bytes_per_second);

// One run of the matrix. Times are seconds; -1 marks a figure the run's
// kind does not have (no cost model on loopback, no loss for comm-only).
struct StudyRow {
  std::string run_id;  // Unique within a study, e.g. "sim-comm-017".
  std::string link;    // "loopback" or "sim".
  // "comm" (synthetic gradients), "mlp", "straggler", "rounds".
  std::string kind;
  // "ps", "gloo", "grpc-ring", "async", "ssp", "localsgd", "diloco".
  std::string mode;
  std::string label;   // For people and plot legends, e.g. "ps k=2".
  int workers = 0;
  int shards = 0;  // Parameter-server shards (1 rendezvous server for
                   // all-reduce).
  int backup_workers = 0;
  int staleness = 0;
  // PS comm runs: "dedicated" (every shard on a host of its own) or
  // "colocated" (shard i on worker i's host); empty otherwise.
  std::string placement;
  int64_t chunk_bytes = -1;       // PS comm runs: the chunk size used.
  std::string straggle = "none";  // "RANK:MS" or "random:MS".
  int64_t model_bytes = 0;        // Gradient bytes M exchanged per step.
  int64_t steps = 0;              // Timed steps.
  double median_step_s = -1;
  double p90_step_s = -1;
  double mean_step_s = -1;
  double model_step_s = -1;       // The cost model on this link, every term.
  double bandwidth_model_s = -1;  // Its bandwidth-only part.
  double link_gbit = -1;     // The simulated link's rate.
  // comm with ps: the client and server phases of CommResult.
  double client_encode_s = -1;
  double client_send_s = -1;
  double client_wait_s = -1;
  double client_decode_s = -1;
  double server_accumulate_s = -1;
  double server_apply_s = -1;
  double server_barrier_wait_s = -1;
  double bytes_per_step = -1;
  // mlp and straggler: rank 0's view.
  double final_loss = -1;  // Mean batch loss of the last 20 steps.
  double test_accuracy = -1;
  double wall_s = -1;         // Training loop.
  // rounds (LocalSGD, DiLoCo against every-step synchronization): the
  // rounds' length, the seconds (rank 0's step log, at an epoch's end) of
  // the first epoch whose test accuracy reached target_accuracy, and the
  // bytes each worker's host sent on its link (simulated links only).
  int local_steps = 0;
  double target_accuracy = -1;
  double time_to_target_s = -1;
  double tx_bytes_per_worker = -1;
  double load_average = -1;   // 1-minute load as the run started.
  double cpu_busy = -1;       // comm: the CPUs' busy share, 0..1.
  std::string status = "ok";  // Or what went wrong.
};

// One line of a worker's --step_log, tagged with its run.
struct StepRow {
  std::string run_id;
  int64_t step = 0;
  double seconds = 0;
  double loss = 0;
};

// What the study was run with and on, for the JSON's "study" object.
struct StudyMeta {
  std::string command;
  bool quick = false;
  std::vector<std::string> links;
  double sim_rate_gbit = 0;
  double sim_delay_ms = 0;
  bool sim_delay_applied = false;
  // The hosts' TCP congestion control, as cluster.sh set it.
  std::string sim_cc;
  std::vector<std::string> notes;  // Fallbacks and caveats, as printed.
  double load_average_start = -1;
  double load_average_end = -1;
  int cpus = 0;
  double seconds = 0;
};

// The columns every row has, in order (CSV header, JSON keys).
std::vector<std::string> StudyColumns();
std::string RowsCsv(const std::vector<StudyRow>& rows);
std::string StepsCsv(const std::vector<StepRow>& steps);
// {"study": {...}, "runs": [...], "model_checks": [...]}.
std::string StudyJson(const StudyMeta& meta, const std::vector<StudyRow>& rows);

// The study's check: on simulated links, every comm run with M >= 10 MB
// within 15% of its cost model (model_step_s, every term).
struct ModelCheck {
  const StudyRow* row;  // Not owned.
  double ratio;         // Measured median / model.
  bool held;
};
std::vector<ModelCheck> ModelChecks(const std::vector<StudyRow>& rows);

// Where PS beats the ring: for each simulated-link size and worker count,
// each PS run's median against gloo's (and grpc-ring's) in the same study.
struct Crossover {
  const StudyRow* ps;  // Not owned.
  double gloo_s = -1;  // -1: no such run.
  double ring_s = -1;
  bool beats_gloo() const { return gloo_s > 0 && ps->median_step_s < gloo_s; }
};
std::vector<Crossover> Crossovers(const std::vector<StudyRow>& rows);

void PrintStudyTable(const StudyMeta& meta, const std::vector<StudyRow>& rows,
                     std::FILE* out);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_STUDY_REPORT_H_
