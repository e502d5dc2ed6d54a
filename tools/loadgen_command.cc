// `pdserve loadgen`: a load generator for a running router (docs/loadgen.md).
//
// Flags (all "loadgen:" in --helpfull; --router, --prompt-tokens, --gen-tokens, --seed and
// --vocab are shared with other commands) are read and validated here into the library's option
// structs (tools/loadgen/); the library does the work:
//   workload.h   what each request asks for (lengths, trace)   arrivals.h  open-loop schedule
//   backend.h    gRPC or HTTP/SSE                                runner.h    sends, records
//   report.h     statistics, table, JSON, CSV                    sweep.h     rate sweep
//   plot.h       gnuplot charts                                  router_overhead.h
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/cli_flags.h"
#include "tools/commands.h"
#include "tools/loadgen/arrivals.h"
#include "tools/loadgen/grpc_backend.h"
#include "tools/loadgen/http_backend.h"
#include "tools/loadgen/plot.h"
#include "tools/loadgen/report.h"
#include "tools/loadgen/router_overhead.h"
#include "tools/loadgen/runner.h"
#include "tools/loadgen/sweep.h"
#include "tools/loadgen/workload.h"
#include "tools/role_config.h"

ABSL_DECLARE_FLAG(std::string, router);

ABSL_FLAG(std::string, protocol, "grpc",
          "loadgen: grpc (the router's gRPC API at --router) or http (its OpenAI-compatible "
          "/v1/completions at --url)");
ABSL_FLAG(std::string, url, "",
          "loadgen: the router's HTTP address, http://HOST:PORT or HOST:PORT (--protocol http)");
ABSL_FLAG(std::string, api_model, "",
          "loadgen: the \"model\" field of HTTP requests (default: the first model that "
          "GET /v1/models lists)");
ABSL_FLAG(double, rate, 1.0,
          "loadgen: open-loop arrivals per second (with --trace: replaces the trace's "
          "timestamps when given)");
ABSL_FLAG(std::string, arrival, "poisson", "loadgen: open-loop arrival process, poisson or fixed");
ABSL_FLAG(int, concurrency, 0,
          "loadgen: closed loop with N clients, each sending its next request when the previous "
          "ends (0 = open loop at --rate)");
ABSL_FLAG(int, requests, 100,
          "loadgen: measured requests (after --warmup); with --trace, default all its lines");
ABSL_FLAG(int, warmup, 5, "loadgen: requests sent first and left out of every statistic");
ABSL_FLAG(int, prompt_tokens_max, 0,
          "loadgen: prompt lengths uniform over [--prompt-tokens, this] (0 = fixed)");
ABSL_FLAG(int, gen_tokens_max, 0,
          "loadgen: output lengths uniform over [--gen-tokens, this] (0 = fixed)");
ABSL_FLAG(int, shared_prefix_tokens, 0,
          "loadgen: every prompt starts with its group's shared prefix of this many tokens (a "
          "system prompt), then tokens of its own up to its length (0 = no shared prefix)");
ABSL_FLAG(int, prefix_groups, 1,
          "loadgen: distinct shared prefixes; request i uses prefix i mod this");
ABSL_FLAG(int, conversations, 0,
          "loadgen: multi-turn chat: measured conversations (after --warmup ones) of --turns "
          "turns, each turn's prompt the whole history (first message --prompt-tokens, answers "
          "--gen-tokens, later messages --turn-tokens); --rate and --concurrency then count "
          "conversations (0 = lone requests)");
ABSL_FLAG(int, turns, 4, "loadgen: turns per chat conversation (--conversations)");
ABSL_FLAG(int, turn_tokens, 64, "loadgen: tokens of each later user message in a chat");
ABSL_FLAG(int, turn_tokens_max, 0,
          "loadgen: later chat messages uniform over [--turn-tokens, this] (0 = fixed)");
ABSL_FLAG(double, think_time, 1.0,
          "loadgen: seconds between a chat answer's end and the conversation's next turn");
ABSL_FLAG(std::string, trace, "",
          "loadgen: Mooncake-format JSONL trace (timestamp ms, input_length, output_length, "
          "hash_ids of 512-token blocks); lengths and arrivals from it");
ABSL_FLAG(double, trace_speedup, 1.0, "loadgen: divide the trace's timestamps by this");
ABSL_FLAG(double, request_timeout, 300, "loadgen: deadline per request in seconds");
ABSL_FLAG(int, retries, 8,
          "loadgen: retries of a request refused for overload (RESOURCE_EXHAUSTED / 429), with "
          "jittered exponential backoff honouring the server's hint; 0 = none, -1 = until "
          "--request-timeout");
ABSL_FLAG(double, duration, 0,
          "loadgen: stop after this many seconds; unfinished requests count as abandoned "
          "(0 = run every request to its end)");
ABSL_FLAG(double, slo_ttft_ms, 0, "loadgen: TTFT SLO in ms (0 = none)");
ABSL_FLAG(double, slo_tpot_ms, 0, "loadgen: TPOT SLO in ms (0 = none)");
ABSL_FLAG(double, slo_e2e_ms, 0, "loadgen: e2e SLO in ms for goodput (0 = none)");
ABSL_FLAG(double, slo_attainment, 0.9,
          "loadgen: sweep target: a rate meets the SLO when this fraction of its requests meets "
          "both the TTFT and the TPOT SLO");
ABSL_FLAG(std::string, sweep_rates, "",
          "loadgen: one open-loop run per rate, \"1,2,4,8\" or START:FACTOR:COUNT (\"1:2:4\"); "
          "writes sweep.json, sweep.csv and two PNG plots to --out-dir");
ABSL_FLAG(std::string, json, "", "loadgen: write the report as JSON to this file");
ABSL_FLAG(std::string, csv, "", "loadgen: write one CSV row per request to this file");
ABSL_FLAG(std::string, out_dir, "",
          "loadgen: directory for all artefacts (report.json, requests.csv; sweeps: sweep.json, "
          "sweep.csv, requests_rate<R>.csv, latency_vs_rate.png, goodput_vs_rate.png)");
ABSL_FLAG(bool, progress, false,
          "loadgen: draw the live progress line on stderr even when it is not a terminal");
ABSL_FLAG(std::string, direct_decode, "",
          "loadgen: a monolithic worker's Decode address; adds the sequential router-overhead "
          "run (gRPC)");
ABSL_FLAG(int, overhead_requests, 200,
          "loadgen: request pairs in the router-overhead run (with --direct-decode)");

namespace pdserve::cli {
namespace {

using loadgen::Report;
using loadgen::Slo;

// Whether --name was on the command line (this Abseil keeps
// CommandLineFlag::IsSpecifiedOnCommandLine private).
bool Specified(const char* name) { return absl::flags_internal::WasPresentOnCommandLine(name); }

// Everything the flags say, validated.
struct Config {
  std::string protocol;
  bool closed_loop = false;
  int concurrency = 0;
  double rate = 0;
  bool rate_given = false;
  loadgen::ArrivalProcess arrival = loadgen::ArrivalProcess::kPoisson;
  int requests = 0;
  int warmup = 0;
  loadgen::LengthSpec prompt, output;
  int shared_prefix = 0, prefix_groups = 1;
  int conversations = 0, turns = 1;  // chat when conversations > 0
  loadgen::LengthSpec turn_message;
  std::string trace;
  double trace_speedup = 1;
  int vocab = 512;
  uint64_t seed = 0;
  loadgen::RunOptions run;
  Slo slo;
  double attainment_target = 0.9;
  std::vector<double> sweep_rates;
  std::string json, csv, out_dir;
};

absl::StatusOr<loadgen::LengthSpec> Lengths(const char* name, int min, const char* max_name,
                                            int max, int floor) {
  if (min < floor) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be ≥ ", floor));
  }
  if (max != 0 && max < min) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", max_name, " must be 0 (fixed) or ≥ --", name, " (", min, ")"));
  }
  return loadgen::LengthSpec{min, max == 0 ? min : max};
}

absl::StatusOr<Config> ConfigFromFlags() {
  Config c;
  c.protocol = absl::GetFlag(FLAGS_protocol);
  if (c.protocol != "grpc" && c.protocol != "http") {
    return absl::InvalidArgumentError(
        absl::StrCat("--protocol must be grpc or http, got '", c.protocol, "'"));
  }
  c.concurrency = absl::GetFlag(FLAGS_concurrency);
  if (c.concurrency < 0) return absl::InvalidArgumentError("--concurrency must be ≥ 0");
  c.closed_loop = c.concurrency > 0;
  c.rate = absl::GetFlag(FLAGS_rate);
  c.rate_given = Specified("rate");
  if (!(c.rate > 0) || !std::isfinite(c.rate)) {
    return absl::InvalidArgumentError("--rate must be > 0");
  }
  PDSERVE_ASSIGN_OR_RETURN(c.arrival, loadgen::ParseArrivalProcess(absl::GetFlag(FLAGS_arrival)));
  c.requests = absl::GetFlag(FLAGS_requests);
  c.warmup = absl::GetFlag(FLAGS_warmup);
  const bool overhead = !absl::GetFlag(FLAGS_direct_decode).empty();
  if (c.requests < (overhead ? 0 : 1)) {
    return absl::InvalidArgumentError("--requests must be ≥ 1 (≥ 0 with --direct-decode)");
  }
  if (c.warmup < 0) return absl::InvalidArgumentError("--warmup must be ≥ 0");
  PDSERVE_ASSIGN_OR_RETURN(
      c.prompt, Lengths("prompt-tokens", absl::GetFlag(FLAGS_prompt_tokens), "prompt-tokens-max",
                        absl::GetFlag(FLAGS_prompt_tokens_max), 1));
  PDSERVE_ASSIGN_OR_RETURN(c.output,
                           Lengths("gen-tokens", absl::GetFlag(FLAGS_gen_tokens), "gen-tokens-max",
                                   absl::GetFlag(FLAGS_gen_tokens_max), 1));
  c.shared_prefix = absl::GetFlag(FLAGS_shared_prefix_tokens);
  c.prefix_groups = absl::GetFlag(FLAGS_prefix_groups);
  if (c.shared_prefix < 0) return absl::InvalidArgumentError("--shared-prefix-tokens must be ≥ 0");
  if (c.prefix_groups < 1) return absl::InvalidArgumentError("--prefix-groups must be ≥ 1");
  c.trace = absl::GetFlag(FLAGS_trace);
  if (!c.trace.empty() && c.shared_prefix > 0) {
    return absl::InvalidArgumentError(
        "--shared-prefix-tokens is for synthetic prompts; a trace shares blocks by its hash_ids");
  }
  c.conversations = absl::GetFlag(FLAGS_conversations);
  if (c.conversations < 0) return absl::InvalidArgumentError("--conversations must be ≥ 0");
  if (c.conversations > 0) {
    if (!c.trace.empty()) {
      return absl::InvalidArgumentError("--conversations draws its own prompts; leave out --trace");
    }
    if (Specified("requests")) {
      return absl::InvalidArgumentError(
          "--requests counts lone requests; a chat run counts --conversations");
    }
    c.turns = absl::GetFlag(FLAGS_turns);
    if (c.turns < 1) return absl::InvalidArgumentError("--turns must be ≥ 1");
    PDSERVE_ASSIGN_OR_RETURN(
        c.turn_message, Lengths("turn-tokens", absl::GetFlag(FLAGS_turn_tokens), "turn-tokens-max",
                                absl::GetFlag(FLAGS_turn_tokens_max), 1));
    c.run.think_time_s = absl::GetFlag(FLAGS_think_time);
    if (!(c.run.think_time_s >= 0) || !std::isfinite(c.run.think_time_s)) {
      return absl::InvalidArgumentError("--think-time must be ≥ 0");
    }
  }
  c.trace_speedup = absl::GetFlag(FLAGS_trace_speedup);
  if (!(c.trace_speedup > 0)) return absl::InvalidArgumentError("--trace-speedup must be > 0");
  // Token ids in [3, vocab): 512 (stories260K's vocabulary) unless --vocab is given.
  c.vocab = Specified("vocab") ? absl::GetFlag(FLAGS_vocab) : 512;
  if (c.vocab < 4) return absl::InvalidArgumentError("--vocab must be ≥ 4");
  c.seed = absl::GetFlag(FLAGS_seed);
  c.run.concurrency = c.concurrency;
  c.run.timeout_s = absl::GetFlag(FLAGS_request_timeout);
  c.run.retry.max_retries = absl::GetFlag(FLAGS_retries);
  PDSERVE_RETURN_IF_ERROR(c.run.retry.Validate());
  if (!(c.run.timeout_s > 0)) return absl::InvalidArgumentError("--request-timeout must be > 0");
  c.run.duration_s = absl::GetFlag(FLAGS_duration);
  if (c.run.duration_s < 0) return absl::InvalidArgumentError("--duration must be ≥ 0");
  if (isatty(STDERR_FILENO) || absl::GetFlag(FLAGS_progress)) c.run.progress = stderr;
  c.slo.ttft_s = absl::GetFlag(FLAGS_slo_ttft_ms) / 1e3;
  c.slo.tpot_s = absl::GetFlag(FLAGS_slo_tpot_ms) / 1e3;
  c.slo.e2e_s = absl::GetFlag(FLAGS_slo_e2e_ms) / 1e3;
  if (c.slo.ttft_s < 0 || c.slo.tpot_s < 0 || c.slo.e2e_s < 0) {
    return absl::InvalidArgumentError("--slo-ttft-ms, --slo-tpot-ms and --slo-e2e-ms must be ≥ 0");
  }
  c.attainment_target = absl::GetFlag(FLAGS_slo_attainment);
  if (!(c.attainment_target > 0 && c.attainment_target <= 1)) {
    return absl::InvalidArgumentError("--slo-attainment must be in (0, 1]");
  }
  const std::string sweep = absl::GetFlag(FLAGS_sweep_rates);
  if (!sweep.empty()) {
    PDSERVE_ASSIGN_OR_RETURN(c.sweep_rates, loadgen::ParseSweepRates(sweep));
    if (c.closed_loop) {
      return absl::InvalidArgumentError("--sweep-rates is open loop; leave out --concurrency");
    }
    if (c.slo.ttft_s == 0 && c.slo.tpot_s == 0) {
      return absl::InvalidArgumentError(
          "--sweep-rates needs an SLO: --slo-ttft-ms and/or --slo-tpot-ms");
    }
  }
  c.json = absl::GetFlag(FLAGS_json);
  c.csv = absl::GetFlag(FLAGS_csv);
  c.out_dir = absl::GetFlag(FLAGS_out_dir);
  if (!c.sweep_rates.empty() && c.out_dir.empty()) c.out_dir = "loadgen-sweep";
  return c;
}

absl::StatusOr<std::unique_ptr<loadgen::Backend>> MakeBackend(const Config& c) {
  PDSERVE_ASSIGN_OR_RETURN(const ClientOptions client_options, ClientOptionsFromFlags());
  if (c.protocol == "http") {
    const std::string url = absl::GetFlag(FLAGS_url);
    if (url.empty()) return absl::InvalidArgumentError("--protocol http needs --url HOST:PORT");
    PDSERVE_ASSIGN_OR_RETURN(
        std::unique_ptr<loadgen::HttpBackend> backend,
        loadgen::HttpBackend::Create(url, absl::GetFlag(FLAGS_api_model), client_options.api_key,
                                     client_options.tls.ca));
    return std::unique_ptr<loadgen::Backend>(std::move(backend));
  }
  const std::string router = absl::GetFlag(FLAGS_router);
  if (router.empty()) return absl::InvalidArgumentError("loadgen needs --router HOST:PORT");
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<loadgen::GrpcBackend> backend,
                           loadgen::GrpcBackend::Create(router, client_options));
  return std::unique_ptr<loadgen::Backend>(std::move(backend));
}

// The requests of one run: lengths from the trace or the specs, the first `warmup` flagged, and
// arrival offsets (trace timestamps unless a rate is given). `seed` draws prompts, lengths and
// arrivals; the shared prefixes come from c.seed, so every run shares the same system prompts.
absl::StatusOr<std::vector<loadgen::RequestSpec>> BuildWorkload(const Config& c, double rate,
                                                                bool use_rate, uint64_t seed) {
  std::vector<loadgen::RequestSpec> specs;
  if (!c.trace.empty()) {
    PDSERVE_ASSIGN_OR_RETURN(std::vector<loadgen::TraceEntry> trace, loadgen::ReadTrace(c.trace));
    if (Specified("requests") && static_cast<int>(trace.size()) > c.warmup + c.requests) {
      trace.resize(static_cast<size_t>(c.warmup + c.requests));
    }
    if (static_cast<int>(trace.size()) <= c.warmup) {
      return absl::InvalidArgumentError(absl::StrCat(
          c.trace, " has ", trace.size(), " requests, not more than --warmup ", c.warmup));
    }
    specs = loadgen::TraceWorkload(trace, c.vocab, seed, c.trace_speedup);
  } else if (c.conversations > 0) {
    specs =
        loadgen::ChatWorkload({c.warmup + c.conversations, c.turns, c.prompt, c.turn_message,
                               c.output, c.vocab, seed, c.shared_prefix, c.prefix_groups, c.seed});
  } else {
    specs = loadgen::SyntheticWorkload({c.warmup + c.requests, c.prompt, c.output, c.vocab, seed,
                                        c.shared_prefix, c.prefix_groups, c.seed});
  }
  // A chat conversation is one arrival, and the warm-up counts conversations.
  auto unit = [&](const loadgen::RequestSpec& s) {
    return s.conversation >= 0 ? s.conversation : s.index;
  };
  if (use_rate) {
    const int units = specs.empty() ? 0 : unit(specs.back()) + 1;
    const std::vector<double> offsets = loadgen::ArrivalOffsets(c.arrival, rate, units, seed);
    for (loadgen::RequestSpec& s : specs) s.arrival_s = offsets[static_cast<size_t>(unit(s))];
  }
  for (loadgen::RequestSpec& s : specs) s.warmup = unit(s) < c.warmup;
  return specs;
}

nlohmann::json ConfigJson(const Config& c, const loadgen::Backend& backend, double rate,
                          int requests) {
  const bool trace_times = !c.trace.empty() && !c.rate_given && c.sweep_rates.empty();
  nlohmann::json j = {
      {"backend", backend.Describe()},
      {"protocol", c.protocol},
      {"mode", c.closed_loop ? "closed" : "open"},
      {"concurrency", c.concurrency},
      {"arrival", c.closed_loop ? "none"
                  : trace_times ? "trace"
                                : loadgen::ArrivalProcessName(c.arrival)},
      {"rate", c.closed_loop || trace_times ? nlohmann::json() : nlohmann::json(rate)},
      {"requests", requests},
      {"warmup", c.warmup},
      {"prompt_tokens", c.trace.empty() ? c.prompt.Describe() : "trace"},
      {"output_tokens", c.trace.empty() ? c.output.Describe() : "trace"},
      {"shared_prefix_tokens", c.shared_prefix},
      {"conversations", c.conversations},
      {"turns", c.conversations > 0 ? nlohmann::json(c.turns) : nlohmann::json()},
      {"turn_tokens",
       c.conversations > 0 ? nlohmann::json(c.turn_message.Describe()) : nlohmann::json()},
      {"think_time_s", c.conversations > 0 ? nlohmann::json(c.run.think_time_s) : nlohmann::json()},
      {"prefix_groups", c.prefix_groups},
      {"trace", c.trace},
      {"trace_speedup", c.trace_speedup},
      {"vocab", c.vocab},
      {"seed", c.seed},
      {"duration_s", c.run.duration_s},
      {"request_timeout_s", c.run.timeout_s}};
  return j;
}

std::string InDir(const Config& c, const std::string& name) {
  return (std::filesystem::path(c.out_dir) / name).string();
}

absl::Status EnsureOutDir(const Config& c) {
  if (c.out_dir.empty()) return absl::OkStatus();
  std::error_code error;
  std::filesystem::create_directories(c.out_dir, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("--out-dir: cannot create '", c.out_dir, "': ", error.message()));
  }
  return absl::OkStatus();
}

// One run at `rate` (open loop) or closed loop with the workload of `seed`; prints its table,
// returns the report and the records.
absl::StatusOr<std::pair<Report, std::vector<loadgen::RequestRecord>>> RunOnce(
    const Config& c, loadgen::Backend& backend, double rate, bool use_rate, uint64_t seed) {
  PDSERVE_ASSIGN_OR_RETURN(std::vector<loadgen::RequestSpec> specs,
                           BuildWorkload(c, rate, use_rate, seed));
  const int measured = static_cast<int>(std::count_if(
      specs.begin(), specs.end(), [](const loadgen::RequestSpec& s) { return !s.warmup; }));
  const std::string chat =
      c.conversations > 0
          ? absl::StrFormat(
                "%d conversations (+%d warm-up) of %d turns, messages %s, think %.3g s, ",
                c.conversations, c.warmup, c.turns, c.turn_message.Describe(), c.run.think_time_s)
          : "";
  std::string how = c.closed_loop ? absl::StrCat("closed loop, ", c.concurrency, " clients")
                    : use_rate    ? absl::StrFormat("%s arrivals at %.4g req/s",
                                                    loadgen::ArrivalProcessName(c.arrival), rate)
                                  : absl::StrFormat("trace timestamps / %.4g", c.trace_speedup);
  std::printf("loadgen: %s, %s%d requests (+%zu warm-up), %s, prompt %s, output %s, seed %llu\n",
              backend.Describe().c_str(), chat.c_str(), measured, specs.size() - measured,
              how.c_str(), c.trace.empty() ? c.prompt.Describe().c_str() : c.trace.c_str(),
              c.trace.empty() ? c.output.Describe().c_str() : "from trace",
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  std::vector<loadgen::RequestRecord> records = loadgen::RunWorkload(backend, specs, c.run);
  Report report = loadgen::ComputeReport(records, c.slo);
  loadgen::PrintReport(stdout, report, c.slo);
  for (const auto& [code, message] : report.first_errors) {
    GetLogger("loadgen")->warn("first {}: {}", code, message);
  }
  std::fflush(stdout);
  return std::make_pair(std::move(report), std::move(records));
}

// Each rate draws its own prompts (seed + its index in the sweep), so that no rate is served from a
// cache an earlier rate filled; shared prefixes stay the same.
absl::Status Sweep(const Config& c, loadgen::Backend& backend) {
  std::vector<uint64_t> seeds;
  auto run_at = [&](double rate) -> absl::StatusOr<Report> {
    seeds.push_back(c.seed + seeds.size());
    PDSERVE_ASSIGN_OR_RETURN(auto run, RunOnce(c, backend, rate, /*use_rate=*/true, seeds.back()));
    PDSERVE_RETURN_IF_ERROR(loadgen::WriteFile(
        InDir(c, absl::StrFormat("requests_rate%g.csv", rate)), loadgen::RequestsCsv(run.second)));
    std::printf("\n");
    return run.first;
  };
  PDSERVE_ASSIGN_OR_RETURN(loadgen::SweepResult sweep,
                           loadgen::RunSweep(c.sweep_rates, c.attainment_target, run_at));
  std::printf("sweep: %-8s %10s %10s %10s %10s %10s %10s\n", "rate", "goodput", "attain",
              "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99");
  for (const loadgen::SweepPoint& p : sweep.points) {
    const Report& r = p.report;
    std::printf("       %-8.4g %10.2f %9.1f%% %10.2f %10.2f %10.2f %10.2f\n", p.rate, r.goodput,
                r.slo_attainment * 100, r.ttft_s.p50 * 1e3, r.ttft_s.p99 * 1e3, r.tpot_s.p50 * 1e3,
                r.tpot_s.p99 * 1e3);
  }
  if (sweep.max_rate_meeting_slo) {
    std::printf("highest rate meeting the SLO (attainment ≥ %.0f%%): %.4g req/s\n",
                c.attainment_target * 100, *sweep.max_rate_meeting_slo);
  } else {
    std::printf("no rate met the SLO (attainment ≥ %.0f%%)\n", c.attainment_target * 100);
  }
  nlohmann::json json = loadgen::SweepJson(sweep, c.slo);
  json["config"] = ConfigJson(c, backend, 0, c.requests);
  json["config"]["rate"] = c.sweep_rates;
  json["config"]["seeds"] = seeds;  // per rate, in the order run
  PDSERVE_RETURN_IF_ERROR(loadgen::WriteFile(InDir(c, "sweep.json"), json.dump(2) + "\n"));
  if (!c.json.empty()) PDSERVE_RETURN_IF_ERROR(loadgen::WriteFile(c.json, json.dump(2) + "\n"));
  PDSERVE_RETURN_IF_ERROR(loadgen::WriteFile(InDir(c, "sweep.csv"), loadgen::SweepCsv(sweep)));
  const std::string latency_png = InDir(c, "latency_vs_rate.png");
  const std::string goodput_png = InDir(c, "goodput_vs_rate.png");
  PDSERVE_RETURN_IF_ERROR(loadgen::RunGnuplot(loadgen::LatencyPlotScript(sweep, c.slo, latency_png),
                                              InDir(c, "latency_vs_rate.gp")));
  PDSERVE_RETURN_IF_ERROR(loadgen::RunGnuplot(loadgen::GoodputPlotScript(sweep, goodput_png),
                                              InDir(c, "goodput_vs_rate.gp")));
  std::printf("wrote %s/{sweep.json,sweep.csv,latency_vs_rate.png,goodput_vs_rate.png}\n",
              c.out_dir.c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status RunLoadgen() {
  PDSERVE_ASSIGN_OR_RETURN(Config c, ConfigFromFlags());
  const std::string direct = absl::GetFlag(FLAGS_direct_decode);
  if (!direct.empty() && c.protocol != "grpc") {
    return absl::InvalidArgumentError("--direct-decode needs --protocol grpc");
  }
  if (!c.sweep_rates.empty() && !loadgen::GnuplotAvailable()) {
    return absl::FailedPreconditionError(
        "--sweep-rates draws its plots with gnuplot, which is not installed (Debian: apt-get "
        "install gnuplot-nox)");
  }
  PDSERVE_RETURN_IF_ERROR(EnsureOutDir(c));
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<loadgen::Backend> backend, MakeBackend(c));
  PDSERVE_RETURN_IF_ERROR(backend->Probe());
  if (!c.sweep_rates.empty()) return Sweep(c, *backend);

  nlohmann::json json;
  if (c.requests > 0) {
    const bool use_rate = !c.closed_loop && (c.trace.empty() || c.rate_given);
    PDSERVE_ASSIGN_OR_RETURN(auto run, RunOnce(c, *backend, c.rate, use_rate, c.seed));
    json = loadgen::ReportJson(run.first, c.slo);
    json["config"] = ConfigJson(c, *backend, c.rate, run.first.measured);
    const std::string csv = loadgen::RequestsCsv(run.second);
    if (!c.csv.empty()) PDSERVE_RETURN_IF_ERROR(loadgen::WriteFile(c.csv, csv));
    if (!c.out_dir.empty()) {
      PDSERVE_RETURN_IF_ERROR(loadgen::WriteFile(InDir(c, "requests.csv"), csv));
    }
  }
  if (!direct.empty()) {
    loadgen::OverheadOptions o;
    o.direct_address = direct;
    PDSERVE_ASSIGN_OR_RETURN(const ClientOptions client_options, ClientOptionsFromFlags());
    o.tls = client_options.tls;
    o.pairs = absl::GetFlag(FLAGS_overhead_requests);
    o.warmup_pairs = std::max(2, c.warmup);
    o.prompt_tokens = c.prompt.min;
    o.output_tokens = c.output.min;
    o.vocab = c.vocab;
    o.seed = c.seed;
    o.timeout_s = c.run.timeout_s;
    auto& grpc = static_cast<loadgen::GrpcBackend&>(*backend);
    PDSERVE_ASSIGN_OR_RETURN(json["router_overhead"],
                             loadgen::MeasureRouterOverhead(grpc.client(), o));
  }
  const std::string text = json.dump(2) + "\n";
  if (!c.json.empty()) PDSERVE_RETURN_IF_ERROR(loadgen::WriteFile(c.json, text));
  if (!c.out_dir.empty())
    PDSERVE_RETURN_IF_ERROR(loadgen::WriteFile(InDir(c, "report.json"), text));
  return absl::OkStatus();
}

}  // namespace pdserve::cli
