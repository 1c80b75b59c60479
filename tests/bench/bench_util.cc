#include "tests/bench/bench_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace lockstep {
namespace {

// Parses the number at the start of `text` (after spaces).
absl::StatusOr<double> LeadingNumber(absl::string_view text) {
  text = absl::StripLeadingAsciiWhitespace(text);
  const std::string copy(text.substr(0, 64));
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (end == copy.c_str()) {
    return absl::NotFoundError(
        absl::StrCat("no number at \"", copy.substr(0, 20), "\""));
  }
  return value;
}

}  // namespace

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] +
         (pos - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

absl::StatusOr<double> FindJsonNumber(
    absl::string_view text, std::initializer_list<absl::string_view> path) {
  size_t pos = 0;
  for (absl::string_view key : path) {
    pos = text.find(absl::StrCat("\"", key, "\""), pos);
    if (pos == absl::string_view::npos) {
      return absl::NotFoundError(absl::StrCat("no key \"", key, "\""));
    }
    pos += key.size() + 2;
  }
  const size_t colon = text.find(':', pos);
  if (colon == absl::string_view::npos) {
    return absl::NotFoundError("no value after the last key");
  }
  return LeadingNumber(text.substr(colon + 1));
}

absl::StatusOr<double> FindKeyValueNumber(absl::string_view text,
                                          absl::string_view key) {
  const std::string needle = absl::StrCat(key, "=");
  size_t pos = text.rfind(needle);
  // A match must start a token, so "median_s=" does not find "_median_s=".
  while (pos != absl::string_view::npos && pos > 0 && text[pos - 1] != ' ' &&
         text[pos - 1] != '\n') {
    pos = text.rfind(needle, pos - 1);
  }
  if (pos == absl::string_view::npos) {
    return absl::NotFoundError(absl::StrCat("no \"", needle, "\" in output"));
  }
  return LeadingNumber(text.substr(pos + needle.size()));
}

std::string UntagLines(absl::string_view text, absl::string_view name) {
  const std::string tag = absl::StrCat("[", name, "] ");
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, tag)) absl::StrAppend(&out, line, "\n");
  }
  return out;
}

absl::StatusOr<int64_t> PeakRssBytes(pid_t pid) {
  const std::string path = absl::StrCat("/proc/", pid, "/status");
  absl::StatusOr<std::string> status = ReadWholeFile(path);
  if (!status.ok()) return status.status();
  for (absl::string_view line : absl::StrSplit(*status, '\n')) {
    if (!absl::ConsumePrefix(&line, "VmHWM:")) continue;
    line = absl::StripAsciiWhitespace(line);
    int64_t kib = 0;
    if (absl::ConsumeSuffix(&line, "kB") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      return kib * 1024;
    }
  }
  return absl::NotFoundError(absl::StrCat("no VmHWM line in ", path));
}

bool IsListeningOnLoopback(int port) {
  absl::StatusOr<std::string> table = ReadWholeFile("/proc/net/tcp");
  if (!table.ok()) return false;
  // "sl local_address rem_address st ...": 127.0.0.1 is 0100007F on
  // little-endian hosts, the port is big-endian hex, and 0A is LISTEN.
  char want[32];
  std::snprintf(want, sizeof(want), "0100007F:%04X", port);
  for (absl::string_view line : absl::StrSplit(*table, '\n')) {
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() > 3 && fields[1] == want && fields[3] == "0A") {
      return true;
    }
  }
  return false;
}

CpuTimes ReadCpuTimes() {
  CpuTimes t;
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return t;
  long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0,
            softirq = 0, steal = 0;
  const int got =
      std::fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &user,
                  &nice, &system, &idle, &iowait, &irq, &softirq, &steal);
  std::fclose(f);
  if (got < 4) return t;
  t.busy = user + nice + system + irq + softirq + steal;
  t.total = t.busy + idle + iowait;
  return t;
}

double CpuBusyFraction(const CpuTimes& before, const CpuTimes& after) {
  const int64_t total = after.total - before.total;
  if (total <= 0) return -1;
  return static_cast<double>(after.busy - before.busy) /
         static_cast<double>(total);
}

double LoadAverage() {
  absl::StatusOr<std::string> text = ReadWholeFile("/proc/loadavg");
  double load = -1;
  if (!text.ok() || std::sscanf(text->c_str(), "%lf", &load) != 1) return -1;
  return load;
}

absl::StatusOr<int> PickFreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  }
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok =
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("bind: ", strerror(err)));
  return static_cast<int>(ntohs(addr.sin_port));
}

absl::StatusOr<std::string> MakeScratchDir(absl::string_view prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(base != nullptr && *base ? base : "/tmp",
                                     "/", prefix, ".XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("mkdtemp ", pattern, ": ", strerror(errno)));
  }
  return pattern;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace lockstep
