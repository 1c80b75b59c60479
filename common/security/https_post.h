// One HTTPS POST of a JSON body, for the status endpoints a training job
// reports to (Kubeflow Trainer's TrainJob status, worker/app/trainer_status.h):
// TLS 1.2 or newer with the server's certificate checked against a CA file
// and the URL's host name, a bearer token, a timeout on every step.
#ifndef LOCKSTEP_COMMON_SECURITY_HTTPS_POST_H_
#define LOCKSTEP_COMMON_SECURITY_HTTPS_POST_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep {

struct HttpsPostRequest {
  std::string url;           // https://HOST[:PORT]/PATH; HOST may be [IPv6].
  std::string ca_file;       // PEM; empty: the system's CAs.
  std::string bearer_token;  // Empty: no Authorization header.
  std::string body;          // Sent as application/json.
  absl::Duration timeout = absl::Seconds(10);  // Connect, write, read each.
};

// The HTTP status code the server answered with. INVALID_ARGUMENT for a
// URL that is not https://; UNAVAILABLE when the server cannot be reached,
// the TLS handshake fails (a certificate not trusted or not for HOST) or
// the answer is not HTTP.
absl::StatusOr<int> HttpsPost(const HttpsPostRequest& request);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_SECURITY_HTTPS_POST_H_
