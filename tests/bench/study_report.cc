#include "tests/bench/study_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/json_writer.h"

namespace lockstep {
namespace {

// The thresholds for the cost-model check.
constexpr double kCheckMinBytes = 10e6;
constexpr double kCheckTolerance = 0.2;

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
      {"straggle", r.straggle, false},
      {"model_bytes", absl::StrCat(r.model_bytes), true},
      {"steps", absl::StrCat(r.steps), true},
      {"median_step_s", Number(r.median_step_s), true},
      {"p90_step_s", Number(r.p90_step_s), true},
      {"mean_step_s", Number(r.mean_step_s), true},
      {"model_step_s", Number(r.model_step_s), true},
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
      {"load_average", Number(r.load_average), true},
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
        .AddBool("within_20_percent", c.held);
    checks.push_back(check.ToString());
  }
  return absl::StrCat("{\n\"study\": ", study.ToString(), ",\n\"runs\": [\n",
                      absl::StrJoin(runs, ",\n"), "\n],\n\"model_checks\": [\n",
                      absl::StrJoin(checks, ",\n"), "\n]\n}\n");
}

void PrintStudyTable(const StudyMeta& meta, const std::vector<StudyRow>& rows,
                     std::FILE* out) {
  std::string text = absl::StrFormat(
      "\nstudy: %d runs in %.0f s on %d CPU(s), load average %.2f -> %.2f\n",
      rows.size(), meta.seconds, meta.cpus, meta.load_average_start,
      meta.load_average_end);
  for (const std::string& note : meta.notes) {
    absl::StrAppend(&text, "  note: ", note, "\n");
  }
  absl::StrAppend(&text,
                  "  link      kind       label                      n  k  "
                  "M          median s   p90 s      model s    ratio  loss\n");
  for (const StudyRow& r : rows) {
    absl::StrAppendFormat(
        &text,
        "  %-9s %-10s %-26s %-2d %-2d %-10s %-10s %-10s %-10s %-6s %s%s\n",
        r.link, r.kind, r.label, r.workers, r.shards,
        Bytes(static_cast<double>(r.model_bytes)), Number(r.median_step_s),
        Number(r.p90_step_s), Number(r.model_step_s),
        r.model_step_s > 0 && r.median_step_s > 0
            ? absl::StrFormat("%.2f", r.median_step_s / r.model_step_s)
            : "",
        Number(r.final_loss), r.status == "ok" ? "" : "  " + r.status);
  }
  const std::vector<ModelCheck> checks = ModelChecks(rows);
  const int held = static_cast<int>(
      std::count_if(checks.begin(), checks.end(),
                    [](const ModelCheck& c) { return c.held; }));
  absl::StrAppendFormat(
      &text,
      "\ncost-model check (simulated %.3g Gbit/s links, M >= 10 MB, measured "
      "median within 20%% of the model): %d of %d held\n",
      meta.sim_rate_gbit, held, checks.size());
  for (const ModelCheck& c : checks) {
    absl::StrAppendFormat(&text,
                          "  %-26s n=%d M=%-9s measured %.4f s  model %.4f s "
                          " ratio %.2f  %s\n",
                          c.row->label, c.row->workers,
                          Bytes(static_cast<double>(c.row->model_bytes)),
                          c.row->median_step_s, c.row->model_step_s, c.ratio,
                          c.held ? "held" : "MISSED");
  }
  if (checks.empty()) {
    absl::StrAppend(
        &text,
        "  (no simulated-link comm run with M >= 10 MB: nothing to check)\n");
  }
  std::fputs(text.c_str(), out);
  std::fflush(out);
}

}  // namespace lockstep
