// The server-only flags of common/security/tls_flags.h (--admin_identities,
// --worker_identities), in a file of their own so that --help lists them
// for lockstep_server alone (common/flags/flags.h: help files).
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, admin_identities, "",
          "Servers with mutual TLS: comma-separated client certificate "
          "names (CN or any SAN) with the admin role (SaveCheckpoint, "
          "GetStatus).");
ABSL_FLAG(std::string, worker_identities, "",
          "Servers with mutual TLS: comma-separated client certificate "
          "names with the worker role. Empty: every client the CA verifies "
          "that is not an admin.");
