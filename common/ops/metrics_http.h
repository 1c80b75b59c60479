// A minimal HTTP/1.1 endpoint for Prometheus scrapes.
//
// MetricsHttpServer owns a listening socket, an accepting thread and a
// thread per connection being served. `GET /metrics`
// (a query string is ignored) is answered with the registry's text
// exposition; any other path gets 404 and any other method 405. Up to
// kMaxConnections connections are served at once, each on its own thread,
// and closed after its answer (`Connection: close`); a request head must
// arrive within min(io_timeout, head_timeout: 1 s) and be at most 8 KiB
// (431 otherwise),
// so idle or slow clients cannot hold a scrape back for long. No TLS and no
// authentication: keep the port on a trusted network (docs/kubernetes.md's
// NetworkPolicy lets only admin pods reach it).
//
// Thread-safe; the destructor stops the thread and closes the socket.
#ifndef LOCKSTEP_COMMON_OPS_METRICS_HTTP_H_
#define LOCKSTEP_COMMON_OPS_METRICS_HTTP_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/ops/metrics.h"

namespace lockstep {

struct MetricsHttpOptions {
  // A numeric IPv4 or IPv6 address; empty: every interface (IPv6 and IPv4
  // where the host has IPv6, else IPv4).
  std::string host;
  int port = 0;  // 0: the kernel picks one (see port()).
  absl::Duration io_timeout = absl::Seconds(5);
  // A request head must arrive within min(io_timeout, head_timeout).
  absl::Duration head_timeout = absl::Seconds(1);
};

class MetricsHttpServer final {
 public:
  // `registry` is not owned and must outlive the server. UNAVAILABLE when
  // the port cannot be bound, INVALID_ARGUMENT for a bad host or port.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const MetricsHttpOptions& options, const MetricsRegistry* registry);
  ~MetricsHttpServer();

  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port.
  int port() const { return port_; }

  static constexpr int kMaxConnections = 8;

 private:
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  MetricsHttpServer(int listen_fd, int wake_read, int wake_write, int port,
                    absl::Duration io_timeout, absl::Duration head_timeout,
                    const MetricsRegistry* registry);
  void Serve();
  void HandleConnection(int fd);

  const int listen_fd_;
  const int wake_read_;   // The destructor writes to wake_write_ to stop.
  const int wake_write_;
  const int port_;
  const absl::Duration io_timeout_;
  const absl::Duration head_timeout_;
  const MetricsRegistry* const registry_;  // Not owned.
  std::mutex render_mu_;                 // Collectors run one scrape at a time.
  std::vector<Connection> connections_;  // Serve's thread only.
  std::thread thread_;
};

// Parses an HTTP request head ("GET /metrics HTTP/1.1\r\n...") and returns
// the whole response to send: status line, headers and body. `body` is
// called only for a scrape of /metrics. Exposed for tests.
std::string HttpResponseFor(absl::string_view request_head,
                            const std::function<std::string()>& body);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPS_METRICS_HTTP_H_
