#include "tests/integration/prometheus_text.h"

#include <cmath>
#include <cstdlib>
#include <regex>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace lockstep {
namespace {

const std::regex& SampleLine() {
  static const std::regex* re = new std::regex(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^"\\\n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^"\\\n])*")*\})? ([^ ]+)$)");
  return *re;
}

bool ParseValue(const std::string& text, double* value) {
  if (text == "+Inf") {
    *value = INFINITY;
    return true;
  }
  if (text == "-Inf") {
    *value = -INFINITY;
    return true;
  }
  if (text == "NaN") {
    *value = NAN;
    return true;
  }
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size();
}

// The labels of `series` without `le`, and the le value (empty if none).
void SplitLe(const std::string& labels, std::string* rest, std::string* le) {
  rest->clear();
  le->clear();
  if (labels.empty()) return;
  std::vector<std::string> kept;
  for (absl::string_view part :
       absl::StrSplit(labels.substr(1, labels.size() - 2), ',')) {
    if (absl::StartsWith(part, "le=\"")) {
      *le = std::string(part.substr(4, part.size() - 5));
    } else {
      kept.emplace_back(part);
    }
  }
  if (!kept.empty()) *rest = absl::StrCat("{", absl::StrJoin(kept, ","), "}");
}

struct Family {
  std::string type;
  bool help = false;
  bool done = false;  // Another family's samples came after this one's.
};

struct Buckets {
  std::vector<std::pair<double, double>> le_count;
  bool has_sum = false;
  double count = -1;
};

// What the lines so far have declared and sampled.
struct ParseState {
  PrometheusSamples samples;
  std::map<std::string, Family> families;
  std::map<std::string, Buckets> histograms;  // By family + labels.
  std::string current;                        // Family of the previous line.
};

bool IsMetadata(absl::string_view line) {
  return absl::StartsWith(line, "# HELP ") || absl::StartsWith(line, "# TYPE ");
}

// A HELP or TYPE line of *family; null, or why it is wrong.
const char* ParseMetadata(absl::string_view line, ParseState* state,
                          std::string* family) {
  std::vector<std::string> parts =
      absl::StrSplit(line.substr(7), absl::MaxSplits(' ', 1));
  if (parts.size() != 2 || parts[1].empty()) return "no name or text";
  *family = parts[0];
  Family& f = state->families[*family];
  if (f.done || (!state->current.empty() && state->current != *family &&
                 (f.help || !f.type.empty()))) {
    return "family split in two";
  }
  if (absl::StartsWith(line, "# HELP ")) {
    if (f.help) return "second HELP";
    f.help = true;
    return nullptr;
  }
  if (!f.type.empty()) return "second TYPE";
  if (parts[1] != "counter" && parts[1] != "gauge" && parts[1] != "histogram") {
    return "unknown type";
  }
  f.type = parts[1];
  return nullptr;
}

// A _bucket, _sum or _count sample of histogram `family`; null, or why it
// is wrong.
const char* AddHistogramSample(const std::string& family,
                               const std::string& name,
                               const std::string& labels, double value,
                               ParseState* state) {
  if (family == name) return "histogram sample without suffix";
  std::string rest, le;
  SplitLe(labels, &rest, &le);
  Buckets& b = state->histograms[family + rest];
  if (absl::EndsWith(name, "_bucket")) {
    double bound;
    if (le.empty() || !ParseValue(le, &bound)) return "bad le";
    if (!b.le_count.empty() && !(bound > b.le_count.back().first)) {
      return "le not increasing";
    }
    if (!b.le_count.empty() && value < b.le_count.back().second) {
      return "bucket count decreases";
    }
    b.le_count.emplace_back(bound, value);
  } else if (absl::EndsWith(name, "_sum")) {
    b.has_sum = true;
  } else {
    b.count = value;
  }
  return nullptr;
}

// A sample line of *family; null, or why it is wrong.
const char* ParseSample(absl::string_view line, ParseState* state,
                        std::string* family) {
  std::smatch m;
  const std::string l(line);
  if (!std::regex_match(l, m, SampleLine())) return "not a sample";
  const std::string name = m[1];
  const std::string labels = m[2];
  double value;
  if (!ParseValue(m[7], &value)) return "bad value";
  *family = name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string base(absl::StripSuffix(name, suffix));
    if (base != name && state->families.count(base) > 0 &&
        state->families[base].type == "histogram") {
      *family = base;
    }
  }
  Family& f = state->families[*family];
  if (f.type.empty() || !f.help) return "sample before HELP/TYPE";
  if (f.done) return "family split in two";
  if (state->samples.count(name + labels) > 0) return "repeated series";
  state->samples[name + labels] = value;
  if (f.type == "counter" && !(value >= 0)) return "negative counter";
  if (f.type == "histogram") {
    return AddHistogramSample(*family, name, labels, value, state);
  }
  return nullptr;
}

// Every histogram ends in a +Inf bucket and has a _sum and a _count equal
// to that bucket.
absl::Status CheckHistograms(const std::map<std::string, Buckets>& histograms) {
  for (const auto& [series, b] : histograms) {
    if (b.le_count.empty() || !std::isinf(b.le_count.back().first)) {
      return absl::InvalidArgumentError(
          absl::StrCat(series, ": no +Inf bucket"));
    }
    if (!b.has_sum || b.count != b.le_count.back().second) {
      return absl::InvalidArgumentError(absl::StrCat(
          series, ": _count missing or not the +Inf bucket, or no _sum"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PrometheusSamples> ParsePrometheusText(absl::string_view text) {
  ParseState state;
  int line_number = 0;
  if (!text.empty() && text.back() != '\n') {
    return absl::InvalidArgumentError("the text does not end with a newline");
  }
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (line.empty()) continue;
    const bool metadata = IsMetadata(line);
    if (!metadata && absl::StartsWith(line, "#")) continue;  // A comment.
    std::string family;
    const char* why = metadata ? ParseMetadata(line, &state, &family)
                               : ParseSample(line, &state, &family);
    if (why != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, " (", line, "): ", why));
    }
    if (!state.current.empty() && state.current != family) {
      state.families[state.current].done = true;
    }
    state.current = family;
  }
  const absl::Status histograms = CheckHistograms(state.histograms);
  if (!histograms.ok()) return histograms;
  return state.samples;
}

}  // namespace lockstep
