// `pdserve client`: sends one prompt to a router and streams the answer to stdout; --timings adds
// the request's timings (queue, prefill, transfer, first token, decode) on stderr.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "client/pdserve_client.h"
#include "core/base/status_macros.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"
#include "tools/role_config.h"

ABSL_DECLARE_FLAG(std::string, router);
ABSL_FLAG(bool, timings, false, "client: print the request's timings after the answer");
ABSL_FLAG(double, timeout_seconds, 0, "client: deadline for the whole request; 0 = none");

namespace pdserve::cli {
namespace {

const char* FinishReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_STOP_TOKEN:
      return "stop token";
    case v1::FINISH_REASON_STOP_STRING:
      return "stop string";
    default:
      return "unspecified";
  }
}

}  // namespace

absl::Status RunClient() {
  const std::string router = absl::GetFlag(FLAGS_router);
  if (router.empty()) return absl::InvalidArgumentError("client needs --router HOST:PORT");
  GenerateRequest request =
      TextRequest(absl::GetFlag(FLAGS_prompt), absl::GetFlag(FLAGS_max_tokens));
  request.mutable_sampling()->set_temperature(absl::GetFlag(FLAGS_temperature));
  request.mutable_sampling()->set_top_p(absl::GetFlag(FLAGS_top_p));
  request.mutable_sampling()->set_top_k(absl::GetFlag(FLAGS_top_k));
  request.mutable_sampling()->set_seed(absl::GetFlag(FLAGS_seed));
  CallOptions options;
  if (absl::GetFlag(FLAGS_timeout_seconds) > 0) {
    options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_seconds));
  }
  PDSERVE_ASSIGN_OR_RETURN(const ClientOptions client_options, ClientOptionsFromFlags());
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Create(router, client_options));
  std::fputs(absl::GetFlag(FLAGS_prompt).c_str(), stdout);
  std::fflush(stdout);
  PDSERVE_ASSIGN_OR_RETURN(
      GenerateResponse::Final final,
      client->GenerateStream(request, options, [](const GenerateResponse::Token& token) {
        std::fputs(token.text().c_str(), stdout);
        std::fflush(stdout);
      }));
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (absl::GetFlag(FLAGS_timings)) {
    const v1::Timings& t = final.timings();
    std::fprintf(stderr,
                 "request %s: %d prompt (%d from the prefix cache) + %d generated tokens, "
                 "finished by %s\n"
                 "  prefill on %s, decode on %s\n"
                 "  queue %.1f ms, prefill %.1f ms, transfer %.1f ms, first token %.1f ms, "
                 "decode %.1f ms, total %.1f ms\n",
                 final.request_id().c_str(), final.prompt_tokens(), t.cached_prompt_tokens(),
                 final.completion_tokens(), FinishReasonName(final.finish_reason()),
                 final.prefill_worker().empty() ? "-" : final.prefill_worker().c_str(),
                 final.decode_worker().c_str(), t.queue_seconds() * 1e3, t.prefill_seconds() * 1e3,
                 t.transfer_seconds() * 1e3, t.first_token_seconds() * 1e3,
                 t.decode_seconds() * 1e3, t.total_seconds() * 1e3);
  }
  return absl::OkStatus();
}

}  // namespace pdserve::cli
