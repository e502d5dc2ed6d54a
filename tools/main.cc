// pdserve: the command-line entry point. `pdserve <command> --flags...`; see `pdserve help`.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "core/base/logging.h"
#include "kernels/cpu_features.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"

namespace {

constexpr char kUsage[] =
    "pdserve <command> [flags]\n"
    "commands:\n"
    "  generate    --model PATH [--tokenizer PATH] --prompt TEXT --max-tokens N\n"
    "              [--temperature T] [--top-p P] [--top-k K] [--seed S] [--threads N]\n"
    "              [--device cpu|cuda]\n"
    "  eval        --model PATH [--tokenizer PATH] --text FILE --ctx N [--compare-to-baseline]\n"
    "              [KV technique flags]\n"
    "  calibrate   --model PATH --text FILE --out FILE [--ctx N] [--swiftkv-layer L]\n"
    "              [--across-kv G] [--zack [--zack-rho R | --zack-kept-fraction F]\n"
    "              [--zack-rank-multiple M]]\n"
    "  bench       --model PATH --prompt-tokens N --gen-tokens M [--decode-context C] [--batch B]\n"
    "              [--threads N] [--weights DT] [--device cpu|cuda] [KV technique flags]\n"
    "  make-model  --shape NAME | --dim D --hidden-dim H --layers L --heads N [--kv-heads K]\n"
    "              [--vocab V] [--seq-len S] --out PATH --format gguf|safetensors|llama2c\n"
    "              [--seed S] [--dtype f32|f16|bf16] [--tokenizer tokenizer.json|FILE]\n"
    "              [--rope-theta T] [--rope-scaling-factor F]\n"
    "  convert     --model PATH [--tokenizer PATH] --out PATH --format F [--dtype DT] [--shards "
    "N]\n"
    "  quantize    --model PATH [--tokenizer PATH] --out FILE.gguf --type q8_0|q4_0|q4_k_m\n"
    "  tokenize    (--model PATH [--tokenizer PATH] | --tokenizer FILE)\n"
    "              (--prompt TEXT | --file F | --json-inputs F.json) [--no-bos]: ids, a line each\n"
    "              | --chat CONVERSATION.json: the prompt the model's chat template renders\n"
    "  up          --model PATH [--calibration FILE] [KV technique flags] [--prefill-workers P]\n"
    "              [--decode-workers D] [--kvstores K] [--policy kv-aware] [--threads N]\n"
    "              [--prefill-threads N] [--decode-threads N] [--monolithic] [--device cpu|cuda]\n"
    "              [--listen HOST:PORT]\n"
    "              [--http-listen HOST:PORT] [--tls-dir DIR | --insecure] [--api-key-file F]:\n"
    "              the whole cluster (TLS from a throwaway CA unless --tls-dir or --insecure)\n"
    "  make-certs  --out DIR: a CA and a certificate per role for `up --tls-dir DIR`\n"
    "  client      --router HOST:PORT --prompt TEXT [--max-tokens N] [--timings]\n"
    "              [--tls-ca CA.pem] [--api-key K]\n"
    "  loadgen     --router HOST:PORT | --protocol http --url [https://]HOST:PORT\n"
    "              [--tls-ca CA.pem] [--api-key K]\n"
    "              [--rate R [--arrival poisson|fixed] | --concurrency N] [--requests N]\n"
    "              [--prompt-tokens N [--prompt-tokens-max M]]\n"
    "              [--gen-tokens N [--gen-tokens-max M]]\n"
    "              [--trace FILE [--trace-speedup X]] [--slo-ttft-ms T] [--slo-tpot-ms T]\n"
    "              [--sweep-rates 1,2,4] [--json F] [--csv F] [--out-dir D] [--direct-decode A]:\n"
    "              TTFT/TPOT/ITL, goodput and SLO attainment under load (docs/loadgen.md)\n"
    "  router      --model PATH [--listen A] [--policy least-tokens|kv-aware|round-robin]\n"
    "              [--max-inflight N] [--max-queued N] [--max-queued-mib M]\n"
    "              [--queue-timeout-seconds S] [--worker-silence-seconds S]\n"
    "  kvstore     [--listen A] [--pool-mib M] [--slot-kib K] [--lease-seconds S]\n"
    "  prefill     --model PATH --router A [--device cpu|cuda] [KV technique flags]\n"
    "  decode      --model PATH --router A [--device cpu|cuda]\n"
    "              (--kvstore A [KV technique flags] | --monolithic)\n"
    "Every service: [--listen A] gRPC, [--http-listen A] /metrics (and the router's OpenAI API),\n"
    "  [--drain-seconds S] the budget for in-flight work after SIGTERM, and\n"
    "  (--tls-cert C --tls-key K --tls-ca CA | --insecure) (docs/services.md, Security)\n"
    "KV technique flags (generate, eval, bench, up): --swiftkv-layer L [--across-kv G]\n"
    "  [--swiftkv-recovery] [--calibration FILE] [--zack [--zack-rho R]]\n"
    "  [--fp8 off|per-token|per-page | --kv-dtype f32|f16]\n"
    "  [--kcache-topn N [--kcache-full-layers L] [--kcache-sink S] [--kcache-recent R]\n"
    "  [--kcache-renormalize]]\n"
    "Run `pdserve --helpfull` for every flag.";

}  // namespace

int main(int argc, char** argv) {
  if (!pdserve::kernels::CpuIsSupported()) {
    std::fprintf(stderr, "error: this CPU lacks AVX2/FMA/F16C, which pdserve requires\n");
    return 1;
  }
  if (const std::string bad = pdserve::kernels::SimdOverrideError(); !bad.empty()) {
    std::fprintf(stderr, "error: %s\n", bad.c_str());
    return 1;
  }
  absl::SetProgramUsageMessage(kUsage);
  absl::StatusOr<std::vector<std::string>> expanded =
      pdserve::cli::ExpandFlagFiles(std::vector<std::string>(argv, argv + argc));
  if (!expanded.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(expanded.status().message()).c_str());
    return 1;
  }
  pdserve::cli::NormalizeFlagNames(*expanded);
  std::vector<char*> expanded_argv;  // points into *expanded, which outlives the parsed flags
  for (std::string& arg : *expanded) expanded_argv.push_back(arg.data());
  std::vector<char*> args =
      absl::ParseCommandLine(static_cast<int>(expanded_argv.size()), expanded_argv.data());
  if (absl::Status s = pdserve::SetLogLevel(absl::GetFlag(FLAGS_log_level)); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const std::string command = args.size() > 1 ? args[1] : "";
  if (args.size() > 2) {
    std::fprintf(stderr, "error: unexpected argument '%s'\n%s\n", args[2], kUsage);
    return 1;
  }
  absl::Status status;
  if (command == "generate") {
    status = pdserve::cli::RunGenerate();
  } else if (command == "eval") {
    status = pdserve::cli::RunEval();
  } else if (command == "bench") {
    status = pdserve::cli::RunBench();
  } else if (command == "make-certs") {
    status = pdserve::cli::RunMakeCerts();
  } else if (command == "make-model") {
    status = pdserve::cli::RunMakeModel();
  } else if (command == "convert") {
    status = pdserve::cli::RunConvert();
  } else if (command == "quantize") {
    status = pdserve::cli::RunQuantize();
  } else if (command == "tokenize") {
    status = pdserve::cli::RunTokenize();
  } else if (command == "calibrate") {
    status = pdserve::cli::RunCalibrate();
  } else if (command == "up") {
    status = pdserve::cli::RunUp();
  } else if (command == "client") {
    status = pdserve::cli::RunClient();
  } else if (command == "loadgen") {
    status = pdserve::cli::RunLoadgen();
  } else if (command == "router") {
    status = pdserve::cli::RunRouterCommand();
  } else if (command == "kvstore") {
    status = pdserve::cli::RunKvStoreCommand();
  } else if (command == "prefill") {
    status = pdserve::cli::RunPrefillCommand();
  } else if (command == "decode") {
    status = pdserve::cli::RunDecodeCommand();
  } else if (command == "help" || command.empty()) {
    std::fprintf(command.empty() ? stderr : stdout, "%s\n", kUsage);
    return command.empty() ? 1 : 0;
  } else {
    std::fprintf(stderr, "error: unknown command '%s'\n%s\n", command.c_str(), kUsage);
    return 1;
  }
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
