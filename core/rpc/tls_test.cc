#include "core/rpc/tls.h"

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/rpc/local_ca.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pdserve/v1/router.grpc.pb.h"
#include "tests/support/scratch_dir.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

class TlsTest : public ::testing::Test {
 protected:
  // A failed set-up fails every test (in SetUp): an assertion failing in SetUpTestSuite makes
  // gtest skip the tests, and ctest then counts them as skipped, not failed.
  static void SetUpTestSuite() {
    scratch_ = new ScratchDir("tls_test");
    dir_ = new std::string(*scratch_ / "ca");
    other_ = new std::string(*scratch_ / "other");
    absl::Status written = WriteLocalCa(*dir_);
    if (written.ok()) written = WriteLocalCa(*other_);
    set_up_ = new absl::Status(written);
  }
  static void TearDownTestSuite() {
    delete set_up_;
    delete other_;
    delete dir_;
    delete scratch_;
  }
  void SetUp() override { ASSERT_TRUE(set_up_->ok()) << *set_up_; }
  static std::shared_ptr<const Tls> Load(ComponentRole role) {
    absl::StatusOr<std::shared_ptr<const Tls>> tls = Tls::Load(LocalCaFiles(*dir_, role), role);
    EXPECT_TRUE(tls.ok()) << tls.status();
    return tls.ok() ? *tls : Tls::Insecure();
  }
  static ScratchDir* scratch_;
  static std::string* dir_;
  static std::string* other_;
  static absl::Status* set_up_;
};
ScratchDir* TlsTest::scratch_ = nullptr;
std::string* TlsTest::dir_ = nullptr;
std::string* TlsTest::other_ = nullptr;
absl::Status* TlsTest::set_up_ = nullptr;

TEST_F(TlsTest, EveryRoleLoadsWithItsOwnCertificate) {
  for (ComponentRole role : kComponentRoles) {
    std::shared_ptr<const Tls> tls = Load(role);
    EXPECT_TRUE(tls->enabled());
    EXPECT_EQ(tls->role(), role);
    EXPECT_EQ(ParseComponentRole(ComponentRoleName(role)), role);
  }
  EXPECT_FALSE(Tls::Insecure()->enabled());
  EXPECT_EQ(ParseComponentRole("admin"), std::nullopt);
}

TEST_F(TlsTest, RefusesMismatchedFilesNamingTheFlag) {
  TlsFiles files = LocalCaFiles(*dir_, ComponentRole::kPrefill);
  auto wrong_role = Tls::Load(files, ComponentRole::kDecode);
  ASSERT_FALSE(wrong_role.ok());
  EXPECT_THAT(wrong_role.status().message(), HasSubstr("of 'prefill', not of a decode"));

  TlsFiles other_key = files;
  other_key.key = LocalCaFiles(*dir_, ComponentRole::kDecode).key;
  auto mismatched = Tls::Load(other_key);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_THAT(mismatched.status().message(), HasSubstr("--tls-key"));
  EXPECT_THAT(mismatched.status().message(), HasSubstr("is not the key of --tls-cert"));

  TlsFiles foreign = LocalCaFiles(*other_, ComponentRole::kPrefill);
  foreign.ca = files.ca;
  auto unsigned_cert = Tls::Load(foreign);
  ASSERT_FALSE(unsigned_cert.ok());
  EXPECT_THAT(unsigned_cert.status().message(), HasSubstr("does not verify under --tls-ca"));

  TlsFiles missing = files;
  missing.cert += ".missing";
  EXPECT_THAT(Tls::Load(missing).status().message(), HasSubstr("--tls-cert"));
  TlsFiles not_pem = files;
  not_pem.ca = files.key;
  EXPECT_THAT(Tls::Load(not_pem).status().message(), HasSubstr("holds no PEM certificate"));
  EXPECT_THAT(Tls::Load({files.cert, "", files.ca}).status().message(), HasSubstr("come together"));
  EXPECT_THAT(Tls::Load({files.cert, files.key, ""}).status().message(), HasSubstr("--tls-ca"));
  EXPECT_THAT(Tls::Load({"", "", files.ca}, ComponentRole::kRouter).status().message(),
              HasSubstr("needs --tls-cert"));
  EXPECT_TRUE(Tls::Load({"", "", files.ca}).ok());  // a client that only verifies servers
  EXPECT_EQ(WriteLocalCa(*dir_).code(), absl::StatusCode::kInvalidArgument);  // exists
}

// ListWorkers that only an operator may call.
class OperatorOnly final : public v1::Router::Service {
 public:
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest*,
                           v1::ListWorkersReply*) override {
    return RequirePeerRole(*context, {ComponentRole::kOperator});
  }
};

class Server {
 public:
  // Listens on `host` (a loopback address).
  explicit Server(const Tls& tls, const std::string& host = "127.0.0.1") : host_(host) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat(host, ":0"), tls.ServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~Server() { server_->Shutdown(); }
  // Calls over loopback; `server_name` (when set) is the name the server's certificate must hold
  // instead of its address (no DNS lookup).
  grpc::Status Call(const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                    const std::string& server_name = "") {
    grpc::ChannelArguments args;
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
    auto stub = v1::Router::NewStub(
        grpc::CreateCustomChannel(absl::StrCat(host_, ":", port_), credentials, args));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ListWorkersReply reply;
    return stub->ListWorkers(&context, v1::ListWorkersRequest(), &reply);
  }

 private:
  OperatorOnly service_;
  std::string host_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(TlsTest, InternalRpcsTakeOnlyTheirRoles) {
  Server server(*Load(ComponentRole::kRouter));
  EXPECT_TRUE(server.Call(Load(ComponentRole::kOperator)->ChannelCredentials()).ok());
  EXPECT_TRUE(server.Call(Load(ComponentRole::kOperator)->ChannelCredentials(), "localhost").ok());
  EXPECT_EQ(
      server.Call(Load(ComponentRole::kOperator)->ChannelCredentials(), "example.com").error_code(),
      grpc::StatusCode::UNAVAILABLE);  // a name the certificate does not hold

  grpc::Status prefill = server.Call(Load(ComponentRole::kPrefill)->ChannelCredentials());
  EXPECT_EQ(prefill.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(prefill.error_message(), HasSubstr("of 'prefill'"));

  auto ca_only = Tls::Load({"", "", LocalCaFiles(*dir_, ComponentRole::kRouter).ca});
  ASSERT_TRUE(ca_only.ok());
  EXPECT_EQ(server.Call((*ca_only)->ChannelCredentials()).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  // No TLS, or a certificate of another CA: no connection at all.
  EXPECT_EQ(server.Call(grpc::InsecureChannelCredentials()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  auto foreign = Tls::Load(LocalCaFiles(*other_, ComponentRole::kOperator));
  ASSERT_TRUE(foreign.ok());
  EXPECT_EQ(server.Call((*foreign)->ChannelCredentials()).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// Components reach each other by pod or node IP, which no certificate of a role can list: internal
// channels verify the peer's role name (ComponentServerName) instead of the address they dial.
TEST_F(TlsTest, PeersAreVerifiedByRoleNotByTheAddressTheyDial) {
  Server server(*Load(ComponentRole::kDecode), "127.0.0.2");  // an address no certificate names
  const auto credentials = Load(ComponentRole::kOperator)->ChannelCredentials();
  EXPECT_EQ(server.Call(credentials).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(server.Call(credentials, ComponentServerName(ComponentRole::kDecode)).ok());
  EXPECT_EQ(server.Call(credentials, ComponentServerName(ComponentRole::kKvStore)).error_code(),
            grpc::StatusCode::UNAVAILABLE);  // a decode worker is not a KV store
}

// Certificates from another CA (cert-manager, an operator's own) must carry the role's name.
TEST_F(TlsTest, AServingRolesCertificateMustNameItsRole) {
  if (std::system("command -v openssl >/dev/null") != 0) GTEST_SKIP() << "no openssl command";
  const ScratchDir scratch("tls_test_own");
  const std::string dir = scratch.path().string();
  std::ofstream(dir + "/make.sh") << R"(set -e
k="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
openssl req -x509 $k -keyout ca-key.pem -out ca.pem -subj /CN=own-ca -days 1
echo "subjectAltName=DNS:localhost" > bare.ext
echo "subjectAltName=DNS:localhost,DNS:decode.pdserve.internal" > named.ext
for n in bare named; do
  openssl req $k -keyout $n-key.pem -out $n.csr -subj /CN=decode
  openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 1 \
    -extfile $n.ext -out $n.pem
done
)";
  ASSERT_EQ(std::system(absl::StrCat("cd ", dir, " && bash make.sh >/dev/null 2>&1").c_str()), 0);
  const auto files = [&](const std::string& n) {
    return TlsFiles{absl::StrCat(dir, "/", n, ".pem"), absl::StrCat(dir, "/", n, "-key.pem"),
                    absl::StrCat(dir, "/ca.pem")};
  };
  EXPECT_TRUE(Tls::Load(files("named"), ComponentRole::kDecode).ok());
  auto bare = Tls::Load(files("bare"), ComponentRole::kDecode);
  ASSERT_FALSE(bare.ok());
  EXPECT_THAT(bare.status().message(), HasSubstr("does not name decode.pdserve.internal"));
  EXPECT_TRUE(Tls::Load(files("bare")).ok());  // as a client it proves only its role
}

TEST_F(TlsTest, APlaintextServerChecksNoRole) {
  Server server(*Tls::Insecure());
  EXPECT_TRUE(server.Call(grpc::InsecureChannelCredentials()).ok());
}

}  // namespace
}  // namespace pdserve
