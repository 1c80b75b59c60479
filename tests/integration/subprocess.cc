#include "tests/integration/subprocess.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "absl/time/clock.h"

extern char** environ;

namespace lockstep {

int FreePort() {
  // Below Linux's ephemeral range (32768 and up by default), which the
  // kernel's own pick would come from: there, any connection another test
  // opens meanwhile may take the port as its source port before the caller
  // binds it. A random start spreads concurrent tests apart.
  static std::atomic<uint32_t> next{static_cast<uint32_t>(
      getpid() * 7919u + static_cast<uint32_t>(time(nullptr)))};
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = 20000 + static_cast<int>(next.fetch_add(7) % 12000);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free =
        bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (free) return port;
  }
  // Everything tried was taken: the kernel's pick.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string MakeTempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base ? base : "/tmp") + "/lockstep.XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) std::abort();
  return pattern;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Subprocess Subprocess::Start(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env) {
  std::string output = MakeTempDir() + "/output.txt";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const std::string& e : env) env_strings.push_back(e);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(),
                  envp.data()) != 0) {
    pid = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  return Subprocess(pid, std::move(output));
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(other.pid_),
      exit_code_(other.exit_code_),
      output_path_(std::move(other.output_path_)) {
  other.pid_ = -1;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !exit_code_.has_value()) {
    Kill();
  }
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  if (exit_code_.has_value() || pid_ <= 0) {
    return pid_ <= 0 ? std::optional<int>(127) : exit_code_;
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status)
                                     : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    // Polls the child's state; the deadline above bounds the wait.
    absl::SleepFor(absl::Milliseconds(5));
  }
}

void Subprocess::Kill() {
  if (pid_ <= 0 || exit_code_.has_value()) return;
  kill(pid_, SIGKILL);
  Wait(absl::Seconds(10));
}

std::string Subprocess::Output() const { return ReadFile(output_path_); }

RunResult RunProcess(const std::vector<std::string>& argv,
                     const std::vector<std::string>& env,
                     absl::Duration timeout) {
  Subprocess p = Subprocess::Start(argv, env);
  RunResult result;
  std::optional<int> code = p.Wait(timeout);
  if (!code.has_value()) p.Kill();
  result.exit_code = code.value_or(-1);
  result.output = p.Output();
  return result;
}

}  // namespace lockstep
