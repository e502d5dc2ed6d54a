#include "tools/loadgen/router_overhead.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "tools/loadgen/report.h"

namespace pdserve::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Timed {
  absl::Status status;
  double ttft = 0;
  double e2e = 0;
  int tokens = 0;
};

Timed ViaRouter(Client& client, const std::vector<int>& prompt, int tokens, double timeout_s) {
  GenerateRequest request = TokenRequest(prompt, tokens);
  request.mutable_stop()->set_ignore_eos(true);
  CallOptions options;
  options.timeout = absl::Seconds(timeout_s);
  Timed t;
  const Clock::time_point sent = Clock::now();
  Clock::time_point last = sent;
  absl::StatusOr<GenerateResponse::Final> final =
      client.GenerateStream(request, options, [&](const GenerateResponse::Token& token) {
        if (token.id() < 0) return;
        last = Clock::now();
        if (t.tokens++ == 0) t.ttft = Seconds(last - sent);
      });
  t.e2e = Seconds(last - sent);
  t.status = final.status();
  return t;
}

Timed Direct(v1::Decode::Stub& stub, const std::vector<int>& prompt, int tokens, uint64_t id,
             double timeout_s) {
  v1::DecodeRequest request;
  request.set_request_id(id);
  request.set_max_tokens(tokens);
  request.mutable_stop()->set_ignore_eos(true);
  request.mutable_prompt()->Add(prompt.begin(), prompt.end());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3)));
  Timed t;
  const Clock::time_point sent = Clock::now();
  Clock::time_point last = sent;
  std::unique_ptr<grpc::ClientReader<v1::DecodeResponse>> reader = stub.Decode(&context, request);
  v1::DecodeResponse response;
  while (reader->Read(&response)) {
    if (response.tokens_size() == 0) continue;
    last = Clock::now();
    if (t.tokens == 0) t.ttft = Seconds(last - sent);
    t.tokens += response.tokens_size();
  }
  const grpc::Status status = reader->Finish();
  t.e2e = Seconds(last - sent);
  if (!status.ok()) {
    t.status =
        absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return t;
}

void Row(const char* name, const Summary& s, const char* note) {
  std::printf("  %-22s %10.2f %10.2f %10.2f %8zu  ms%s\n", name, s.p50 * 1e3, s.p99 * 1e3,
              s.mean * 1e3, s.count, note);
}

}  // namespace

absl::StatusOr<nlohmann::json> MeasureRouterOverhead(Client& router, const OverheadOptions& o) {
  if (o.pairs < 1) return absl::InvalidArgumentError("--overhead-requests must be ≥ 1");
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  std::shared_ptr<const Tls> tls = Tls::Insecure();
  if (!o.tls.ca.empty()) {
    absl::StatusOr<std::shared_ptr<const Tls>> loaded = Tls::Load(o.tls);
    if (!loaded.ok()) return loaded.status();
    tls = *std::move(loaded);
  }
  std::unique_ptr<v1::Decode::Stub> stub = v1::Decode::NewStub(
      grpc::CreateCustomChannel(o.direct_address, tls->ChannelCredentials(), args));
  std::mt19937_64 rng(o.seed ^ 0x9e3779b97f4a7c15ULL);
  std::uniform_int_distribution<int> token(3, o.vocab - 1);
  std::vector<double> router_e2e, direct_e2e, diff_e2e, router_ttft, direct_ttft, diff_ttft;
  std::map<std::string, int> errors;
  for (int i = -o.warmup_pairs; i < o.pairs; ++i) {
    std::vector<int> prompt(static_cast<size_t>(o.prompt_tokens));
    for (int& t : prompt) t = token(rng);
    const uint64_t id = (uint64_t{0xbe} << 40) + static_cast<uint64_t>(i + o.warmup_pairs);
    Timed via, direct;
    if ((i & 1) == 0) {
      via = ViaRouter(router, prompt, o.output_tokens, o.timeout_s);
      direct = Direct(*stub, prompt, o.output_tokens, id, o.timeout_s);
    } else {
      direct = Direct(*stub, prompt, o.output_tokens, id, o.timeout_s);
      via = ViaRouter(router, prompt, o.output_tokens, o.timeout_s);
    }
    if (i < 0) continue;
    if (!via.status.ok()) {
      ++errors[absl::StrCat("router ", absl::StatusCodeToString(via.status.code()))];
    } else if (!direct.status.ok()) {
      ++errors[absl::StrCat("direct ", absl::StatusCodeToString(direct.status.code()))];
    } else if (via.tokens != o.output_tokens || direct.tokens != o.output_tokens) {
      ++errors["short"];
    } else {
      router_e2e.push_back(via.e2e);
      direct_e2e.push_back(direct.e2e);
      diff_e2e.push_back(via.e2e - direct.e2e);
      router_ttft.push_back(via.ttft);
      direct_ttft.push_back(direct.ttft);
      diff_ttft.push_back(via.ttft - direct.ttft);
    }
  }
  std::printf(
      "\nrouter overhead: %d sequential pairs, %d prompt + %d generated tokens, router %s "
      "vs direct %s (alternating order)\n",
      o.pairs, o.prompt_tokens, o.output_tokens, router.address().c_str(),
      o.direct_address.c_str());
  std::printf("  %-22s %10s %10s %10s %8s\n", "metric", "p50", "p99", "mean", "n");
  Row("e2e via router", Summarize(router_e2e), "");
  Row("e2e direct", Summarize(direct_e2e), "");
  Row("e2e router - direct", Summarize(diff_e2e), " (per pair)");
  Row("TTFT via router", Summarize(router_ttft), "");
  Row("TTFT direct", Summarize(direct_ttft), "");
  Row("TTFT router - direct", Summarize(diff_ttft), " (per pair)");
  std::printf("  errors:");
  if (errors.empty()) std::printf(" none");
  for (const auto& [code, count] : errors) std::printf(" %s=%d", code.c_str(), count);
  std::printf("\n");
  std::fflush(stdout);
  return nlohmann::json{{"pairs", o.pairs},
                        {"direct_address", o.direct_address},
                        {"e2e_router_s", SummaryJson(Summarize(router_e2e))},
                        {"e2e_direct_s", SummaryJson(Summarize(direct_e2e))},
                        {"e2e_diff_s", SummaryJson(Summarize(diff_e2e))},
                        {"ttft_router_s", SummaryJson(Summarize(router_ttft))},
                        {"ttft_direct_s", SummaryJson(Summarize(direct_ttft))},
                        {"ttft_diff_s", SummaryJson(Summarize(diff_ttft))},
                        {"errors", errors}};
}

}  // namespace pdserve::loadgen
