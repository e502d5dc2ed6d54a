#include "services/common/service_server.h"

#include <grpcpp/health_check_service_interface.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/logging.h"
#include "core/metrics/build_info.h"
#include "core/rpc/tls.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<ServiceServer>> ServiceServer::Start(
    const std::string& listen_address, const std::vector<grpc::Service*>& services,
    const HttpEndpoint& http) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen_address, ProcessTls().ServerCredentials(), &port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  auto calls = std::make_shared<CallsInFlight>();
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> counting;
  counting.push_back(CallsInFlight::Factory(calls));
  builder.experimental().SetInterceptorCreators(std::move(counting));
  builder.SetMaxReceiveMessageSize(64 << 20);
  // Dead clients are noticed by keepalive pings rather than by TCP timeouts.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen_address));
  }
  const std::string host = listen_address.substr(0, listen_address.rfind(':'));
  auto result = std::unique_ptr<ServiceServer>(
      new ServiceServer(std::move(server), std::move(calls), absl::StrCat(host, ":", port)));
  if (http.metrics != nullptr) {
    AddBuildInfo(*http.metrics, http.role);
    result->serving_ =
        &http.metrics
             ->AddGauge("pdserve_serving",
                        "1 while the process takes new work, 0 while it starts or drains")
             .Add({});
    const ServiceServer& self = *result;
    absl::StatusOr<std::unique_ptr<HttpServer>> http_server =
        HttpServer::Start(http.options, *http.metrics, [&](httplib::Server& routes) {
          if (http.install_routes) http.install_routes(routes, self);
        });
    if (!http_server.ok()) return http_server.status();
    result->http_ = *std::move(http_server);
  }
  result->SetServing(true);
  return result;
}

ServiceServer::ServiceServer(std::unique_ptr<grpc::Server> server,
                             std::shared_ptr<CallsInFlight> calls, std::string address)
    : server_(std::move(server)), calls_(std::move(calls)), address_(std::move(address)) {}

ServiceServer::~ServiceServer() { Shutdown(absl::ZeroDuration()); }

void ServiceServer::SetServing(bool serving) {
  if (serving_ != nullptr) serving_->Set(serving ? 1 : 0);
  if (http_ != nullptr) http_->SetReady(serving);
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(serving);
  }
}

void ServiceServer::AnnounceReady(const std::string& role) const {
  std::printf("PDSERVE_READY %s %s %s\n", role.c_str(), address_.c_str(), http_address().c_str());
  std::fflush(stdout);
}

std::shared_ptr<grpc::Channel> ServiceServer::InProcessChannel() const {
  return server_->InProcessChannel(InternalChannelArguments());
}

void ServiceServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  SetServing(false);
  const absl::Time deadline = absl::Now() + grace;
  // gRPC's Shutdown sends every connection a GOAWAY, and a connection that has had one closes
  // the moment its last stream ends. Closing a socket the peer is still writing to (window
  // updates, pings as it reads the stream) resets it, and the peer may then fail that last
  // stream ("UNAVAILABLE: Broken pipe") before it has read the trailers. So the calls end first,
  // on open connections, and the GOAWAYs go to idle ones.
  const int running = calls_->WaitForNone(deadline);
  if (running > 0) GetLogger("rpc")->warn("{} calls still running after the drain budget", running);
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
  if (http_ != nullptr) http_->Stop();
}

grpc::ChannelArguments InternalChannelArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  // Reconnect quickly to a restarted worker instead of backing off for a minute.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

std::shared_ptr<grpc::Channel> MakeInternalChannel(const std::string& address, ComponentRole peer) {
  grpc::ChannelArguments args = InternalChannelArguments();
  const Tls& tls = ProcessTls();
  if (tls.enabled()) args.SetSslTargetNameOverride(ComponentServerName(peer));
  return grpc::CreateCustomChannel(address, tls.ChannelCredentials(), args);
}

}  // namespace pdserve
