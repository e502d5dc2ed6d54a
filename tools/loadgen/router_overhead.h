// loadgen router overhead: a sequential run, not under load, of pairs of the same request, one
// through the router (gRPC) and one straight to a monolithic worker's pdserve.v1.Decode service
// behind that router, in alternating order; reports both e2e and TTFT and their per-pair
// difference: the router's overhead. Thread-compatible (runs on the caller's thread).
#ifndef PDSERVE_TOOLS_LOADGEN_ROUTER_OVERHEAD_H_
#define PDSERVE_TOOLS_LOADGEN_ROUTER_OVERHEAD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "client/pdserve_client.h"
#include "nlohmann/json.hpp"

namespace pdserve::loadgen {

struct OverheadOptions {
  std::string direct_address;  // the worker's Decode service, host:port
  TlsFiles tls;                // with TLS: an operator's certificate (the worker takes no other)
  int pairs = 200;
  int warmup_pairs = 2;  // unrecorded pairs first
  int prompt_tokens = 0;
  int output_tokens = 0;
  int vocab = 512;
  uint64_t seed = 0;
  double timeout_s = 300;
};

// Prints its table to stdout; returns {"pairs", "direct_address", "e2e_router_s", "e2e_direct_s",
// "e2e_diff_s", "ttft_router_s", "ttft_direct_s", "ttft_diff_s", "errors"} (summaries as in
// report.h's SummaryJson).
absl::StatusOr<nlohmann::json> MeasureRouterOverhead(Client& router,
                                                     const OverheadOptions& options);

}  // namespace pdserve::loadgen

#endif  // PDSERVE_TOOLS_LOADGEN_ROUTER_OVERHEAD_H_
