#include "tests/security/security_test_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/rpc/grpc_status.h"

namespace lockstep {

TlsOptions CertSet::Client(const std::string& who) const {
  TlsOptions o;
  o.cert_file = File(who + ".pem");
  o.key_file = File(who + ".key");
  o.ca_file = File("ca.pem");
  o.refresh_interval = absl::Seconds(1);
  return o;
}

std::vector<std::string> CertSet::ServerFlags() const {
  return {"--tls_cert=" + File("server.pem"), "--tls_key=" + File("server.key"),
          "--tls_ca=" + File("ca.pem"), "--admin_identities=lockstep-admin"};
}

absl::Status MakeCertSet(const std::string& parent, const std::string& name,
                         CertSet* out) {
  out->dir = absl::StrCat(parent, "/", name);
  RunResult r = RunProcess(
      {"/bin/bash",
       std::string(LOCKSTEP_SOURCE_DIR) + "/deploy/tls/make_certs.sh",
       out->dir},
      {}, absl::Seconds(30));
  if (r.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("make_certs.sh failed (", r.exit_code, "): ", r.output));
  }
  return absl::OkStatus();
}

ServerProcess StartServer(const std::vector<std::string>& flags,
                          const std::string& dir,
                          const std::vector<std::string>& env) {
  static int next = 0;
  const std::string port_file = absl::StrCat(dir, "/server", next++, ".port");
  std::vector<std::string> argv = {
      std::string(LOCKSTEP_BIN_DIR) + "/lockstep_server",
      "--listen=127.0.0.1:0", "--port_file=" + port_file};
  argv.insert(argv.end(), flags.begin(), flags.end());
  ServerProcess s{Subprocess::Start(argv, env), ""};
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    const std::string port =
        std::string(absl::StripAsciiWhitespace(ReadFile(port_file)));
    if (!port.empty()) {
      s.address = absl::StrCat("127.0.0.1:", port);
      break;
    }
    if (s.process.Wait(absl::Milliseconds(10)).has_value()) break;
  }
  return s;
}

std::unique_ptr<v1::ParameterServer::Stub> Stub(const std::string& address,
                                                const TlsOptions& tls) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(address, tls);
  if (!channel.ok()) {
    std::fprintf(stderr, "MakeChannel: %s\n",
                 channel.status().ToString().c_str());
    std::abort();
  }
  return v1::ParameterServer::NewStub(*channel);
}

absl::Status CallGetStatus(v1::ParameterServer::Stub& stub,
                           absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::StatusRequest request;
  v1::StatusResponse response;
  return FromGrpcStatus(stub.GetStatus(&context, request, &response));
}

int64_t RssKiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "VmRSS:")) continue;
    std::vector<absl::string_view> parts =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int64_t kib = 0;
    if (parts.size() >= 2 && absl::SimpleAtoi(parts[1], &kib)) return kib;
  }
  return -1;
}

void WriteFileOrDie(const std::string& path, const std::string& contents) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 ||
      write(fd, contents.data(), contents.size()) !=
          static_cast<ssize_t>(contents.size()) ||
      close(fd) != 0) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
}

}  // namespace lockstep
