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

}  // namespace

absl::StatusOr<PrometheusSamples> ParsePrometheusText(absl::string_view text) {
  PrometheusSamples samples;
  std::map<std::string, Family> families;
  std::map<std::string, Buckets> histograms;  // By family + labels.
  std::string current;  // Family of the previous line.
  int line_number = 0;
  if (!text.empty() && text.back() != '\n') {
    return absl::InvalidArgumentError("the text does not end with a newline");
  }
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (line.empty()) continue;
    auto fail = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_number, " (", line, "): ", why));
    };
    std::string family;
    if (absl::StartsWith(line, "# HELP ") || absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts =
          absl::StrSplit(line.substr(7), absl::MaxSplits(' ', 1));
      if (parts.size() != 2 || parts[1].empty()) return fail("no name or text");
      family = parts[0];
      Family& f = families[family];
      if (f.done || (!current.empty() && current != family &&
                     (f.help || !f.type.empty()))) {
        return fail("family split in two");
      }
      if (absl::StartsWith(line, "# HELP ")) {
        if (f.help) return fail("second HELP");
        f.help = true;
      } else {
        if (!f.type.empty()) return fail("second TYPE");
        if (parts[1] != "counter" && parts[1] != "gauge" &&
            parts[1] != "histogram") {
          return fail("unknown type");
        }
        f.type = parts[1];
      }
    } else if (absl::StartsWith(line, "#")) {
      continue;  // A comment.
    } else {
      std::smatch m;
      const std::string l(line);
      if (!std::regex_match(l, m, SampleLine())) return fail("not a sample");
      const std::string name = m[1];
      const std::string labels = m[2];
      double value;
      if (!ParseValue(m[7], &value)) return fail("bad value");
      family = name;
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string base(absl::StripSuffix(name, suffix));
        if (base != name && families.count(base) > 0 &&
            families[base].type == "histogram") {
          family = base;
        }
      }
      Family& f = families[family];
      if (f.type.empty() || !f.help) return fail("sample before HELP/TYPE");
      if (f.done) return fail("family split in two");
      if (samples.count(name + labels) > 0) return fail("repeated series");
      samples[name + labels] = value;
      if (f.type == "counter" && !(value >= 0)) return fail("negative counter");
      if (f.type == "histogram") {
        if (family == name) return fail("histogram sample without suffix");
        std::string rest, le;
        SplitLe(labels, &rest, &le);
        Buckets& b = histograms[family + rest];
        if (absl::EndsWith(name, "_bucket")) {
          double bound;
          if (le.empty() || !ParseValue(le, &bound)) return fail("bad le");
          if (!b.le_count.empty() && !(bound > b.le_count.back().first)) {
            return fail("le not increasing");
          }
          if (!b.le_count.empty() && value < b.le_count.back().second) {
            return fail("bucket count decreases");
          }
          b.le_count.emplace_back(bound, value);
        } else if (absl::EndsWith(name, "_sum")) {
          b.has_sum = true;
        } else {
          b.count = value;
        }
      }
    }
    if (!current.empty() && current != family) families[current].done = true;
    current = family;
  }
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
  return samples;
}

}  // namespace lockstep
