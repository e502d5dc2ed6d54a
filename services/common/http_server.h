// HttpServer: one pdserve process's HTTP server (cpp-httplib, from Debian's libcpp-httplib-dev).
// Every process serves its metrics at GET /metrics in the Prometheus text format and the health
// routes GET /healthz and GET /readyz (for kubelet httpGet probes); the router adds the
// OpenAI-compatible API through `install_routes`. Binds "host:port" (port 0 = any free port) and
// serves on its own threads until Stop or destruction. With the process's TLS identity
// (core/rpc/tls.h) it serves HTTPS with that certificate (it asks for no client certificate).
// Thread-safe: SetReady may be called from any thread while requests are served.
#ifndef PDSERVE_SERVICES_COMMON_HTTP_SERVER_H_
#define PDSERVE_SERVICES_COMMON_HTTP_SERVER_H_

#include <httplib.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "core/metrics/metrics_registry.h"
#include "services/common/bearer_keys.h"

namespace pdserve {

struct HttpServerOptions {
  std::string listen_address = "127.0.0.1:0";
  // Connections served at once (each streaming response holds one thread; the pool's threads
  // are started up front).
  int threads = 8;
  // Request bodies above this get 413.
  size_t max_body_bytes = 8 << 20;
  // GET /metrics wants "Authorization: Bearer <one of these>" (401 otherwise); null: open.
  std::shared_ptr<const BearerKeys> metrics_keys;
};

class HttpServer {
 public:
  // Serves `metrics` (not owned; must outlive the server) at /metrics, the health routes, plus
  // what `install_routes` adds. Unavailable naming the address when it cannot be bound.
  //
  // Health routes, open to anyone (no metrics token, no client certificate), bodies of a word:
  //   GET /healthz  200 "ok" while the server answers at all (liveness);
  //   GET /readyz   200 "ready" after SetReady(true), 503 "not ready" before it and after
  //                 SetReady(false) (readiness: ServiceServer mirrors grpc.health.v1's status of
  //                 the whole server here, so draining turns it 503).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const HttpServerOptions& options, const MetricsRegistry& metrics,
      const std::function<void(httplib::Server&)>& install_routes = {});
  ~HttpServer();

  // "host:port" with the port actually bound.
  const std::string& address() const { return address_; }
  // Whether it serves HTTPS.
  bool tls() const { return tls_; }
  // What GET /readyz reports; false until called.
  void SetReady(bool ready) { ready_.store(ready); }
  bool ready() const { return ready_.load(); }
  // Stops accepting connections and waits for the handlers that are running to return.
  void Stop();

 private:
  HttpServer() = default;

  std::unique_ptr<httplib::Server> server_;  // an httplib::SSLServer with TLS
  bool tls_ = false;
  std::string address_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> listen_returned_{false};
  std::thread thread_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_HTTP_SERVER_H_
