// loadgen request record: what the client saw of one request, on its own steady clock, in seconds
// from the start of the run. Written by the one thread that runs the request; read after the run.
#ifndef PDSERVE_TOOLS_LOADGEN_REQUEST_RECORD_H_
#define PDSERVE_TOOLS_LOADGEN_REQUEST_RECORD_H_

#include <string>
#include <vector>

namespace pdserve::loadgen {

inline constexpr char kCodeOk[] = "OK";
// Completed without error but with fewer tokens than asked for (ignore_eos not honoured).
inline constexpr char kCodeShortOutput[] = "SHORT_OUTPUT";

struct RequestRecord {
  int id = 0;
  bool warmup = false;
  // Sent: false when the run stopped (--duration) before its turn.
  bool sent = false;
  // Sent but cut off when the run stopped (--duration); not an error of the server's.
  bool abandoned = false;
  double scheduled_s = 0;  // when the arrival process (chat: the think time) said to send it
  double send_s = 0;
  double done_s = 0;  // end of the stream (or of the failed call)
  int prompt_tokens = 0;
  int requested_tokens = 0;  // max_tokens asked for
  int output_tokens = 0;     // generated tokens reported by the server (or counted)
  // Arrival times of the streamed chunks that carried a token (gRPC: tokens with an id; HTTP:
  // chunks with non-empty text).
  std::vector<double> token_s;
  // "OK", a gRPC code name ("UNAVAILABLE"), "HTTP <status>", "CONNECTION" or SHORT_OUTPUT.
  std::string code = kCodeOk;
  std::string error;  // the server's (or transport's) message
  int retries = 0;    // refusals for overload retried (backoff included in the latencies)
  // The router's queue time for the request (Timings.queue_seconds: its admission queue and the
  // prefill worker's), when the protocol reports it (gRPC); negative otherwise.
  double queue_s = -1;
  // Prompt tokens the server reused from its prefix cache, when it reports them; -1 otherwise.
  int cached_tokens = -1;

  bool ok() const { return sent && !abandoned && code == kCodeOk; }
  // send → first token; requires !token_s.empty().
  double ttft() const { return token_s.front() - send_s; }
  // send → last token (E2EL).
  double e2e() const { return (token_s.empty() ? done_s : token_s.back()) - send_s; }
  // (e2e − TTFT) / (output tokens − 1); requires output_tokens ≥ 2.
  double tpot() const { return (e2e() - ttft()) / (output_tokens - 1); }
};

}  // namespace pdserve::loadgen

#endif  // PDSERVE_TOOLS_LOADGEN_REQUEST_RECORD_H_
