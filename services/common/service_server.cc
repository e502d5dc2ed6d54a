#include "services/common/service_server.h"

#include <grpcpp/health_check_service_interface.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<ServiceServer>> ServiceServer::Start(
    const std::string& listen_address, const std::vector<grpc::Service*>& services) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen_address, grpc::InsecureServerCredentials(), &port);
  for (grpc::Service* service : services) builder.RegisterService(service);
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
      new ServiceServer(std::move(server), absl::StrCat(host, ":", port)));
  result->SetServing(true);
  return result;
}

ServiceServer::ServiceServer(std::unique_ptr<grpc::Server> server, std::string address)
    : server_(std::move(server)), address_(std::move(address)) {}

ServiceServer::~ServiceServer() { Shutdown(absl::ZeroDuration()); }

void ServiceServer::SetServing(bool serving) {
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
    health->SetServingStatus(serving);
  }
}

void ServiceServer::AnnounceReady(const std::string& role) const {
  std::printf("PDSERVE_READY %s %s\n", role.c_str(), address_.c_str());
  std::fflush(stdout);
}

void ServiceServer::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  SetServing(false);
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
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

std::shared_ptr<grpc::Channel> MakeInternalChannel(const std::string& address) {
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   InternalChannelArguments());
}

}  // namespace pdserve
