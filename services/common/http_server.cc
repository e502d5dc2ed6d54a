#include "services/common/http_server.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/rpc/tls.h"

namespace pdserve {
namespace {

// A health answer: a word, never cached, nothing about the process beyond it.
void HealthResponse(httplib::Response& response, int status, const char* body) {
  response.status = status;
  response.set_header("Cache-Control", "no-store");
  response.set_content(body, "text/plain");
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options, const MetricsRegistry& metrics,
    const std::function<void(httplib::Server&)>& install_routes) {
  const size_t colon = options.listen_address.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(options.listen_address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP listen address (--http-listen) '",
                                                   options.listen_address,
                                                   "' is not host:port with a port in [0, 65535]"));
  }
  std::string host = options.listen_address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto server = std::unique_ptr<HttpServer>(new HttpServer());
  const Tls& tls = ProcessTls();
  if (tls.enabled() && !tls.files().cert.empty()) {
    auto ssl =
        std::make_unique<httplib::SSLServer>(tls.files().cert.c_str(), tls.files().key.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat("the HTTP server cannot use --tls-cert '",
                                                     tls.files().cert, "' and --tls-key '",
                                                     tls.files().key, "'"));
    }
    server->server_ = std::move(ssl);
    server->tls_ = true;
  } else {
    server->server_ = std::make_unique<httplib::Server>();
  }
  const int threads = std::max(options.threads, 1);
  server->server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server->server_->set_payload_max_length(options.max_body_bytes);
  // Idle keep-alive connections (Prometheus keeps one) hold Stop for at most this long.
  server->server_->set_keep_alive_timeout(1);
  // A streamed token is a small write: Nagle's algorithm would hold it until the client ACKs the
  // one before (a delayed ACK: up to 40 ms), most visibly with TLS, which writes each as a record.
  server->server_->set_tcp_nodelay(true);
  // httplib's default adds SO_REUSEPORT, which would let a second server share a taken port.
  server->server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  server->server_->Get("/metrics", [&metrics, keys = options.metrics_keys](
                                       const httplib::Request& request,
                                       httplib::Response& response) {
    if (keys != nullptr && !keys->Match(request.get_header_value("Authorization")).has_value()) {
      response.status = 401;
      response.set_header("WWW-Authenticate", "Bearer");
      response.set_content("/metrics needs Authorization: Bearer <the metrics token>\n",
                           "text/plain");
      return;
    }
    response.set_content(metrics.Render(), kPrometheusContentType);
  });
  // Probes carry neither the metrics token nor a client certificate: these answer everyone.
  server->server_->Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    HealthResponse(response, 200, "ok\n");
  });
  HttpServer* self = server.get();
  server->server_->Get("/readyz", [self](const httplib::Request&, httplib::Response& response) {
    if (self->ready()) {
      HealthResponse(response, 200, "ready\n");
    } else {
      HealthResponse(response, 503, "not ready\n");
    }
  });
  if (install_routes) install_routes(*server->server_);

  const int bound = port == 0 ? server->server_->bind_to_any_port(host)
                              : (server->server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", options.listen_address,
                                               " (--http-listen): the port is taken or the host is "
                                               "not a local address"));
  }
  server->address_ = absl::StrCat(options.listen_address.substr(0, colon), ":", bound);
  server->thread_ = std::thread([self] {
    self->server_->listen_after_bind();
    self->listen_returned_.store(true);
  });
  // Stop only takes effect once the accept loop runs (httplib 0.11 has no wait_until_ready).
  while (!server->server_->is_running() && !server->listen_returned_.load()) {
    absl::SleepFor(absl::Microseconds(200));
  }
  if (server->listen_returned_.load()) {
    return absl::UnavailableError(
        absl::StrCat("the HTTP server on ", server->address_, " stopped as it started"));
  }
  return server;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace pdserve
