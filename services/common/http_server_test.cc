#include "services/common/http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"

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

TEST(HttpServerTest, MetricsWithATokenAnswerOnlyThoseWhoBearIt) {
  MetricsRegistry registry;
  registry.AddCounter("t_requests_total", "t").Add({}).Increment(2);
  HttpServerOptions options;
  absl::StatusOr<BearerKeys> keys = BearerKeys::Create({"metrics-token-1"});
  ASSERT_TRUE(keys.ok());
  options.metrics_keys = std::make_shared<const BearerKeys>(*std::move(keys));
  auto server = HttpServer::Start(options, registry);
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
