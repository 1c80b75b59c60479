#include "tests/bench/study_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/formats/json_writer.h"

namespace lockstep {
namespace {

// The thresholds for the cost-model check.
constexpr double kCheckMinBytes = 10e6;
constexpr double kCheckTolerance = 0.15;

struct Cell {
  std::string name;
  std::string text;  // Empty: not applicable.
  bool number;
};

std::string Number(double v) { return v < 0 ? "" : absl::StrFormat("%.6g", v); }

std::vector<Cell> Cells(const StudyRow& r) {
  return {
      {"run_id", r.run_id, false},
      {"link", r.link, false},
      {"kind", r.kind, false},
      {"mode", r.mode, false},
      {"label", r.label, false},
      {"workers", absl::StrCat(r.workers), true},
      {"shards", absl::StrCat(r.shards), true},
      {"backup_workers", absl::StrCat(r.backup_workers), true},
      {"staleness", absl::StrCat(r.staleness), true},
      {"placement", r.placement, false},
      {"chunk_bytes", r.chunk_bytes < 0 ? "" : absl::StrCat(r.chunk_bytes),
       true},
      {"straggle", r.straggle, false},
      {"model_bytes", absl::StrCat(r.model_bytes), true},
      {"steps", absl::StrCat(r.steps), true},
      {"median_step_s", Number(r.median_step_s), true},
      {"p90_step_s", Number(r.p90_step_s), true},
      {"mean_step_s", Number(r.mean_step_s), true},
      {"model_step_s", Number(r.model_step_s), true},
      {"bandwidth_model_s", Number(r.bandwidth_model_s), true},
      {"model_ratio",
       r.model_step_s > 0 && r.median_step_s > 0
           ? Number(r.median_step_s / r.model_step_s)
           : "",
       true},
      {"link_gbit", Number(r.link_gbit), true},
      {"client_encode_s", Number(r.client_encode_s), true},
      {"client_send_s", Number(r.client_send_s), true},
      {"client_wait_s", Number(r.client_wait_s), true},
      {"client_decode_s", Number(r.client_decode_s), true},
      {"server_accumulate_s", Number(r.server_accumulate_s), true},
      {"server_apply_s", Number(r.server_apply_s), true},
      {"server_barrier_wait_s", Number(r.server_barrier_wait_s), true},
      {"bytes_per_step", Number(r.bytes_per_step), true},
      {"final_loss", Number(r.final_loss), true},
      {"test_accuracy", Number(r.test_accuracy), true},
      {"wall_s", Number(r.wall_s), true},
      {"local_steps", absl::StrCat(r.local_steps), true},
      {"target_accuracy", Number(r.target_accuracy), true},
      {"time_to_target_s", Number(r.time_to_target_s), true},
      {"tx_bytes_per_worker", Number(r.tx_bytes_per_worker), true},
      {"load_average", Number(r.load_average), true},
      {"cpu_busy", Number(r.cpu_busy), true},
      {"status", r.status, false},
  };
}

std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  return absl::StrCat("\"", absl::StrReplaceAll(text, {{"\"", "\"\""}}), "\"");
}

std::string JsonRow(const StudyRow& row) {
  std::vector<std::string> fields;
  for (const Cell& c : Cells(row)) {
    const std::string value = !c.number        ? JsonQuote(c.text)
                              : c.text.empty() ? "null"
                                               : c.text;
    fields.push_back(absl::StrCat(JsonQuote(c.name), ": ", value));
  }
  return absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
}

std::string Bytes(double bytes) {
  if (bytes >= 1e6) return absl::StrFormat("%.1f MB", bytes / 1e6);
  return absl::StrFormat("%.0f KB", bytes / 1e3);
}

}  // namespace

double RingAllReduceModelSeconds(int workers, double bytes,
                                 double bytes_per_second) {
  if (workers <= 1) return 0;
  return 2.0 * (workers - 1) * bytes / (workers * bytes_per_second);
}

double PsModelSeconds(int workers, int shards, double bytes,
                      double bytes_per_second) {
  return std::max(bytes / bytes_per_second,
                  workers * bytes / (shards * bytes_per_second));
}

double BytePsModelSeconds(int workers, int extra_hosts, double bytes,
                          double bytes_per_second) {
  const double n = workers, k = extra_hosts;
  if (workers <= 1) return extra_hosts > 0 ? bytes / bytes_per_second : 0;
  return 2 * n * (n - 1) * bytes / ((n * n + k * n - 2 * k) * bytes_per_second);
}

double PsModelWithChunksSeconds(int workers, int shards, bool colocated,
                                double bytes, double chunk_bytes,
                                double link_bytes_per_second) {
  const double b = link_bytes_per_second * kLinkPayloadShare;
  const double c = std::min(chunk_bytes, bytes / shards);
  if (colocated) {
    // BytePS with no extra hosts, for k = n shards; with fewer shards than
    // workers the hosts without one only push and pull, and the busiest
    // link is a shard host's: n - 1 remote pushes of its M / k in and its
    // worker's (k - 1) M / k out to the other shards, the same both ways.
    const double n = workers, k = shards;
    const double busiest = (n - 1) * bytes / k + (k - 1) * bytes / k;
    return busiest / b + (n - 1) * c / b;
  }
  return PsModelSeconds(workers, shards, bytes, b) + workers * c / b;
}

double RingModelWithHeadersSeconds(int workers, double bytes,
                                   double link_bytes_per_second) {
  return RingAllReduceModelSeconds(workers, bytes,
                                   link_bytes_per_second * kLinkPayloadShare);
}

std::vector<Crossover> Crossovers(const std::vector<StudyRow>& rows) {
  std::vector<Crossover> out;
  auto median_of = [&](const StudyRow& ps, const std::string& mode) {
    for (const StudyRow& r : rows) {
      if (r.link == ps.link && r.kind == "comm" && r.mode == mode &&
          r.workers == ps.workers && r.model_bytes == ps.model_bytes &&
          r.status == "ok" && r.median_step_s > 0) {
        return r.median_step_s;
      }
    }
    return -1.0;
  };
  for (const StudyRow& r : rows) {
    if (r.link != "sim" || r.kind != "comm" || r.mode != "ps" ||
        r.status != "ok" || r.median_step_s <= 0) {
      continue;
    }
    out.push_back({&r, median_of(r, "gloo"), median_of(r, "grpc-ring")});
  }
  return out;
}

std::vector<std::string> StudyColumns() {
  std::vector<std::string> names;
  for (const Cell& c : Cells(StudyRow())) names.push_back(c.name);
  return names;
}

std::string RowsCsv(const std::vector<StudyRow>& rows) {
  std::string out = absl::StrCat(absl::StrJoin(StudyColumns(), ","), "\n");
  for (const StudyRow& row : rows) {
    std::vector<std::string> fields;
    for (const Cell& c : Cells(row)) fields.push_back(CsvField(c.text));
    absl::StrAppend(&out, absl::StrJoin(fields, ","), "\n");
  }
  return out;
}

std::string StepsCsv(const std::vector<StepRow>& steps) {
  std::string out = "run_id,step,seconds,loss\n";
  for (const StepRow& s : steps) {
    absl::StrAppendFormat(&out, "%s,%d,%.6f,%.6f\n", s.run_id, s.step,
                          s.seconds, s.loss);
  }
  return out;
}

std::vector<ModelCheck> ModelChecks(const std::vector<StudyRow>& rows) {
  std::vector<ModelCheck> checks;
  for (const StudyRow& row : rows) {
    if (row.link != "sim" || row.kind != "comm" || row.status != "ok" ||
        row.model_bytes < kCheckMinBytes || row.model_step_s <= 0) {
      continue;
    }
    const double ratio = row.median_step_s / row.model_step_s;
    checks.push_back({&row, ratio, std::abs(ratio - 1) <= kCheckTolerance});
  }
  return checks;
}

std::string StudyJson(const StudyMeta& meta,
                      const std::vector<StudyRow>& rows) {
  JsonObjectWriter study;
  study.Add("command", meta.command)
      .AddBool("quick", meta.quick)
      .Add("links", absl::StrJoin(meta.links, ","))
      .Add("sim_rate_gbit", meta.sim_rate_gbit)
      .Add("sim_delay_ms", meta.sim_delay_ms)
      .AddBool("sim_delay_applied", meta.sim_delay_applied)
      .Add("sim_cc", meta.sim_cc)
      .Add("notes", absl::StrJoin(meta.notes, " | "))
      .Add("load_average_start", meta.load_average_start)
      .Add("load_average_end", meta.load_average_end)
      .Add("cpus", meta.cpus)
      .Add("seconds", meta.seconds);
  std::vector<std::string> runs, checks;
  for (const StudyRow& row : rows) runs.push_back(JsonRow(row));
  for (const ModelCheck& c : ModelChecks(rows)) {
    JsonObjectWriter check;
    check.Add("run_id", c.row->run_id)
        .Add("label", c.row->label)
        .Add("workers", c.row->workers)
        .Add("model_bytes", c.row->model_bytes)
        .Add("median_step_s", c.row->median_step_s)
        .Add("model_step_s", c.row->model_step_s)
        .Add("ratio", c.ratio)
        .Add("bandwidth_model_s", c.row->bandwidth_model_s)
        .Add("cpu_busy", c.row->cpu_busy)
        .AddBool("within_15_percent", c.held);
    checks.push_back(check.ToString());
  }
  std::vector<std::string> crossovers;
  for (const Crossover& c : Crossovers(rows)) {
    JsonObjectWriter x;
    x.Add("run_id", c.ps->run_id)
        .Add("label", c.ps->label)
        .Add("workers", c.ps->workers)
        .Add("shards", c.ps->shards)
        .Add("placement", c.ps->placement)
        .Add("model_bytes", c.ps->model_bytes)
        .Add("ps_s", c.ps->median_step_s)
        .Add("gloo_s", c.gloo_s)
        .Add("grpc_ring_s", c.ring_s)
        .AddBool("beats_gloo", c.beats_gloo());
    crossovers.push_back(x.ToString());
  }
  return absl::StrCat("{\n\"study\": ", study.ToString(), ",\n\"runs\": [\n",
                      absl::StrJoin(runs, ",\n"), "\n],\n\"model_checks\": [\n",
                      absl::StrJoin(checks, ",\n"), "\n],\n\"crossover\": [\n",
                      absl::StrJoin(crossovers, ",\n"), "\n]\n}\n");
}

namespace {

// One line per run under a header line.
void AppendRunsTable(const std::vector<StudyRow>& rows, std::string* text) {
  absl::StrAppend(text,
                  "  link      kind       label                      n  k  "
                  "M          median s   p90 s      model s    ratio  loss\n");
  for (const StudyRow& r : rows) {
    absl::StrAppendFormat(
        text,
        "  %-9s %-10s %-26s %-2d %-2d %-10s %-10s %-10s %-10s %-6s %s%s\n",
        r.link, r.kind, r.label, r.workers, r.shards,
        Bytes(static_cast<double>(r.model_bytes)), Number(r.median_step_s),
        Number(r.p90_step_s), Number(r.model_step_s),
        r.model_step_s > 0 && r.median_step_s > 0
            ? absl::StrFormat("%.2f", r.median_step_s / r.model_step_s)
            : "",
        Number(r.final_loss), r.status == "ok" ? "" : "  " + r.status);
  }
}

// The cost-model check: how many simulated-link comm runs held, then each.
void AppendModelChecks(const StudyMeta& meta, const std::vector<StudyRow>& rows,
                       std::string* text) {
  const std::vector<ModelCheck> checks = ModelChecks(rows);
  const int held = static_cast<int>(
      std::count_if(checks.begin(), checks.end(),
                    [](const ModelCheck& c) { return c.held; }));
  absl::StrAppendFormat(
      text,
      "\ncost-model check (simulated %.3g Gbit/s links, M >= 10 MB, measured "
      "median within 15%% of the model with headers and chunks): %d of %d "
      "held\n",
      meta.sim_rate_gbit, held, checks.size());
  for (const ModelCheck& c : checks) {
    absl::StrAppendFormat(
        text,
        "  %-26s n=%d M=%-9s measured %.4f s  model %.4f s (bandwidth only "
        "%.4f)  ratio %.2f  cpu %3.0f%%  %s\n",
        c.row->label, c.row->workers,
        Bytes(static_cast<double>(c.row->model_bytes)), c.row->median_step_s,
        c.row->model_step_s, c.row->bandwidth_model_s, c.ratio,
        c.row->cpu_busy * 100, c.held ? "held" : "MISSED");
  }
  if (checks.empty()) {
    absl::StrAppend(
        text,
        "  (no simulated-link comm run with M >= 10 MB: nothing to check)\n");
  }
}

// Each PS run against gloo's ring all-reduce, when there are any.
void AppendCrossovers(const std::vector<StudyRow>& rows, std::string* text) {
  const std::vector<Crossover> crossovers = Crossovers(rows);
  if (!crossovers.empty()) {
    absl::StrAppend(text,
                    "\ncrossover (simulated links): each PS run against gloo's "
                    "ring all-reduce at the same n and M\n");
    for (const Crossover& c : crossovers) {
      absl::StrAppendFormat(
          text, "  %-26s n=%d M=%-9s PS %.4f s  gloo %s  grpc-ring %s  %s\n",
          c.ps->label, c.ps->workers,
          Bytes(static_cast<double>(c.ps->model_bytes)), c.ps->median_step_s,
          c.gloo_s > 0 ? absl::StrFormat("%.4f s", c.gloo_s) : "-",
          c.ring_s > 0 ? absl::StrFormat("%.4f s", c.ring_s) : "-",
          c.gloo_s <= 0    ? ""
          : c.beats_gloo() ? absl::StrFormat("PS wins (%.2fx)",
                                             c.gloo_s / c.ps->median_step_s)
                           : absl::StrFormat("gloo wins (%.2fx)",
                                             c.ps->median_step_s / c.gloo_s));
    }
  }
}

// LocalSGD and DiLoCo against every-step synchronization, when run.
void AppendRounds(const std::vector<StudyRow>& rows, std::string* text) {
  bool header = false;
  for (const StudyRow& r : rows) {
    if (r.kind != "rounds" || r.status != "ok") continue;
    if (!header) {
      header = true;
      absl::StrAppendFormat(
          text,
          "\nrounds: test accuracy, training time, time to %.2f test "
          "accuracy and bytes each worker sent\n",
          r.target_accuracy);
    }
    absl::StrAppendFormat(
        text, "  %-5s %-20s n=%d accuracy %.4f  %7.1f s  to target %s  sent %s\n",
        r.link, r.label, r.workers, r.test_accuracy, r.wall_s,
        r.time_to_target_s >= 0 ? absl::StrFormat("%7.1f s", r.time_to_target_s)
                                : std::string("      -  "),
        r.tx_bytes_per_worker >= 0 ? Bytes(r.tx_bytes_per_worker)
                                   : std::string("-"));
  }
}

}  // namespace

void PrintStudyTable(const StudyMeta& meta, const std::vector<StudyRow>& rows,
                     std::FILE* out) {
  std::string text = absl::StrFormat(
      "\nstudy: %d runs in %.0f s on %d CPU(s), load average %.2f -> %.2f\n",
      rows.size(), meta.seconds, meta.cpus, meta.load_average_start,
      meta.load_average_end);
  for (const std::string& note : meta.notes) {
    absl::StrAppend(&text, "  note: ", note, "\n");
  }
  AppendRunsTable(rows, &text);
  AppendModelChecks(meta, rows, &text);
  AppendCrossovers(rows, &text);
  AppendRounds(rows, &text);
  std::fputs(text.c_str(), out);
  std::fflush(out);
}

}  // namespace lockstep
