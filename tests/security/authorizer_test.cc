#include "common/security/authorizer.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/security/security_test_util.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kToken[] = "s3cret-token-0123456789";

TlsOptions MutualTls() {
  TlsOptions o;
  // Create reads none of these; they only say "mutual TLS".
  o.cert_file = "server.pem";
  o.key_file = "server.key";
  o.ca_file = "ca.pem";
  o.admin_identities = {"lockstep-admin"};
  return o;
}

Caller WithCertificate(std::vector<std::string> identities) {
  Caller c;
  c.verified_certificate = true;
  c.identities = std::move(identities);
  return c;
}

std::unique_ptr<Authorizer> Make(const TlsOptions& options) {
  absl::StatusOr<std::unique_ptr<Authorizer>> a = Authorizer::Create(options);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *std::move(a) : nullptr;
}

TEST(AuthorizerTest, WithoutCertificatesOrTokenEveryoneMayDoEverything) {
  std::unique_ptr<Authorizer> a = Make(TlsOptions());
  for (Access access : {Access::kWorker, Access::kRead, Access::kAdmin}) {
    EXPECT_TRUE(a->Check(Caller(), access, "Rpc").ok());
  }
}

TEST(AuthorizerTest, MutualTlsMapsIdentitiesToRoles) {
  std::unique_ptr<Authorizer> a = Make(MutualTls());
  const Caller worker = WithCertificate({"lockstep-worker", "localhost"});
  EXPECT_TRUE(a->Check(worker, Access::kWorker, "Push").ok());
  EXPECT_TRUE(a->Check(worker, Access::kRead, "GetStatus").ok());
  absl::Status denied = a->Check(worker, Access::kAdmin, "SaveCheckpoint");
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("SaveCheckpoint needs the admin"));
  EXPECT_THAT(denied.message(), HasSubstr("\"lockstep-worker\" is a worker"));

  // An admin named by a SAN rather than the CN; admins do not push.
  const Caller admin = WithCertificate({"ops", "lockstep-admin"});
  EXPECT_TRUE(a->Check(admin, Access::kAdmin, "SaveCheckpoint").ok());
  EXPECT_TRUE(a->Check(admin, Access::kRead, "GetStatus").ok());
  EXPECT_EQ(a->Check(admin, Access::kWorker, "Push").code(),
            absl::StatusCode::kPermissionDenied);

  EXPECT_EQ(a->Check(Caller(), Access::kRead, "GetStatus").code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(AuthorizerTest, WorkerIdentitiesLimitTheWorkers) {
  TlsOptions o = MutualTls();
  o.worker_identities = {"worker-a"};
  std::unique_ptr<Authorizer> a = Make(o);
  EXPECT_TRUE(
      a->Check(WithCertificate({"worker-a"}), Access::kWorker, "Push").ok());
  absl::Status s =
      a->Check(WithCertificate({"worker-b"}), Access::kRead, "GetStatus");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("neither a worker nor an admin"));
}

TEST(AuthorizerTest, IdentityListsNeedMutualTls) {
  TlsOptions o;
  o.admin_identities = {"lockstep-admin"};
  EXPECT_EQ(Authorizer::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AuthorizerTest, TokenIsCheckedFirstAndNeverEchoed) {
  const std::string dir = MakeTempDir();
  TlsOptions o = MutualTls();
  o.token_file = dir + "/token";
  WriteFileOrDie(o.token_file, std::string(kToken) + "\n");
  std::unique_ptr<Authorizer> a = Make(o);
  Caller admin = WithCertificate({"lockstep-admin"});

  absl::Status missing = a->Check(admin, Access::kAdmin, "SaveCheckpoint");
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(missing.message(), HasSubstr("missing bearer token"));

  const std::string wrong = "Bearer s3cret-token-0123456780";
  admin.authorization = wrong;
  absl::Status bad = a->Check(admin, Access::kAdmin, "SaveCheckpoint");
  EXPECT_EQ(bad.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(bad.message(), HasSubstr("wrong bearer token"));
  EXPECT_THAT(bad.message(), Not(HasSubstr("s3cret")));

  const std::string prefix_only = "Bearer s3cret";
  admin.authorization = prefix_only;
  EXPECT_EQ(a->Check(admin, Access::kAdmin, "X").code(),
            absl::StatusCode::kUnauthenticated);

  const std::string right = std::string("Bearer ") + kToken;
  admin.authorization = right;
  EXPECT_TRUE(a->Check(admin, Access::kAdmin, "SaveCheckpoint").ok());
  // The right token does not lift the role check.
  EXPECT_EQ(a->Check(admin, Access::kWorker, "Push").code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(AuthorizerTest, TokenWithoutCertificatesGrantsBothRoles) {
  const std::string dir = MakeTempDir();
  TlsOptions o;
  o.token_file = dir + "/token";
  WriteFileOrDie(o.token_file, kToken);
  std::unique_ptr<Authorizer> a = Make(o);
  Caller caller;
  const std::string right = std::string("Bearer ") + kToken;
  caller.authorization = right;
  EXPECT_TRUE(a->Check(caller, Access::kWorker, "Push").ok());
  EXPECT_TRUE(a->Check(caller, Access::kAdmin, "SaveCheckpoint").ok());
  caller.authorization = kToken;  // Without the scheme.
  EXPECT_EQ(a->Check(caller, Access::kWorker, "Push").code(),
            absl::StatusCode::kUnauthenticated);
}

}  // namespace
}  // namespace lockstep
