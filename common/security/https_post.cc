#include "common/security/https_post.h"

#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace lockstep {
namespace {

struct Url {
  std::string host;  // Without brackets.
  std::string port = "443";
  std::string path = "/";
};

absl::StatusOr<Url> ParseUrl(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an https:// URL: \"", url, "\""));
  }
  Url out;
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  if (slash != absl::string_view::npos)
    out.path = std::string(rest.substr(slash));
  size_t colon = authority.rfind(':');
  if (absl::StartsWith(authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad host in \"", url, "\""));
    }
    out.host = std::string(authority.substr(1, close - 1));
    colon = authority.find(':', close);
  } else {
    out.host = std::string(authority.substr(0, colon));
  }
  if (colon != absl::string_view::npos) {
    out.port = std::string(authority.substr(colon + 1));
  }
  int port = 0;
  if (out.host.empty() || !absl::SimpleAtoi(out.port, &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad host or port in \"", url, "\""));
  }
  return out;
}

std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "no detail";
  char text[256];
  ERR_error_string_n(e, text, sizeof(text));
  return text;
}

// A TCP connection to url's host, with `timeout` on connect, send, receive.
absl::StatusOr<int> Connect(const Url& url, absl::Duration timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &found);
      e != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", url.host, ": ", gai_strerror(e)));
  }
  absl::Cleanup free_found = [found] { freeaddrinfo(found); };
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(absl::ToInt64Seconds(timeout));
  tv.tv_usec = static_cast<suseconds_t>(
      absl::ToInt64Microseconds(timeout - absl::Seconds(tv.tv_sec)));
  std::string last = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    // Linux bounds a blocking connect by the send timeout.
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
    last = std::strerror(errno);
    close(fd);
  }
  return absl::UnavailableError(
      absl::StrCat("cannot connect to ", url.host, ":", url.port, ": ", last));
}

}  // namespace

absl::StatusOr<int> HttpsPost(const HttpsPostRequest& request) {
  absl::StatusOr<Url> url = ParseUrl(request.url);
  if (!url.ok()) return url.status();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(
      SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new failed");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  const int loaded = request.ca_file.empty()
                         ? SSL_CTX_set_default_verify_paths(ctx.get())
                         : SSL_CTX_load_verify_locations(
                               ctx.get(), request.ca_file.c_str(), nullptr);
  if (loaded != 1) {
    return absl::UnavailableError(absl::StrCat(
        "cannot load the CA file ", request.ca_file, ": ", OpenSslError()));
  }
  absl::StatusOr<int> fd = Connect(*url, request.timeout);
  if (!fd.ok()) return fd.status();
  absl::Cleanup close_fd = [fd = *fd] { close(fd); };
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  if (ssl == nullptr) return absl::InternalError("SSL_new failed");
  SSL_set_fd(ssl.get(), *fd);
  // The certificate must name the host: an IP address, or a DNS name (which
  // also goes out as SNI).
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
  if (X509_VERIFY_PARAM_set1_ip_asc(param, url->host.c_str()) != 1) {
    SSL_set_tlsext_host_name(ssl.get(), url->host.c_str());
    X509_VERIFY_PARAM_set1_host(param, url->host.c_str(), 0);
  }
  if (SSL_connect(ssl.get()) != 1) {
    const long verify = SSL_get_verify_result(ssl.get());
    return absl::UnavailableError(absl::StrCat(
        "TLS handshake with ", url->host, ":", url->port, " failed: ",
        verify != X509_V_OK ? X509_verify_cert_error_string(verify)
                            : OpenSslError()));
  }
  std::string message =
      absl::StrCat("POST ", url->path, " HTTP/1.1\r\nHost: ", url->host, ":",
                   url->port, "\r\nContent-Type: application/json\r\n");
  if (!request.bearer_token.empty()) {
    absl::StrAppend(&message, "Authorization: Bearer ", request.bearer_token,
                    "\r\n");
  }
  absl::StrAppend(&message, "Content-Length: ", request.body.size(),
                  "\r\nConnection: close\r\n\r\n", request.body);
  if (SSL_write(ssl.get(), message.data(), static_cast<int>(message.size())) !=
      static_cast<int>(message.size())) {
    return absl::UnavailableError(
        absl::StrCat("cannot send to ", url->host, ": ", OpenSslError()));
  }
  // The status line is all that is read: "HTTP/1.1 200 OK".
  std::string answer;
  char buffer[512];
  while (answer.find("\r\n") == std::string::npos && answer.size() < 4096) {
    const int n = SSL_read(ssl.get(), buffer, sizeof(buffer));
    if (n <= 0) break;
    answer.append(buffer, n);
  }
  int code = 0;
  if (!absl::StartsWith(answer, "HTTP/1.") || answer.size() < 12 ||
      !absl::SimpleAtoi(answer.substr(9, 3), &code)) {
    return absl::UnavailableError(absl::StrCat(
        url->host, ":", url->port, " answered no HTTP status line"));
  }
  SSL_shutdown(ssl.get());
  return code;
}

}  // namespace lockstep
