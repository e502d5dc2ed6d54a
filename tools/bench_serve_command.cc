// `pdserve bench-serve`: an open-loop serving benchmark against a running router (DESIGN.md §5).
//
// Requests arrive at --rate per second (Poisson or fixed spacing, seeded), each --prompt-tokens
// random token ids with --gen-tokens generated (EOS ignored, so every request yields exactly that
// many); each runs on its own thread, so a slow server never slows the arrivals. Per request it
// records, on the client's clock, TTFT (send → first token), e2e, TPOT = (e2e − TTFT)/(n − 1) and
// the gaps between tokens (pooled into ITL), plus the router's timings (queue, prefill, transfer,
// decode). The first --warmup requests are sent the same way and left out of every statistic.
// Prints median and p99 of each, output throughput and errors by status code; --json FILE writes
// the same as JSON.
//
// --direct-decode HOST:PORT (a monolithic worker behind the same router) adds a sequential run,
// not under load: --overhead-requests pairs of the same request, one through the router and one
// straight to the worker's pdserve.v1.Decode service, in alternating order, and reports both e2e
// latencies and their per-pair difference: the router's overhead.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/pdserve_client.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"
#include "pdserve/v1/decode.grpc.pb.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"

ABSL_DECLARE_FLAG(std::string, router);

ABSL_FLAG(double, rate, 1.0, "bench-serve: request arrivals per second");
ABSL_FLAG(int, requests, 100, "bench-serve: measured requests (after --warmup)");
ABSL_FLAG(std::string, arrival, "poisson", "bench-serve: arrival process, poisson or fixed");
ABSL_FLAG(int, warmup, 5, "bench-serve: requests sent first and left out of the statistics");
ABSL_FLAG(std::string, direct_decode, "",
          "bench-serve: a monolithic worker's address; adds the sequential router-overhead run");
ABSL_FLAG(int, overhead_requests, 200,
          "bench-serve: requests per path in the router-overhead run (with --direct-decode)");
ABSL_FLAG(std::string, json, "", "bench-serve: also write the results as JSON to this file");
ABSL_FLAG(double, request_timeout, 300, "bench-serve: deadline per request in seconds");

namespace pdserve::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Linear interpolation between closest ranks; NaN for an empty sample.
double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

double Mean(const std::vector<double>& values) {
  if (values.empty()) return std::nan("");
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

struct Summary {
  double p50 = 0;
  double p99 = 0;
  double mean = 0;
  size_t count = 0;
};

Summary Summarize(const std::vector<double>& values) {
  return Summary{Percentile(values, 50), Percentile(values, 99), Mean(values), values.size()};
}

nlohmann::json ToJson(const Summary& s) {
  auto number = [](double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); };
  return {
      {"p50", number(s.p50)}, {"p99", number(s.p99)}, {"mean", number(s.mean)}, {"count", s.count}};
}

std::vector<int> RandomPrompt(std::mt19937_64& rng, int length, int vocab) {
  std::uniform_int_distribution<int> id(3, vocab - 1);
  std::vector<int> ids(static_cast<size_t>(length));
  for (int& t : ids) t = id(rng);
  return ids;
}

GenerateRequest MakeRequest(const std::vector<int>& prompt, int gen_tokens) {
  GenerateRequest request = TokenRequest(prompt, gen_tokens);
  request.mutable_stop()->set_ignore_eos(true);
  return request;
}

struct Config {
  std::string router;
  double rate = 0;
  int requests = 0;
  int warmup = 0;
  int prompt_tokens = 0;
  int gen_tokens = 0;
  std::string arrival;
  uint64_t seed = 0;
  int vocab = 0;
  double timeout_seconds = 0;
};

// One request's observations on the client's clock.
struct Record {
  bool warmup = false;
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string error;
  Clock::time_point scheduled;  // when the arrival process said to send it
  Clock::time_point sent;
  std::vector<Clock::time_point> token_times;  // tokens with an id (not text-only entries)
  Clock::time_point done;
  int completion_tokens = 0;
  v1::Timings timings;
};

void RunOne(Client& client, const GenerateRequest& request, const CallOptions& options,
            Record& record) {
  record.token_times.reserve(static_cast<size_t>(request.max_tokens()));
  record.sent = Clock::now();
  absl::StatusOr<GenerateResponse::Final> final =
      client.GenerateStream(request, options, [&record](const GenerateResponse::Token& token) {
        if (token.id() >= 0) record.token_times.push_back(Clock::now());
      });
  record.done = Clock::now();
  if (!final.ok()) {
    record.code = final.status().code();
    record.error = std::string(final.status().message());
    return;
  }
  record.completion_tokens = final->completion_tokens();
  record.timings = final->timings();
}

// Sends one request straight to a Decode service; e2e seconds (and TTFT) on the client's clock.
struct DirectResult {
  absl::Status status;
  double ttft = 0;
  double e2e = 0;
  int tokens = 0;
};

DirectResult RunDirect(v1::Decode::Stub& stub, const std::vector<int>& prompt, int gen_tokens,
                       uint64_t request_id, double timeout_seconds) {
  DirectResult result;
  v1::DecodeRequest request;
  request.set_request_id(request_id);
  request.set_max_tokens(gen_tokens);
  request.mutable_stop()->set_ignore_eos(true);
  request.mutable_prompt()->Add(prompt.begin(), prompt.end());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1e3)));
  const Clock::time_point sent = Clock::now();
  std::unique_ptr<grpc::ClientReader<v1::DecodeResponse>> reader = stub.Decode(&context, request);
  v1::DecodeResponse response;
  while (reader->Read(&response)) {
    if (result.tokens == 0 && response.tokens_size() > 0)
      result.ttft = Seconds(Clock::now() - sent);
    result.tokens += response.tokens_size();
  }
  const grpc::Status status = reader->Finish();
  result.e2e = Seconds(Clock::now() - sent);
  if (!status.ok()) {
    result.status =
        absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return result;
}

void PrintRow(const char* name, const Summary& s, double scale, const char* unit) {
  std::printf("  %-22s %10.2f %10.2f %10.2f %8zu  %s\n", name, s.p50 * scale, s.p99 * scale,
              s.mean * scale, s.count, unit);
}

void PrintErrors(const std::map<std::string, int>& errors) {
  std::printf("  errors: ");
  if (errors.empty()) std::printf("none");
  for (const auto& [code, count] : errors) std::printf("%s=%d ", code.c_str(), count);
  std::printf("\n");
}

void PrintHeader() {
  std::printf("  %-22s %10s %10s %10s %8s\n", "metric", "p50", "p99", "mean", "n");
}

absl::Status RouterOverhead(Client& client, const std::string& direct_address, int prompt_tokens,
                            int gen_tokens, int vocab, uint64_t seed, double timeout_seconds,
                            nlohmann::json& json) {
  const int pairs = absl::GetFlag(FLAGS_overhead_requests);
  if (pairs < 1) return absl::InvalidArgumentError("--overhead-requests must be ≥ 1");
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  std::unique_ptr<v1::Decode::Stub> stub = v1::Decode::NewStub(
      grpc::CreateCustomChannel(direct_address, grpc::InsecureChannelCredentials(), args));
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
  CallOptions options;
  options.timeout = absl::Seconds(timeout_seconds);

  std::vector<double> router_e2e, direct_e2e, diff_e2e, router_ttft, direct_ttft, diff_ttft;
  std::map<std::string, int> errors;
  // A few unrecorded pairs first: connections, caches.
  const int warmup = std::max(2, absl::GetFlag(FLAGS_warmup));
  for (int i = -warmup; i < pairs; ++i) {
    const std::vector<int> prompt = RandomPrompt(rng, prompt_tokens, vocab);
    const GenerateRequest request = MakeRequest(prompt, gen_tokens);
    Record via_router;
    DirectResult direct;
    const uint64_t id = (uint64_t{0xbe} << 40) + static_cast<uint64_t>(i + warmup);
    if ((i & 1) == 0) {
      RunOne(client, request, options, via_router);
      direct = RunDirect(*stub, prompt, gen_tokens, id, timeout_seconds);
    } else {
      direct = RunDirect(*stub, prompt, gen_tokens, id, timeout_seconds);
      RunOne(client, request, options, via_router);
    }
    if (i < 0) continue;
    if (via_router.code != absl::StatusCode::kOk) {
      ++errors[absl::StrCat("router ", absl::StatusCodeToString(via_router.code))];
      continue;
    }
    if (!direct.status.ok()) {
      ++errors[absl::StrCat("direct ", absl::StatusCodeToString(direct.status.code()))];
      continue;
    }
    if (static_cast<int>(via_router.token_times.size()) != gen_tokens ||
        direct.tokens != gen_tokens) {
      ++errors["short"];
      continue;
    }
    const double r_e2e = Seconds(via_router.done - via_router.sent);
    const double r_ttft = Seconds(via_router.token_times.front() - via_router.sent);
    router_e2e.push_back(r_e2e);
    direct_e2e.push_back(direct.e2e);
    diff_e2e.push_back(r_e2e - direct.e2e);
    router_ttft.push_back(r_ttft);
    direct_ttft.push_back(direct.ttft);
    diff_ttft.push_back(r_ttft - direct.ttft);
  }
  std::printf(
      "\nrouter overhead: %d sequential pairs, %d prompt + %d generated tokens, router %s "
      "vs direct %s (alternating order)\n",
      pairs, prompt_tokens, gen_tokens, client.address().c_str(), direct_address.c_str());
  PrintHeader();
  PrintRow("e2e via router", Summarize(router_e2e), 1e3, "ms");
  PrintRow("e2e direct", Summarize(direct_e2e), 1e3, "ms");
  PrintRow("e2e router - direct", Summarize(diff_e2e), 1e3, "ms (per pair)");
  PrintRow("TTFT via router", Summarize(router_ttft), 1e3, "ms");
  PrintRow("TTFT direct", Summarize(direct_ttft), 1e3, "ms");
  PrintRow("TTFT router - direct", Summarize(diff_ttft), 1e3, "ms (per pair)");
  PrintErrors(errors);
  nlohmann::json& o = json["router_overhead"];
  o["pairs"] = pairs;
  o["direct_address"] = direct_address;
  o["e2e_router_s"] = ToJson(Summarize(router_e2e));
  o["e2e_direct_s"] = ToJson(Summarize(direct_e2e));
  o["e2e_diff_s"] = ToJson(Summarize(diff_e2e));
  o["ttft_router_s"] = ToJson(Summarize(router_ttft));
  o["ttft_direct_s"] = ToJson(Summarize(direct_ttft));
  o["ttft_diff_s"] = ToJson(Summarize(diff_ttft));
  o["errors"] = errors;
  return absl::OkStatus();
}

// The open-loop run: prints its table and fills `json`.
absl::Status LoadTest(Client& client, const Config& c, nlohmann::json& json) {
  const std::string& router = c.router;
  const double rate = c.rate;
  const int requests = c.requests, warmup = c.warmup;
  const int prompt_tokens = c.prompt_tokens, gen_tokens = c.gen_tokens;
  const std::string& arrival = c.arrival;
  const uint64_t seed = c.seed;
  const int vocab = c.vocab;
  const double timeout_seconds = c.timeout_seconds;
  const int total = warmup + requests;
  std::mt19937_64 rng(seed);
  std::vector<GenerateRequest> batch;
  batch.reserve(static_cast<size_t>(total));
  for (int i = 0; i < total; ++i) {
    batch.push_back(MakeRequest(RandomPrompt(rng, prompt_tokens, vocab), gen_tokens));
  }
  // Arrival offsets from the start.
  std::vector<double> offsets(static_cast<size_t>(total));
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (int i = 0; i < total; ++i) {
    offsets[static_cast<size_t>(i)] = t;
    t += arrival == "poisson" ? gap(rng) : 1.0 / rate;
  }

  GetLogger("bench-serve")
      ->info("{} + {} warm-up requests at {} req/s ({}), {} prompt + {} generated tokens, via {}",
             requests, warmup, rate, arrival, prompt_tokens, gen_tokens, router);
  CallOptions options;
  options.timeout = absl::Seconds(timeout_seconds);
  std::vector<Record> records(static_cast<size_t>(total));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(total));
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < total; ++i) {
    Record& record = records[static_cast<size_t>(i)];
    record.warmup = i < warmup;
    record.scheduled = start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(offsets[static_cast<size_t>(i)]));
    std::this_thread::sleep_until(record.scheduled);
    threads.emplace_back([&client, &batch, &options, &record, i] {
      RunOne(client, batch[static_cast<size_t>(i)], options, record);
    });
  }
  for (std::thread& thread : threads) thread.join();

  // Statistics over the measured requests.
  std::vector<double> ttft, tpot, itl, e2e, lateness, queue, prefill, transfer, server_ttft, decode,
      server_total;
  std::map<std::string, int> errors;
  std::map<std::string, std::string> error_messages;  // the first of each code
  int ok = 0, short_requests = 0;
  int64_t output_tokens = 0;
  Clock::time_point first_sent = Clock::time_point::max(), last_done = Clock::time_point::min();
  for (const Record& r : records) {
    if (r.warmup) continue;
    first_sent = std::min(first_sent, r.sent);
    last_done = std::max(last_done, r.done);
    lateness.push_back(Seconds(r.sent - r.scheduled));
    if (r.code != absl::StatusCode::kOk) {
      if (++errors[absl::StatusCodeToString(r.code)] == 1) {
        GetLogger("bench-serve")->warn("first {}: {}", absl::StatusCodeToString(r.code), r.error);
        error_messages[absl::StatusCodeToString(r.code)] = r.error;
      }
      continue;
    }
    const int n = static_cast<int>(r.token_times.size());
    output_tokens += n;
    if (n != gen_tokens || r.completion_tokens != gen_tokens) ++short_requests;
    if (n == 0) continue;
    ++ok;
    const double first = Seconds(r.token_times.front() - r.sent);
    const double total_seconds = Seconds(r.done - r.sent);
    ttft.push_back(first);
    e2e.push_back(total_seconds);
    if (n > 1) tpot.push_back((total_seconds - first) / (n - 1));
    for (int k = 1; k < n; ++k) {
      itl.push_back(Seconds(r.token_times[static_cast<size_t>(k)] -
                            r.token_times[static_cast<size_t>(k - 1)]));
    }
    queue.push_back(r.timings.queue_seconds());
    prefill.push_back(r.timings.prefill_seconds());
    transfer.push_back(r.timings.transfer_seconds());
    server_ttft.push_back(r.timings.first_token_seconds());
    decode.push_back(r.timings.decode_seconds());
    server_total.push_back(r.timings.total_seconds());
  }
  const double span = ok > 0 ? Seconds(last_done - first_sent) : 0;
  const double tokens_per_second = span > 0 ? static_cast<double>(output_tokens) / span : 0;
  const double requests_per_second = span > 0 ? ok / span : 0;
  if (short_requests > 0) errors["short (fewer tokens than --gen-tokens)"] = short_requests;

  std::printf(
      "bench-serve: router %s, %d requests (+%d warm-up), %s arrivals at %.3g req/s, "
      "%d prompt + %d generated tokens, seed %llu\n",
      router.c_str(), requests, warmup, arrival.c_str(), rate, prompt_tokens, gen_tokens,
      static_cast<unsigned long long>(seed));
  PrintHeader();
  PrintRow("TTFT", Summarize(ttft), 1e3, "ms");
  PrintRow("TPOT", Summarize(tpot), 1e3, "ms");
  PrintRow("ITL", Summarize(itl), 1e3, "ms");
  PrintRow("e2e", Summarize(e2e), 1e3, "ms");
  PrintRow("send lateness", Summarize(lateness), 1e3, "ms (client: actual - scheduled send)");
  std::printf("  router timings:\n");
  PrintRow("queue", Summarize(queue), 1e3, "ms");
  PrintRow("prefill", Summarize(prefill), 1e3, "ms");
  PrintRow("transfer", Summarize(transfer), 1e3, "ms");
  PrintRow("first token (router)", Summarize(server_ttft), 1e3, "ms");
  PrintRow("decode", Summarize(decode), 1e3, "ms");
  PrintRow("total (router)", Summarize(server_total), 1e3, "ms");
  std::printf("  completed %d/%d in %.2f s: %.1f output tok/s, %.2f req/s\n", ok, requests, span,
              tokens_per_second, requests_per_second);
  PrintErrors(errors);
  std::fflush(stdout);

  json["config"] = {{"router", router},         {"rate", rate},
                    {"requests", requests},     {"warmup", warmup},
                    {"arrival", arrival},       {"prompt_tokens", prompt_tokens},
                    {"gen_tokens", gen_tokens}, {"seed", seed}};
  json["ttft_s"] = ToJson(Summarize(ttft));
  json["tpot_s"] = ToJson(Summarize(tpot));
  json["itl_s"] = ToJson(Summarize(itl));
  json["e2e_s"] = ToJson(Summarize(e2e));
  json["send_lateness_s"] = ToJson(Summarize(lateness));
  json["router_timings_s"] = {
      {"queue", ToJson(Summarize(queue))},       {"prefill", ToJson(Summarize(prefill))},
      {"transfer", ToJson(Summarize(transfer))}, {"first_token", ToJson(Summarize(server_ttft))},
      {"decode", ToJson(Summarize(decode))},     {"total", ToJson(Summarize(server_total))}};
  json["completed"] = ok;
  json["duration_s"] = span;
  json["output_tokens_per_s"] = tokens_per_second;
  json["requests_per_s"] = requests_per_second;
  json["errors"] = errors;
  json["first_error_messages"] = error_messages;
  return absl::OkStatus();
}

}  // namespace

absl::Status RunBenchServe() {
  const std::string router = absl::GetFlag(FLAGS_router);
  if (router.empty()) return absl::InvalidArgumentError("bench-serve needs --router HOST:PORT");
  const double rate = absl::GetFlag(FLAGS_rate);
  const int requests = absl::GetFlag(FLAGS_requests);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  const int gen_tokens = absl::GetFlag(FLAGS_gen_tokens);
  const std::string arrival = absl::GetFlag(FLAGS_arrival);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const double timeout_seconds = absl::GetFlag(FLAGS_request_timeout);
  // Token ids in [3, vocab): below the smallest model's vocabulary unless --vocab says otherwise.
  const int vocab = std::min(absl::GetFlag(FLAGS_vocab), 512);
  if (!(rate > 0)) return absl::InvalidArgumentError("--rate must be > 0");
  const std::string direct = absl::GetFlag(FLAGS_direct_decode);
  if (requests < (direct.empty() ? 1 : 0) || warmup < 0) {
    return absl::InvalidArgumentError(
        "--requests must be ≥ 1 (≥ 0 with --direct-decode) and --warmup ≥ 0");
  }
  if (prompt_tokens < 1 || gen_tokens < 2) {
    return absl::InvalidArgumentError("--prompt-tokens must be ≥ 1 and --gen-tokens ≥ 2");
  }
  if (arrival != "poisson" && arrival != "fixed") {
    return absl::InvalidArgumentError("--arrival must be poisson or fixed");
  }
  if (vocab < 4) return absl::InvalidArgumentError("--vocab must be ≥ 4");
  if (!(timeout_seconds > 0)) return absl::InvalidArgumentError("--request-timeout must be > 0");

  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Create(router));
  nlohmann::json json;
  if (requests > 0) {
    const Config config{router,     rate,    requests, warmup, prompt_tokens,
                        gen_tokens, arrival, seed,     vocab,  timeout_seconds};
    PDSERVE_RETURN_IF_ERROR(LoadTest(*client, config, json));
  }
  if (!direct.empty()) {
    PDSERVE_RETURN_IF_ERROR(RouterOverhead(*client, direct, prompt_tokens, gen_tokens, vocab, seed,
                                           timeout_seconds, json));
  }
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << json.dump(2) << "\n";
    if (!out) return absl::UnavailableError(absl::StrCat("could not write ", json_path));
  }
  return absl::OkStatus();
}

}  // namespace pdserve::cli
