// The transport-security flags every Lockstep binary takes, defined once:
//   --tls_cert, --tls_key, --tls_ca, --tls_server_name, --tls_refresh_s,
//   --token_file, --admin_identities, --worker_identities, --insecure.
// A binary gets them by linking lockstep::common_tls_flags and calling
// TlsOptionsFromFlags() after absl::ParseCommandLine. docs/security.md
// describes them.
#ifndef LOCKSTEP_COMMON_SECURITY_TLS_FLAGS_H_
#define LOCKSTEP_COMMON_SECURITY_TLS_FLAGS_H_

#include "absl/status/statusor.h"
#include "common/security/tls_options.h"

namespace lockstep {

// The flags' values as options. INVALID_ARGUMENT for a refresh interval
// outside [1, 86400] s. Reads no file (MakeServerCredentials, MakeChannel
// and Authorizer::Create check them).
absl::StatusOr<TlsOptions> TlsOptionsFromFlags();
// The flags' names for TlsOptions::names ("--tls_cert", ...), which
// TlsOptionsFromFlags sets: errors then name the flags the user typed.
TlsOptionNames TlsFlagNames();

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_SECURITY_TLS_FLAGS_H_
