#include "common/ops/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace lockstep {
namespace {

constexpr size_t kMaxRequestHead = 8192;

std::string Response(absl::string_view status, absl::string_view content_type,
                     absl::string_view body, absl::string_view extra = "") {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n", extra, "\r\n", body);
}

std::string PlainResponse(absl::string_view status, absl::string_view text) {
  return Response(status, "text/plain; charset=utf-8", absl::StrCat(text, "\n"));
}

// Milliseconds left until `deadline` for poll(), at least 0.
int MillisLeft(absl::Time deadline) {
  return static_cast<int>(std::clamp<int64_t>(
      absl::ToInt64Milliseconds(deadline - absl::Now()), 0, 60 * 60 * 1000));
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, MillisLeft(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

bool SendAll(int fd, absl::string_view data, absl::Time deadline) {
  while (!data.empty()) {
    if (!WaitFor(fd, POLLOUT, deadline)) return false;
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// A listening socket on host:port; `port` receives the bound port.
absl::StatusOr<int> Listen(const std::string& host, int requested, int* port) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  int family = AF_INET6;
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  if (host.empty() || inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(requested));
    len = sizeof(sockaddr_in6);  // sin6_addr zero: in6addr_any.
  } else if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    family = AF_INET;
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(requested));
    len = sizeof(sockaddr_in);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics host \"", host, "\" is not a numeric IP address"));
  }
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 && family == AF_INET6 && host.empty()) {
    // No IPv6 on this host: every IPv4 interface.
    family = AF_INET;
    addr = sockaddr_storage{};
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(requested));
    v4->sin_addr.s_addr = htonl(INADDR_ANY);
    len = sizeof(sockaddr_in);
    fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  }
  if (fd < 0) return Errno("metrics socket");
  const int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (family == AF_INET6 && host.empty()) {
    // Dual stack: IPv4 clients too.
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(fd, 16) != 0) {
    absl::Status s = Errno(absl::StrCat("cannot listen for metrics on ",
                                        host.empty() ? "*" : host, ":",
                                        requested));
    close(fd);
    return s;
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  *port = ntohs(bound.ss_family == AF_INET6
                    ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                    : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

}  // namespace

std::string HttpResponseFor(absl::string_view request_head,
                            const std::function<std::string()>& body) {
  const size_t eol = request_head.find_first_of("\r\n");
  const std::vector<absl::string_view> parts =
      absl::StrSplit(request_head.substr(0, eol), ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) {
    return PlainResponse("400 Bad Request", "malformed request line");
  }
  if (parts[0] != "GET") {
    return Response("405 Method Not Allowed", "text/plain; charset=utf-8",
                    "only GET\n", "Allow: GET\r\n");
  }
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    return PlainResponse("404 Not Found", "metrics are at /metrics");
  }
  return Response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                  body());
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsHttpOptions& options, const MetricsRegistry* registry) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", options.port, " is outside [0, 65535]"));
  }
  int port = 0;
  absl::StatusOr<int> fd = Listen(options.host, options.port, &port);
  if (!fd.ok()) return fd.status();
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(*fd);
    return Errno("metrics pipe");
  }
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(
      *fd, wake[0], wake[1], port, options.io_timeout,
      std::min(options.io_timeout, options.head_timeout), registry));
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int wake_read,
                                     int wake_write, int port,
                                     absl::Duration io_timeout,
                                     absl::Duration head_timeout,
                                     const MetricsRegistry* registry)
    : listen_fd_(listen_fd),
      wake_read_(wake_read),
      wake_write_(wake_write),
      port_(port),
      io_timeout_(io_timeout),
      head_timeout_(head_timeout),
      registry_(registry) {
  thread_ = std::thread([this]() { Serve(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  const char byte = 0;
  while (write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
}

void MetricsHttpServer::Serve() {
  auto reap = [this](bool all) {
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (all || it->done->load()) {
        it->thread.join();
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  };
  while (true) {
    reap(/*all=*/false);
    // At the cap, only the stop pipe is watched (and finished connections
    // looked for every 50 ms); the kernel's backlog holds new ones.
    const bool full = static_cast<int>(connections_.size()) >= kMaxConnections;
    pollfd fds[2] = {{wake_read_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    const int ready = poll(fds, full ? 1 : 2, full ? 50 : 500);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    if (fds[0].revents != 0) break;
    if (full || (fds[1].revents & POLLIN) == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr,
                           SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors (EMFILE, ENFILE) leaves the connection pending:
      // poll would report it again at once. Back off rather than spin.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        absl::SleepFor(absl::Milliseconds(100));
      }
      continue;
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    try {
      connections_.push_back(Connection{std::thread([this, fd, done]() {
                                          HandleConnection(fd);
                                          close(fd);
                                          done->store(true);
                                        }),
                                        done});
    } catch (const std::system_error&) {
      // No thread to be had (a pids limit): drop this scrape, not the
      // process it reports on.
      close(fd);
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  reap(/*all=*/true);
}

void MetricsHttpServer::HandleConnection(int fd) {
  // The head comes at once from a scraper; an idle connection does not
  // hold a slot for long.
  const absl::Time head_deadline = absl::Now() + head_timeout_;
  const absl::Time deadline = absl::Now() + io_timeout_;
  std::string head;
  std::string response;
  char buffer[1024];
  while (head.find("\r\n\r\n") == std::string::npos &&
         head.find("\n\n") == std::string::npos) {
    if (head.size() > kMaxRequestHead) {
      response = PlainResponse("431 Request Header Fields Too Large",
                               "request head over 8 KiB");
      break;
    }
    if (!WaitFor(fd, POLLIN, head_deadline)) return;  // Too slow: close.
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;
    head.append(buffer, static_cast<size_t>(n));
  }
  if (response.empty()) {
    response = HttpResponseFor(head, [this]() {
      std::lock_guard<std::mutex> lock(render_mu_);
      return registry_->Render();
    });
  }
  if (!SendAll(fd, response, deadline)) return;
  // Half-close and read what the client still sends, briefly, so that
  // closing with unread data does not reset the connection under the
  // response.
  shutdown(fd, SHUT_WR);
  const absl::Time linger =
      std::min(deadline, absl::Now() + absl::Milliseconds(200));
  while (WaitFor(fd, POLLIN, linger)) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;
  }
}

}  // namespace lockstep
