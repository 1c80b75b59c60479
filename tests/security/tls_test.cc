#include "common/security/tls.h"

#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "common/security/tls_flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/security/security_test_util.h"

ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, admin_identities);
ABSL_DECLARE_FLAG(int, tls_refresh_s);

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(TlsTest, LoopbackAddresses) {
  for (const char* a :
       {"127.0.0.1:50051", "127.8.9.10:1", "localhost:80", "LOCALHOST:80",
        "[::1]:50051", "::1", "ipv4:127.0.0.1:5", "dns:///localhost:443",
        "unix:/tmp/sock", "[::ffff:127.0.0.1]:9", "127.0.0.1",
        "ipv4:127.0.0.1:5,127.0.0.2:5", "ipv6:[::1]:5000,[::1]:5001"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a :
       {"0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.1:2222",
        "lockstep-ps-0.lockstep-ps:2222", "128.0.0.1:1", "[::2]:1",
        "dns:///example.com:443", "localhost.evil.com:1", "", "[::1",
        // A list is loopback only when every address in it is.
        "ipv6:[::1]:5000,[2001:db8::1]:5000", "ipv4:127.0.0.1:5,10.0.0.1:5",
        "ipv4:127.0.0.1:5,"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
}

TEST(TlsTest, PlaintextStaysOnLoopbackUnlessInsecure) {
  TlsOptions plain;
  EXPECT_TRUE(MakeServerCredentials(plain, "127.0.0.1:0").ok());
  EXPECT_TRUE(MakeServerCredentials(plain, "[::1]:0").ok());
  absl::Status refused = MakeServerCredentials(plain, "0.0.0.0:2222").status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  // The library names its options as the caller calls them: their field
  // names by default, the flags' names when they came from flags.
  EXPECT_THAT(refused.message(),
              HasSubstr("give cert_file and key_file (and ca_file for mutual "
                        "TLS), listen on loopback, or pass insecure on"));
  plain.names = TlsFlagNames();
  refused = MakeServerCredentials(plain, "0.0.0.0:2222").status();
  EXPECT_THAT(refused.message(),
              HasSubstr("give --tls_cert and --tls_key (and --tls_ca for "
                        "mutual TLS), listen on loopback, or pass --insecure"));
  plain.insecure = true;
  EXPECT_TRUE(MakeServerCredentials(plain, "0.0.0.0:2222").ok());
}

TEST(TlsTest, TokenIsNeverSentInPlaintextOffLoopback) {
  const std::string dir = MakeTempDir();
  TlsOptions o;
  o.token_file = dir + "/token";
  WriteFileOrDie(o.token_file, "abcdefghijklmnopqrstuvwxyz\n");
  EXPECT_TRUE(MakeChannel("127.0.0.1:1", o).ok());
  EXPECT_EQ(MakeChannel("10.1.2.3:2222", o).status().code(),
            absl::StatusCode::kFailedPrecondition);
  o.insecure = true;
  EXPECT_TRUE(MakeChannel("10.1.2.3:2222", o).ok());
}

TEST(TlsTest, TokenFileRules) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/token";
  WriteFileOrDie(path, "0123456789abcdef-secret\r\n");
  absl::StatusOr<std::string> token = ReadTokenFile(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "0123456789abcdef-secret");
  for (const char* bad : {"short-secret", "two words secret here!", "", "\n\n",
                          "0123456789abcdef\x01"}) {
    WriteFileOrDie(path, bad);
    absl::Status s = ReadTokenFile(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), Not(HasSubstr("secret"))) << bad;
  }
  EXPECT_EQ(ReadTokenFile(dir + "/missing").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// gRPC's tracers that log metadata would print the token: with any of them
// on, a token file is refused before it is read.
TEST(TlsTest, TracersThatLogMetadataRefuseATokenFile) {
  // The six the red team saw print the token, the metadata ones, and any
  // tracer not known to be quiet (a name gRPC may add, a glob).
  for (const char* leaky :
       {"http", "all", "api", "flowctl,http", " hpack_parser", "call_error",
        "chttp2_refcount", "tcp", "secure_endpoint", "channel",
        "client_channel_call", "client_channel_lb_call", "retry", "tsi",
        "frobnicate", "*", "timer,tcp,-tcp"}) {
    const absl::Status s = CheckTraceKeepsTokens(leaky);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << leaky;
    EXPECT_THAT(s.message(), HasSubstr("GRPC_TRACE=")) << leaky;
  }
  for (const char* quiet : {"", "flowctl", "-http", "-tcp,-all", "flowctl,-api",
                            "list_tracers", " timer , client_channel"}) {
    EXPECT_TRUE(CheckTraceKeepsTokens(quiet).ok()) << quiet;
  }
  EXPECT_TRUE(CheckTraceKeepsTokens(nullptr).ok());

  const std::string dir = MakeTempDir();
  const std::string path = dir + "/token";
  WriteFileOrDie(path, "0123456789abcdef-secret\n");
  ASSERT_EQ(setenv("GRPC_TRACE", "http", 1), 0);
  const absl::Status refused = ReadTokenFile(path).status();
  ASSERT_EQ(unsetenv("GRPC_TRACE"), 0);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), Not(HasSubstr("secret")));
  EXPECT_TRUE(ReadTokenFile(path).ok());
}

class TlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(MakeCertSet(MakeTempDir(), "a", &certs_).ok());
  }
  CertSet certs_;
};

// A grpc-ring worker takes chunks only from certificates of its own name:
// the worker's and the admin's differ.
TEST_F(TlsFilesTest, ReadsACertificatesCommonName) {
  EXPECT_EQ(CertificateCommonName("cert", certs_.File("worker.pem")).value(),
            "lockstep-worker");
  EXPECT_EQ(CertificateCommonName("cert", certs_.File("admin.pem")).value(),
            "lockstep-admin");
  EXPECT_EQ(
      CertificateCommonName("cert", certs_.File("worker.key")).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(TlsFilesTest, ChecksWhatEachSideNeeds) {
  TlsOptions server;
  server.cert_file = certs_.File("server.pem");
  server.key_file = certs_.File("server.key");
  EXPECT_TRUE(CheckTlsFiles(server, /*server=*/true).ok());
  server.ca_file = certs_.File("ca.pem");
  EXPECT_TRUE(CheckTlsFiles(server, /*server=*/true).ok());
  EXPECT_TRUE(MakeServerCredentials(server, "0.0.0.0:0").ok());

  TlsOptions mismatched = server;
  mismatched.key_file = certs_.File("worker.key");
  absl::Status s = CheckTlsFiles(mismatched, true);
  EXPECT_THAT(s.message(), HasSubstr("does not match the certificate"));
  EXPECT_THAT(s.message(), HasSubstr("key_file=" + mismatched.key_file));
  mismatched.names = TlsFlagNames();
  s = CheckTlsFiles(mismatched, true);
  EXPECT_THAT(s.message(), HasSubstr("--tls_key=" + mismatched.key_file));

  TlsOptions half = server;
  half.key_file.clear();
  EXPECT_THAT(CheckTlsFiles(half, true).message(), HasSubstr("go together"));

  TlsOptions ca_only;
  ca_only.ca_file = certs_.File("ca.pem");
  EXPECT_FALSE(CheckTlsFiles(ca_only, /*server=*/true).ok());
  EXPECT_TRUE(CheckTlsFiles(ca_only, /*server=*/false).ok());

  TlsOptions client_without_ca = certs_.Client("worker");
  client_without_ca.ca_file.clear();
  EXPECT_THAT(CheckTlsFiles(client_without_ca, false).message(),
              HasSubstr("a client with cert_file needs ca_file"));

  TlsOptions not_pem = certs_.Client("worker");
  not_pem.ca_file = certs_.File("worker.key");
  EXPECT_THAT(CheckTlsFiles(not_pem, false).message(),
              HasSubstr("holds no PEM certificate"));
  // A key's contents never end up in a message.
  EXPECT_THAT(CheckTlsFiles(not_pem, false).message(),
              Not(HasSubstr("PRIVATE KEY")));

  TlsOptions missing = certs_.Client("worker");
  missing.cert_file = certs_.File("nope.pem");
  EXPECT_THAT(CheckTlsFiles(missing, false).message(),
              HasSubstr("cannot open"));
}

TEST(TlsFlagsTest, FlagsBecomeOptions) {
  absl::FlagSaver saver;
  absl::StatusOr<TlsOptions> defaults = TlsOptionsFromFlags();
  ASSERT_TRUE(defaults.ok());
  EXPECT_FALSE(defaults->ServerTls());
  EXPECT_FALSE(defaults->ClientTls());
  EXPECT_FALSE(defaults->insecure);
  absl::SetFlag(&FLAGS_tls_ca, "/etc/ca.pem");
  absl::SetFlag(&FLAGS_admin_identities, " ops , lockstep-admin,,");
  absl::SetFlag(&FLAGS_tls_refresh_s, 2);
  absl::StatusOr<TlsOptions> o = TlsOptionsFromFlags();
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->ClientTls());
  EXPECT_THAT(o->admin_identities, ElementsAre("ops", "lockstep-admin"));
  EXPECT_EQ(o->refresh_interval, absl::Seconds(2));
  absl::SetFlag(&FLAGS_tls_refresh_s, 0);
  EXPECT_FALSE(TlsOptionsFromFlags().ok());
}

TEST(TlsTest, DescribesSecurityWithoutSecrets) {
  TlsOptions o;
  EXPECT_EQ(DescribeServerSecurity(o), "plaintext");
  o.cert_file = "c";
  o.key_file = "k";
  EXPECT_EQ(DescribeServerSecurity(o), "TLS");
  o.ca_file = "ca";
  o.token_file = "/run/secrets/token";
  EXPECT_EQ(DescribeServerSecurity(o), "mutual TLS, bearer token");
}

}  // namespace
}  // namespace lockstep
