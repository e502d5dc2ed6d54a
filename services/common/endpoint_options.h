// EndpointOptions: where a service process listens, who may read its /metrics and how long it
// drains — what the options of every role (router, prefill, decode, KV store) share.
#ifndef PDSERVE_SERVICES_COMMON_ENDPOINT_OPTIONS_H_
#define PDSERVE_SERVICES_COMMON_ENDPOINT_OPTIONS_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "services/common/bearer_keys.h"

namespace pdserve {

struct EndpointOptions {
  std::string listen_address = "127.0.0.1:0";  // gRPC "host:port"; port 0 = any free port
  // HTTP: /metrics, /healthz, /readyz (and the router's OpenAI API).
  std::string http_listen_address = "127.0.0.1:0";
  std::shared_ptr<const BearerKeys> metrics_keys;  // GET /metrics wants one; null: open
  // After SIGTERM: the budget of the calls in flight (the KV store: of the pages still leased).
  absl::Duration drain = absl::Seconds(30);
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_ENDPOINT_OPTIONS_H_
