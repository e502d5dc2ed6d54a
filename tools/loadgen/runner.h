// loadgen runner: sends a workload through a backend and records what the client saw.
//
// Open loop (concurrency 0): each request is sent at its arrival offset on its own thread, so a
// slow server never slows the arrivals. Closed loop (concurrency N): N clients, each sending the
// next request as soon as its previous one ends (arrival offsets ignored). A chat conversation
// (RequestSpec::conversation) is one unit: it starts at its first turn's arrival offset (or when a
// closed-loop client takes it) and sends each later turn think_time_s after the previous one ends.
// With a duration limit, nothing is sent after it and requests still running are cancelled: both
// count as abandoned. A live progress line (sent/done/errors/current completion rate/TTFT p50) is
// redrawn with \r.
//
// Thread-safety: RunWorkload blocks its caller; it uses the backend from many threads.
#ifndef PDSERVE_TOOLS_LOADGEN_RUNNER_H_
#define PDSERVE_TOOLS_LOADGEN_RUNNER_H_

#include <cstdio>
#include <vector>

#include "tools/loadgen/backend.h"
#include "tools/loadgen/request_record.h"
#include "tools/loadgen/workload.h"

namespace pdserve::loadgen {

struct RunOptions {
  int concurrency = 0;            // 0 = open loop; N > 0 = closed loop with N clients
  double timeout_s = 300;         // per request
  double duration_s = 0;          // 0 = run until every request ends
  std::FILE* progress = nullptr;  // where to draw the progress line; null = none
  RetryPolicy retry;              // for refusals for overload
  double think_time_s = 0;        // chat: between an answer's end and the next turn
};

// One record per spec, in spec order (record.id = spec.index).
std::vector<RequestRecord> RunWorkload(Backend& backend, const std::vector<RequestSpec>& specs,
                                       const RunOptions& options);

}  // namespace pdserve::loadgen

#endif  // PDSERVE_TOOLS_LOADGEN_RUNNER_H_
