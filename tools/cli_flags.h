// Flags of the pdserve CLI, shared by its subcommands (each reads the ones it documents), and the
// helpers that turn them into validated configs. Flags are only read on the CLI's main thread.
#ifndef PDSERVE_TOOLS_CLI_FLAGS_H_
#define PDSERVE_TOOLS_CLI_FLAGS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "core/engine/llama_engine.h"
#include "core/formats/model_loader.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, tokenizer);
ABSL_DECLARE_FLAG(std::string, prompt);
ABSL_DECLARE_FLAG(int, max_tokens);
ABSL_DECLARE_FLAG(float, temperature);
ABSL_DECLARE_FLAG(float, top_p);
ABSL_DECLARE_FLAG(int, top_k);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(std::string, weights);
ABSL_DECLARE_FLAG(std::string, text);
ABSL_DECLARE_FLAG(int, ctx);
ABSL_DECLARE_FLAG(int, prompt_tokens);
ABSL_DECLARE_FLAG(int, gen_tokens);
ABSL_DECLARE_FLAG(int, repetitions);
ABSL_DECLARE_FLAG(std::string, shape);
ABSL_DECLARE_FLAG(std::string, family);
ABSL_DECLARE_FLAG(int, dim);
ABSL_DECLARE_FLAG(int, hidden_dim);
ABSL_DECLARE_FLAG(int, layers);
ABSL_DECLARE_FLAG(int, heads);
ABSL_DECLARE_FLAG(int, kv_heads);
ABSL_DECLARE_FLAG(int, head_dim);
ABSL_DECLARE_FLAG(int, vocab);
ABSL_DECLARE_FLAG(int, seq_len);
ABSL_DECLARE_FLAG(bool, untied);
ABSL_DECLARE_FLAG(float, rope_theta);
ABSL_DECLARE_FLAG(float, rope_scaling_factor);
ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(std::string, format);
ABSL_DECLARE_FLAG(std::string, dtype);
ABSL_DECLARE_FLAG(int, shards);
ABSL_DECLARE_FLAG(std::string, type);
ABSL_DECLARE_FLAG(std::string, log_level);

namespace pdserve::cli {

// --model and --tokenizer (a flag struct, tools/flag_struct.h).
struct ModelFlags {
  std::string model;
  std::string tokenizer;

  template <typename Visitor>
  void VisitFlags(Visitor&& visit) {
    visit("model", model);
    visit("tokenizer", tokenizer);
  }
};

// --threads, --weights and --device (a flag struct).
struct EngineFlags {
  int threads = 0;
  std::string weights;
  std::string device;

  template <typename Visitor>
  void VisitFlags(Visitor&& visit) {
    visit("threads", threads);
    visit("weights", weights);
    visit("device", device);
  }
};

// The model `flags` name, loaded; InvalidArgument when --model is missing.
absl::StatusOr<LoadedModel> LoadModelFrom(const ModelFlags& flags);
// LoadModelFrom the current flags.
absl::StatusOr<LoadedModel> LoadModelFromFlags();

// Engine options from --threads, --weights and --device (one sequence); callers set the batch and
// context limits once the model is known, and ApplyAutoWeights. Call before loading, so flag
// errors come first.
absl::StatusOr<EngineOptions> EngineOptionsFrom(const EngineFlags& flags);
// EngineOptionsFrom the current flags.
absl::StatusOr<EngineOptions> EngineOptionsFromFlags();

// The dtype of the first plain layer matrix (f32, f16 or bf16); f16 when every one is quantized.
DType StoredWeightDtype(const ModelWeights& weights);

// With --weights auto (the default), the engine runs the weights as the file stores them:
// options.weight_dtype = StoredWeightDtype(weights).
void ApplyAutoWeights(const ModelWeights& weights, const EngineFlags& flags,
                      EngineOptions& options);
// ApplyAutoWeights with the current flags.
void ApplyAutoWeights(const ModelWeights& weights, EngineOptions& options);

// The layer matrices and the classifier: what one decode step streams.
std::vector<const Tensor*> StreamedMatrices(const ModelWeights& weights);
// "f32", or the formats the streamed matrices run in ("q4_k+q6_k"; plain ones as `dtype`).
std::string WeightsLabel(const ModelWeights& weights, DType dtype);
// How `engine` runs `weights`, for logs: "2 threads, f16 weights, avx512 kernels".
std::string DescribeEngine(const ModelWeights& weights, const Engine& engine);

// The whole of the file `path` given by `flag`; NotFound naming both when it cannot be read.
absl::StatusOr<std::string> ReadTextFile(const std::string& path, std::string_view flag = "--text");

// Replaces each "--flagfile=F" or "--flagfile F" in `args` by the flags in F, one per line (blank
// lines and lines starting with '#' skipped; a file may name further flag files, 8 deep at most),
// so that flag files take the dashed spellings too. Relative paths inside are the caller's, not
// the file's. NotFound naming the file when it cannot be read; InvalidArgument for a missing name
// or files nested too deep.
absl::StatusOr<std::vector<std::string>> ExpandFlagFiles(std::vector<std::string> args);

// Rewrites "--max-tokens=3" as "--max_tokens=3" (flag names only) so that the documented dashed
// spellings work with Abseil flags. args[0] is the program.
void NormalizeFlagNames(std::vector<std::string>& args);

}  // namespace pdserve::cli

#endif  // PDSERVE_TOOLS_CLI_FLAGS_H_
