#include "services/common/http_server.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/rpc/local_ca.h"
#include "core/rpc/tls.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "pdserve/v1/router.grpc.pb.h"
#include "services/common/service_server.h"
#include "tests/support/scratch_dir.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

httplib::Client ClientFor(const std::string& address) {
  const std::vector<std::string> parts = absl::StrSplit(address, ':');
  return httplib::Client(parts[0], std::stoi(parts[1]));
}

TEST(HttpServerTest, ServesMetricsAndExtraRoutes) {
  MetricsRegistry registry;
  registry.AddCounter("t_requests_total", "t").Add({}).Increment(4);
  auto server = HttpServer::Start({}, registry, [](httplib::Server& routes) {
    routes.Get("/hello", [](const httplib::Request&, httplib::Response& response) {
      response.set_content("hi", "text/plain");
    });
  });
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client = ClientFor((*server)->address());
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->get_header_value("Content-Type"), HasSubstr("version=0.0.4"));
  EXPECT_THAT(metrics->body, HasSubstr("t_requests_total 4\n"));
  httplib::Result hello = client.Get("/hello");
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->body, "hi");
  EXPECT_EQ(client.Get("/nothing-here")->status, 404);
}

// Default options with /metrics behind `token`.
HttpServerOptions OptionsWithMetricsToken(const std::string& token) {
  HttpServerOptions options;
  absl::StatusOr<BearerKeys> keys = BearerKeys::Create({token});
  EXPECT_TRUE(keys.ok()) << keys.status();
  if (keys.ok()) options.metrics_keys = std::make_shared<const BearerKeys>(*std::move(keys));
  return options;
}

TEST(HttpServerTest, MetricsWithATokenAnswerOnlyThoseWhoBearIt) {
  MetricsRegistry registry;
  registry.AddCounter("t_requests_total", "t").Add({}).Increment(2);
  auto server = HttpServer::Start(OptionsWithMetricsToken("metrics-token-1"), registry);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client = ClientFor((*server)->address());
  httplib::Result anonymous = client.Get("/metrics");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_EQ(anonymous->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_THAT(anonymous->body, ::testing::Not(HasSubstr("t_requests_total")));
  client.set_bearer_token_auth("metrics-token-2");
  EXPECT_EQ(client.Get("/metrics")->status, 401);
  client.set_bearer_token_auth("metrics-token-1");
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_THAT(metrics->body, HasSubstr("t_requests_total 2\n"));
}

// Kubelet probes bear no token: the health routes answer them while /metrics still refuses.
TEST(HttpServerTest, HealthRoutesNeedNoMetricsToken) {
  MetricsRegistry registry;
  registry.AddCounter("t_requests_total", "t").Add({}).Increment(2);
  auto server = HttpServer::Start(OptionsWithMetricsToken("metrics-token-1"), registry);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetReady(true);
  httplib::Client client = ClientFor((*server)->address());
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 401);
  httplib::Result healthz = client.Get("/healthz");
  ASSERT_TRUE(healthz);
  EXPECT_EQ(healthz->status, 200);
  EXPECT_EQ(healthz->body, "ok\n");
  EXPECT_THAT(healthz->body, ::testing::Not(HasSubstr("t_requests_total")));
  httplib::Result readyz = client.Get("/readyz");
  ASSERT_TRUE(readyz);
  EXPECT_EQ(readyz->status, 200);
  EXPECT_EQ(readyz->body, "ready\n");
}

TEST(HttpServerTest, ReadyzFollowsSetReadyAndHealthzStaysUp) {
  MetricsRegistry registry;
  auto server = HttpServer::Start({}, registry);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client = ClientFor((*server)->address());
  // Not ready until told.
  httplib::Result before = client.Get("/readyz");
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, 503);
  EXPECT_EQ(before->body, "not ready\n");
  EXPECT_EQ(before->get_header_value("Cache-Control"), "no-store");
  httplib::Result alive = client.Get("/healthz");
  ASSERT_TRUE(alive);
  EXPECT_EQ(alive->status, 200);
  EXPECT_EQ(alive->get_header_value("Cache-Control"), "no-store");

  (*server)->SetReady(true);
  EXPECT_EQ(client.Get("/readyz")->status, 200);
  // Draining: no longer ready, still alive.
  (*server)->SetReady(false);
  httplib::Result draining = client.Get("/readyz");
  ASSERT_TRUE(draining);
  EXPECT_EQ(draining->status, 503);
  EXPECT_EQ(draining->body, "not ready\n");
  EXPECT_EQ(client.Get("/healthz")->status, 200);
  // Only GET (and HEAD) are routes; nothing under them.
  EXPECT_EQ(client.Post("/readyz", "", "text/plain")->status, 404);
  EXPECT_EQ(client.Get("/healthz/more")->status, 404);
}

grpc::health::v1::HealthCheckResponse::ServingStatus GrpcHealth(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;  // service "": the whole server
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.status();
}

// /readyz says what grpc.health.v1 says for the whole server: serving after Start, not while
// draining (SetServing(false), which every role calls on SIGTERM), again when serving.
TEST(HttpServerTest, ReadyzMirrorsTheServiceServersGrpcHealth) {
  using grpc::health::v1::HealthCheckResponse;
  MetricsRegistry registry;
  HttpEndpoint http;
  http.role = "test";
  http.metrics = &registry;
  v1::Router::Service unimplemented;  // a gRPC server needs one service besides health
  auto server = ServiceServer::Start("127.0.0.1:0", {&unimplemented}, http);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client = ClientFor((*server)->http_address());
  EXPECT_EQ(GrpcHealth((*server)->address()), HealthCheckResponse::SERVING);
  EXPECT_EQ(client.Get("/readyz")->status, 200);

  (*server)->SetServing(false);
  EXPECT_EQ(GrpcHealth((*server)->address()), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(client.Get("/readyz")->status, 503);
  EXPECT_EQ(client.Get("/healthz")->status, 200);

  (*server)->SetServing(true);
  EXPECT_EQ(GrpcHealth((*server)->address()), HealthCheckResponse::SERVING);
  EXPECT_EQ(client.Get("/readyz")->status, 200);

  (*server)->Shutdown(absl::ZeroDuration());
  EXPECT_FALSE(client.Get("/healthz"));
}

// With the process's TLS identity the health routes are HTTPS, and answer a client that verifies
// the server under the CA but presents no certificate (as a kubelet probe, which verifies nothing).
TEST(HttpServerTest, HealthRoutesOverHttpsWithoutAClientCertificate) {
  const ScratchDir scratch("http_server_test");
  const std::string dir = scratch / "ca";
  ASSERT_TRUE(WriteLocalCa(dir).ok());
  absl::StatusOr<std::shared_ptr<const Tls>> tls =
      Tls::Load(LocalCaFiles(dir, ComponentRole::kDecode), ComponentRole::kDecode);
  ASSERT_TRUE(tls.ok()) << tls.status();
  SetProcessTls(*tls);
  MetricsRegistry registry;
  auto server = HttpServer::Start({}, registry);
  SetProcessTls(Tls::Insecure());  // the server keeps its certificate; later tests are plaintext
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*server)->tls());
  (*server)->SetReady(true);

  httplib::Client https("https://" + (*server)->address());
  https.set_ca_cert_path(LocalCaFiles(dir, ComponentRole::kDecode).ca.c_str());
  https.enable_server_certificate_verification(true);
  httplib::Result healthz = https.Get("/healthz");
  ASSERT_TRUE(healthz) << httplib::to_string(healthz.error());
  EXPECT_EQ(healthz->status, 200);
  httplib::Result readyz = https.Get("/readyz");
  ASSERT_TRUE(readyz) << httplib::to_string(readyz.error());
  EXPECT_EQ(readyz->status, 200);
  // Plaintext to the HTTPS port gets no health answer.
  httplib::Client plain = ClientFor((*server)->address());
  plain.set_connection_timeout(2);
  plain.set_read_timeout(2);
  httplib::Result refused = plain.Get("/healthz");
  EXPECT_FALSE(refused && refused->status == 200);
  (*server)->Stop();
}

TEST(HttpServerTest, StopsPromptlyAndRefusesTakenOrBadAddresses) {
  MetricsRegistry registry;
  auto first = HttpServer::Start({}, registry);
  ASSERT_TRUE(first.ok());
  HttpServerOptions same;
  same.listen_address = (*first)->address();
  auto second = HttpServer::Start(same, registry);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(same.listen_address));
  (*first)->Stop();
  EXPECT_FALSE(ClientFor((*first)->address()).Get("/metrics"));

  for (const char* bad : {"nohost", "127.0.0.1:x", "127.0.0.1:70000"}) {
    HttpServerOptions options;
    options.listen_address = bad;
    EXPECT_EQ(HttpServer::Start(options, registry).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace pdserve
