// TLS and component identities on a real `pdserve up` cluster with its throwaway CA: requests are
// served over TLS end to end; a plaintext client reaches no port; every internal RPC refuses a
// caller without a client certificate (UNAUTHENTICATED) and one of another role
// (PERMISSION_DENIED), including a worker registering as a role its certificate does not name;
// health checks stay open to anyone who verifies the server; HTTP is HTTPS.
#include "core/rpc/tls.h"

#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/pdserve_client.h"
#include "core/rpc/local_ca.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/decode.grpc.pb.h"
#include "pdserve/v1/kvstore.grpc.pb.h"
#include "pdserve/v1/prefill.grpc.pb.h"
#include "pdserve/v1/router.grpc.pb.h"
#include "tests/integration/cluster.h"

namespace pdserve::integration {
namespace {

using ::testing::HasSubstr;

class TlsClusterTest : public ::testing::Test {
 protected:
  // A failed start fails every test (in SetUp): an assertion failing in SetUpTestSuite makes
  // gtest skip the tests, and ctest then counts them as skipped, not failed.
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<Cluster>> cluster =
        Cluster::Start({}, absl::Seconds(120), /*tls=*/true);
    if (!cluster.ok()) {
      start_error_ = new std::string(cluster.status().ToString());
      return;
    }
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    ASSERT_NE(cluster_, nullptr);
  }

  static std::string Address(const std::string& process) {
    const Cluster::Process* found = cluster_->Find(process);
    EXPECT_NE(found, nullptr) << process;
    return found == nullptr ? "" : found->address;
  }
  static std::shared_ptr<grpc::Channel> Channel(const std::string& process,
                                                std::optional<ComponentRole> role) {
    return grpc::CreateChannel(Address(process), cluster_->Credentials(role));
  }
  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return context;
  }
  // `call` as a caller without a certificate, then as each role but `allowed`: refused each time.
  static void ExpectOnly(
      const std::string& process, std::initializer_list<ComponentRole> allowed,
      const std::function<grpc::Status(const std::shared_ptr<grpc::Channel>&)>& call) {
    const grpc::Status anonymous = call(Channel(process, std::nullopt));
    EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << process << ": " << anonymous.error_message();
    for (ComponentRole role : kComponentRoles) {
      if (std::find(allowed.begin(), allowed.end(), role) != allowed.end()) continue;
      const grpc::Status refused = call(Channel(process, role));
      EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED)
          << process << " called as " << ComponentRoleName(role) << ": " << refused.error_message();
      EXPECT_THAT(refused.error_message(), HasSubstr(ComponentRoleName(role)));
    }
  }

  static Cluster* cluster_;
  static std::string* start_error_;
};
Cluster* TlsClusterTest::cluster_ = nullptr;
std::string* TlsClusterTest::start_error_ = nullptr;

TEST_F(TlsClusterTest, AClientThatVerifiesTheClusterIsServed) {
  ClientOptions options;
  options.tls = LocalCaFiles(cluster_->tls_dir(), ComponentRole::kOperator);
  options.tls.cert = options.tls.key = "";  // public clients present no certificate
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(cluster_->router_address(), options);
  ASSERT_TRUE(client.ok()) << client.status();
  CallOptions call;
  call.timeout = absl::Seconds(60);
  absl::StatusOr<GenerateResult> result =
      (*client)->Generate(TextRequest("Once upon a time", 8), call);
  ASSERT_TRUE(result.ok()) << result.status() << "\n" << cluster_->LogTail();
  EXPECT_EQ(result->token_ids.size(), 8u);
}

// `pdserve loadgen` over gRPC and over HTTPS (the OpenAI API) with --tls-ca: every request served.
TEST_F(TlsClusterTest, LoadgenDrivesTheClusterOverTls) {
  const std::string ca = LocalCaFiles(cluster_->tls_dir(), ComponentRole::kRouter).ca;
  const std::string json = absl::StrCat(::testing::TempDir(), "/tls_loadgen_", getpid(), ".json");
  for (const std::string& target :
       {absl::StrCat("--router=", cluster_->router_address()),
        absl::StrCat("--protocol=http --url=https://", cluster_->router_http_address())}) {
    const std::string command = absl::StrCat(
        PdserveBinary(), " loadgen ", target, " --tls-ca=", ca,
        " --requests=6 --warmup=0 --concurrency=2 --prompt-tokens=32 --gen-tokens=4 --json=", json,
        " > /dev/null");
    ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n" << cluster_->LogTail();
    std::ifstream in(json);
    const nlohmann::json report = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(report.is_discarded()) << target;
    EXPECT_EQ(report["requests"]["completed"], 6) << target << ": " << report.dump(2);
  }
  std::remove(json.c_str());
}

TEST_F(TlsClusterTest, APlaintextClientReachesNoPort) {
  for (const Cluster::Process& process : cluster_->processes()) {
    auto stub = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(process.address, grpc::InsecureChannelCredentials()));
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status =
        stub->Check(Context().get(), grpc::health::v1::HealthCheckRequest(), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << process.name;
    // Its HTTP port speaks only HTTPS.
    httplib::Client plain("http://" + process.http_address);
    plain.set_connection_timeout(5);
    httplib::Result res = plain.Get("/metrics");
    EXPECT_FALSE(res && res->status == 200) << process.name;
  }
}

TEST_F(TlsClusterTest, HealthAndMetricsAnswerAnyoneWhoVerifiesTheServer) {
  for (const Cluster::Process& process : cluster_->processes()) {
    absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> health =
        cluster_->Health(process.address);
    ASSERT_TRUE(health.ok()) << process.name << ": " << health.status();
    EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING) << process.name;
    httplib::Client https("https://" + process.http_address);
    https.set_ca_cert_path(LocalCaFiles(cluster_->tls_dir(), ComponentRole::kRouter).ca.c_str());
    https.enable_server_certificate_verification(true);
    httplib::Result res = https.Get("/metrics");
    ASSERT_TRUE(res) << process.name << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << process.name;
    EXPECT_THAT(res->body, HasSubstr("pdserve_build_info"));
  }
}

TEST_F(TlsClusterTest, TheRouterTakesRegistrationsOnlyFromTheRoleTheCertificateNames) {
  auto register_as = [](v1::WorkerRole role) {
    return [role](const std::shared_ptr<grpc::Channel>& channel) {
      v1::RegisterWorkerRequest request;
      request.set_role(role);
      request.set_address("127.0.0.1:1");
      request.set_kvstore_grpc_address("127.0.0.1:2");
      v1::RegisterWorkerReply reply;
      return v1::Router::NewStub(channel)->RegisterWorker(Context().get(), request, &reply);
    };
  };
  ExpectOnly("router", {ComponentRole::kPrefill}, register_as(v1::WORKER_ROLE_PREFILL));
  ExpectOnly("router", {ComponentRole::kDecode}, register_as(v1::WORKER_ROLE_DECODE));
  ExpectOnly("router", {ComponentRole::kDecode}, register_as(v1::WORKER_ROLE_MONOLITHIC));
  ExpectOnly("router", {ComponentRole::kPrefill, ComponentRole::kDecode},
             [](const std::shared_ptr<grpc::Channel>& channel) {
               v1::HeartbeatRequest request;
               request.set_address(Address("prefill-0"));
               v1::HeartbeatReply reply;
               return v1::Router::NewStub(channel)->Heartbeat(Context().get(), request, &reply);
             });
  // No refused registration reached the registry.
  auto stub = v1::Router::NewStub(Channel("router", ComponentRole::kOperator));
  v1::ListWorkersReply workers;
  ASSERT_TRUE(stub->ListWorkers(Context().get(), v1::ListWorkersRequest(), &workers).ok());
  for (const v1::WorkerInfo& worker : workers.workers()) EXPECT_NE(worker.address(), "127.0.0.1:1");
  EXPECT_EQ(workers.workers_size(), 2);
}

TEST_F(TlsClusterTest, WorkersTakeCallsOnlyFromTheRouter) {
  ExpectOnly("prefill-0", {ComponentRole::kRouter}, [](const std::shared_ptr<grpc::Channel>& c) {
    v1::QueueStatus reply;
    return v1::Prefill::NewStub(c)->GetQueue(Context().get(), v1::GetQueueRequest(), &reply);
  });
  ExpectOnly("prefill-0", {ComponentRole::kRouter}, [](const std::shared_ptr<grpc::Channel>& c) {
    v1::PrefillRequest request;
    request.add_prompt(1);
    v1::PrefillReply reply;
    return v1::Prefill::NewStub(c)->Prefill(Context().get(), request, &reply);
  });
  ExpectOnly("decode-0", {ComponentRole::kRouter}, [](const std::shared_ptr<grpc::Channel>& c) {
    v1::QueueStatus reply;
    return v1::Decode::NewStub(c)->GetQueue(Context().get(), v1::GetQueueRequest(), &reply);
  });
  ExpectOnly("decode-0", {ComponentRole::kRouter, ComponentRole::kOperator},
             [](const std::shared_ptr<grpc::Channel>& c) {
               auto context = Context();
               auto reader = v1::Decode::NewStub(c)->Decode(context.get(), v1::DecodeRequest());
               v1::DecodeResponse response;
               while (reader->Read(&response)) {
               }
               return reader->Finish();
             });
  // The router itself is let through (its call then fails for what it asks, not who asks).
  v1::QueueStatus queue;
  EXPECT_TRUE(v1::Prefill::NewStub(Channel("prefill-0", ComponentRole::kRouter))
                  ->GetQueue(Context().get(), v1::GetQueueRequest(), &queue)
                  .ok());
}

TEST_F(TlsClusterTest, TheKvStoreTakesPagesOnlyFromWorkers) {
  const std::initializer_list<ComponentRole> workers = {ComponentRole::kPrefill,
                                                        ComponentRole::kDecode};
  ExpectOnly("kvstore", workers, [](const std::shared_ptr<grpc::Channel>& c) {
    v1::AllocateRequest request;
    request.set_request_id(7);
    request.add_page_bytes(64);
    v1::AllocateReply reply;
    return v1::KvStore::NewStub(c)->Allocate(Context().get(), request, &reply);
  });
  ExpectOnly("kvstore", workers, [](const std::shared_ptr<grpc::Channel>& c) {
    v1::ReleaseReply reply;
    return v1::KvStore::NewStub(c)->Release(Context().get(), v1::ReleaseRequest(), &reply);
  });
  ExpectOnly("kvstore", {ComponentRole::kPrefill, ComponentRole::kDecode, ComponentRole::kOperator},
             [](const std::shared_ptr<grpc::Channel>& c) {
               v1::KvStoreInfo reply;
               return v1::KvStore::NewStub(c)->GetInfo(Context().get(), v1::GetInfoRequest(),
                                                       &reply);
             });
  ExpectOnly("kvstore", {ComponentRole::kRouter, ComponentRole::kPrefill, ComponentRole::kDecode},
             [](const std::shared_ptr<grpc::Channel>& c) {
               v1::CancelRequestReply reply;
               return v1::KvStore::NewStub(c)->CancelRequest(Context().get(),
                                                             v1::CancelRequestRequest(), &reply);
             });
  absl::StatusOr<v1::PoolUsage> usage = cluster_->PoolUsage();  // as the operator
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_EQ(usage->allocations(), 0);  // no refused Allocate took a page
}

}  // namespace
}  // namespace pdserve::integration
