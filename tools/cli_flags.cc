#include "tools/cli_flags.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "kernels/cpu_features.h"
#include "tools/flag_struct.h"

ABSL_FLAG(std::string, model, "", "Model: llama2.c .bin, .gguf file or Hugging Face directory");
ABSL_FLAG(std::string, tokenizer, "", "Tokenizer file (tokenizer.bin or SentencePiece .model)");
ABSL_FLAG(std::string, prompt, "", "Prompt text");
ABSL_FLAG(int, max_tokens, 256, "Tokens to generate at most");
ABSL_FLAG(float, temperature, 0.0f, "Sampling temperature; 0 is greedy");
ABSL_FLAG(float, top_p, 1.0f, "Nucleus sampling mass in (0, 1]");
ABSL_FLAG(int, top_k, 0, "Sample among the k most likely tokens; 0 = all");
ABSL_FLAG(uint64_t, seed, 0, "Sampling seed");
ABSL_FLAG(int, threads, 0, "Worker threads; 0 = all cores, or 1 for models too small to split");
ABSL_FLAG(std::string, weights, "auto",
          "Weight dtype the engine runs: auto (as the file stores its plain matrices: f32, f16 "
          "or bf16; f16 beside a quantized file's matrices, which stay quantized), f32, f16 or "
          "bf16");
ABSL_FLAG(std::string, device, "cpu",
          "Where generate, eval, bench, prefill and decode run the model: cpu, or cuda (a CUDA "
          "build and a GPU)");
ABSL_FLAG(std::string, text, "", "Text file to evaluate");
ABSL_FLAG(int, ctx, 256, "Evaluation context (tokens per chunk)");
ABSL_FLAG(int, prompt_tokens, 512, "Benchmark prompt length");
ABSL_FLAG(int, gen_tokens, 128, "Benchmark generated tokens");
ABSL_FLAG(int, repetitions, 5, "Benchmark repetitions after one warm-up");
ABSL_FLAG(std::string, shape, "",
          "Named model shape (stories260K, stories15M, stories42M, stories110M, llama3.2-1B, "
          "qwen2.5-0.5B, qwen3-0.6B, qwen3-1.7B)");
ABSL_FLAG(std::string, family, "",
          "make-model: architecture family (llama, mistral, qwen2, qwen3); empty = the shape's "
          "(llama without --shape)");
ABSL_FLAG(int, dim, 0, "Model width (make-model without --shape)");
ABSL_FLAG(int, hidden_dim, 0, "FFN width");
ABSL_FLAG(int, layers, 0, "Layers");
ABSL_FLAG(int, heads, 0, "Query heads");
ABSL_FLAG(int, kv_heads, 0, "KV heads; 0 = heads");
ABSL_FLAG(int, head_dim, 0, "Width of each head; 0 = dim / heads");
ABSL_FLAG(int, vocab, 32000, "Vocabulary size");
ABSL_FLAG(int, seq_len, 0, "Maximum context; 0 = the --shape's own, or 2048");
ABSL_FLAG(bool, untied, false, "Give the model its own classifier instead of the tied embedding");
ABSL_FLAG(float, rope_theta, 0, "make-model: RoPE base; 0 = the shape's (10000 without --shape)");
ABSL_FLAG(float, rope_scaling_factor, -1,
          "make-model: Llama 3.1 RoPE scaling factor (low 1, high 4, original context 8192); "
          "0 = none; -1 = the shape's");
ABSL_FLAG(std::string, out, "", "Output path (file, or directory for safetensors)");
ABSL_FLAG(std::string, format, "gguf", "Output format: gguf, safetensors or llama2c");
ABSL_FLAG(std::string, dtype, "f32", "Output dtype: f32, f16 or bf16");
ABSL_FLAG(int, shards, 1, "safetensors shards");
ABSL_FLAG(std::string, type, "", "pdserve quantize: q8_0, q4_0 or q4_k_m");
ABSL_FLAG(std::string, log_level, "info", "Log level: trace, debug, info, warn, error, off");

namespace pdserve::cli {

absl::StatusOr<LoadedModel> LoadModelFrom(const ModelFlags& flags) {
  const std::string& path = flags.model;
  if (path.empty()) return absl::InvalidArgumentError("--model is required");
  PDSERVE_ASSIGN_OR_RETURN(LoadedModel model, LoadModel(path, flags.tokenizer));
  GetLogger("cli")->info("loaded {} model {} ({}; {:.2f}M parameters)",
                         ModelFormatName(model.format), path, model.weights.config.Describe(),
                         model.weights.config.NumParameters() / 1e6);
  return model;
}

absl::StatusOr<LoadedModel> LoadModelFromFlags() { return LoadModelFrom(FlagsTo<ModelFlags>()); }

DType StoredWeightDtype(const ModelWeights& weights) {
  for (const LayerWeights& layer : weights.layers) {
    for (const Tensor* t :
         {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w1, &layer.w2, &layer.w3}) {
      if (!IsQuantized(t->dtype)) return t->dtype;
    }
  }
  return DType::kF16;
}

std::vector<const Tensor*> StreamedMatrices(const ModelWeights& weights) {
  std::vector<const Tensor*> out = {&weights.classifier};
  for (const LayerWeights& l : weights.layers) {
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) out.push_back(t);
  }
  return out;
}

std::string WeightsLabel(const ModelWeights& weights, DType dtype) {
  std::set<std::string> names;
  for (const Tensor* t : StreamedMatrices(weights)) {
    names.insert(DTypeName(IsQuantized(t->dtype) ? t->dtype : dtype));
  }
  return absl::StrJoin(names, "+");
}

std::string DescribeEngine(const ModelWeights& weights, const Engine& engine) {
  const EngineOptions& options = engine.options();
  const int threads = options.num_threads;
  return absl::StrCat(threads, threads == 1 ? " thread, " : " threads, ",
                      WeightsLabel(weights, options.weight_dtype), " weights, ",
                      options.device == Device::kCpu
                          ? kernels::SimdLevelName(kernels::ActiveSimdLevel())
                          : DeviceName(options.device),
                      " kernels");
}

absl::StatusOr<EngineOptions> EngineOptionsFrom(const EngineFlags& flags) {
  EngineOptions options;
  if (flags.weights != "auto") {
    PDSERVE_ASSIGN_OR_RETURN(options.weight_dtype, ParseDType(flags.weights));
  }
  PDSERVE_ASSIGN_OR_RETURN(options.device, ParseDevice(flags.device));
  const int threads = flags.threads;
  if (threads < 0) return absl::InvalidArgumentError("--threads must be ≥ 0 (0 = automatic)");
  options.num_threads = threads;
  options.max_sequences = 1;
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  return options;
}

absl::StatusOr<EngineOptions> EngineOptionsFromFlags() {
  return EngineOptionsFrom(FlagsTo<EngineFlags>());
}

void ApplyAutoWeights(const ModelWeights& weights, const EngineFlags& flags,
                      EngineOptions& options) {
  if (flags.weights == "auto") options.weight_dtype = StoredWeightDtype(weights);
}

void ApplyAutoWeights(const ModelWeights& weights, EngineOptions& options) {
  ApplyAutoWeights(weights, FlagsTo<EngineFlags>(), options);
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path, std::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", std::string(flag), " file '", path, "'"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

namespace {

// Whether `--name` takes no separate value: a bool flag, or the "no" form of one.
bool IsBoolFlag(std::string_view name) {
  for (std::string_view n : {name, name.substr(name.rfind("no", 0) == 0 ? 2 : name.size())}) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag({n.data(), n.size()});
    if (flag != nullptr && flag->IsOfType<bool>()) return true;
  }
  return name == "help" || name == "helpfull" || name == "helpshort" || name == "version" ||
         name == "only_check_args";
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandFlagFiles(std::vector<std::string> args) {
  constexpr int kMaxDepth = 8;
  for (int depth = 0;; ++depth) {
    std::vector<std::string> out;
    bool expanded = false;
    for (size_t i = 0; i < args.size(); ++i) {
      std::string path;
      if (args[i] == "--flagfile" || args[i] == "--flag-file") {
        if (i + 1 == args.size()) return absl::InvalidArgumentError("--flagfile needs a file");
        path = args[++i];
      } else if (args[i].rfind("--flagfile=", 0) == 0 || args[i].rfind("--flag-file=", 0) == 0) {
        path = args[i].substr(args[i].find('=') + 1);
      } else {
        out.push_back(std::move(args[i]));
        continue;
      }
      if (depth == kMaxDepth) {
        return absl::InvalidArgumentError(
            absl::StrCat("--flagfile ", path, ": flag files nest more than ", kMaxDepth, " deep"));
      }
      PDSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, "--flagfile"));
      std::istringstream lines(text);
      for (std::string line; std::getline(lines, line);) {
        const size_t begin = line.find_first_not_of(" \t\r");
        if (begin == std::string::npos || line[begin] == '#') continue;
        out.push_back(line.substr(begin, line.find_last_not_of(" \t\r") + 1 - begin));
      }
      expanded = true;
    }
    args = std::move(out);
    if (!expanded) return args;
  }
}

void NormalizeFlagNames(std::vector<std::string>& args) {
  // Every `--flag` without `=` that is not a bool consumes the next argument, which is left
  // untouched (a prompt may well start with "--").
  bool next_is_value = false;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (next_is_value || arg.size() < 3 || arg[0] != '-' || arg[1] != '-') {
      next_is_value = false;
      continue;
    }
    const size_t end = std::min(arg.find('='), arg.size());
    for (size_t c = 2; c < end; ++c) {
      if (arg[c] == '-') arg[c] = '_';
    }
    next_is_value = end == arg.size() && !IsBoolFlag(std::string_view(arg).substr(2, end - 2));
  }
}

}  // namespace pdserve::cli
