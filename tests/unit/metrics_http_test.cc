#include "common/ops/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Body() { return "up 1\n"; }

TEST(HttpResponseTest, ServesMetricsOnlyOnGetMetrics) {
  EXPECT_EQ(HttpResponseFor("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Body),
            "HTTP/1.1 200 OK\r\n"
            "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            "Content-Length: 5\r\n"
            "Connection: close\r\n\r\n"
            "up 1\n");
  EXPECT_THAT(HttpResponseFor("GET /metrics?x=1 HTTP/1.0\r\n\r\n", Body),
              StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(HttpResponseFor("GET / HTTP/1.1\r\n\r\n", Body),
              StartsWith("HTTP/1.1 404 Not Found\r\n"));
  const std::string post = HttpResponseFor("POST /metrics HTTP/1.1\r\n\r\n", Body);
  EXPECT_THAT(post, StartsWith("HTTP/1.1 405 Method Not Allowed\r\n"));
  EXPECT_THAT(post, HasSubstr("Allow: GET\r\n"));
  EXPECT_THAT(HttpResponseFor("garbage\r\n\r\n", Body),
              StartsWith("HTTP/1.1 400 Bad Request\r\n"));
  EXPECT_THAT(HttpResponseFor("GET /metrics SPDY/3\r\n\r\n", Body),
              StartsWith("HTTP/1.1 400 Bad Request\r\n"));
}

// Connects to 127.0.0.1:port, sends `request`, returns all it reads.
std::string Exchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    if (!request.empty()) {
      (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    }
    char buffer[4096];
    ssize_t n;
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
      response.append(buffer, static_cast<size_t>(n));
    }
  }
  close(fd);
  return response;
}

TEST(MetricsHttpServerTest, AnswersScrapesOverLoopback) {
  MetricsRegistry registry;
  Counter* scrapes = registry.GetCounter("scrapes_total", "Scrapes.");
  registry.AddCollector([scrapes]() { scrapes->Increment(); });
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(MetricsHttpOptions(), &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  std::string first = Exchange(port, "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_THAT(first, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(first, HasSubstr("\r\n\r\n# HELP scrapes_total Scrapes.\n"));
  EXPECT_THAT(first, HasSubstr("scrapes_total 1\n"));
  EXPECT_THAT(Exchange(port, "GET /metrics HTTP/1.1\r\n\r\n"),
              HasSubstr("scrapes_total 2\n"));
  EXPECT_THAT(Exchange(port, "GET /nothing HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 404"));
}

TEST(MetricsHttpServerTest, BoundsRequestsInSizeAndTime) {
  MetricsRegistry registry;
  MetricsHttpOptions options;
  options.io_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(options, &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  EXPECT_THAT(Exchange(port, "GET /metrics HTTP/1.1\r\nX: " +
                                 std::string(20000, 'a')),
              StartsWith("HTTP/1.1 431"));
  // A client that never finishes its request is dropped after io_timeout;
  // the next one is served.
  const absl::Time start = absl::Now();
  EXPECT_EQ(Exchange(port, "GET /metr"), "");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_THAT(Exchange(port, "GET /metrics HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 200"));
}

// Connections that send nothing do not hold a scrape back: it is answered
// while they are still open (served one at a time, the scrape would wait
// out each one's timeout, and find them closed by then).
TEST(MetricsHttpServerTest, IdleConnectionsDoNotHoldAScrapeBack) {
  MetricsRegistry registry;
  registry.GetCounter("up_total", "Up.");
  MetricsHttpOptions options;
  // Longer than this test takes on any box: the idle ones stay open.
  options.io_timeout = absl::Seconds(30);
  options.head_timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(options, &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(socket(AF_INET, SOCK_STREAM, 0));
    ASSERT_EQ(
        connect(idle.back(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
        0);
  }
  EXPECT_THAT(Exchange((*server)->port(), "GET /metrics HTTP/1.1\r\n\r\n"),
              HasSubstr("up_total 0\n"));
  for (int fd : idle) {
    char byte;
    EXPECT_EQ(recv(fd, &byte, 1, MSG_DONTWAIT), -1) << "closed already";
    EXPECT_EQ(errno, EAGAIN);
    close(fd);
  }
}

TEST(MetricsHttpServerTest, RefusesBadPortsAndBusyOnes) {
  MetricsRegistry registry;
  MetricsHttpOptions options;
  options.port = 70000;
  EXPECT_EQ(MetricsHttpServer::Start(options, &registry).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.port = 0;
  options.host = "not-an-ip";
  EXPECT_EQ(MetricsHttpServer::Start(options, &registry).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.host = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> first =
      MetricsHttpServer::Start(options, &registry);
  ASSERT_TRUE(first.ok());
  options.port = (*first)->port();
  EXPECT_EQ(MetricsHttpServer::Start(options, &registry).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace lockstep
