// pdserve make-model: writes a deterministic random-weight model (a named shape or explicit dims)
// with a synthetic vocabulary. pdserve convert: rewrites a model in another format or dtype.
// pdserve quantize: writes a model as a GGUF file in one of llama-quantize's mixtures.
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/formats/gguf_model.h"
#include "core/formats/model_loader.h"
#include "core/formats/model_writer.h"
#include "core/formats/quant_mixture.h"
#include "core/model/random_model.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"

namespace pdserve::cli {
namespace {

absl::StatusOr<ModelConfig> ConfigFromFlags() {
  const std::string shape = absl::GetFlag(FLAGS_shape);
  ModelConfig c;
  if (!shape.empty()) {
    PDSERVE_ASSIGN_OR_RETURN(c, ShapeByName(shape));
  } else {
    c.dim = absl::GetFlag(FLAGS_dim);
    c.hidden_dim = absl::GetFlag(FLAGS_hidden_dim);
    c.n_layers = absl::GetFlag(FLAGS_layers);
    c.n_heads = absl::GetFlag(FLAGS_heads);
    c.n_kv_heads = absl::GetFlag(FLAGS_kv_heads) > 0 ? absl::GetFlag(FLAGS_kv_heads) : c.n_heads;
    c.SetHeadDim(absl::GetFlag(FLAGS_head_dim));
    c.vocab_size = absl::GetFlag(FLAGS_vocab);
    c.max_seq_len = 2048;
  }
  if (const int seq_len = absl::GetFlag(FLAGS_seq_len); seq_len != 0) {
    if (seq_len < 1) return absl::InvalidArgumentError("--seq-len must be ≥ 1");
    c.max_seq_len = seq_len;
  }
  if (const std::string family = absl::GetFlag(FLAGS_family); !family.empty()) {
    const FamilyTraits* traits = FamilyByName(family);
    if (traits == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--family '", family, "' is unknown (known: ", FamilyNames(), ")"));
    }
    c.family = traits->family;
  }
  c.tied_embeddings = !absl::GetFlag(FLAGS_untied);
  if (absl::GetFlag(FLAGS_rope_theta) != 0) c.rope_theta = absl::GetFlag(FLAGS_rope_theta);
  if (absl::GetFlag(FLAGS_rope_scaling_factor) >= 0) {
    c.rope_scaling.factor = absl::GetFlag(FLAGS_rope_scaling_factor);
  }
  PDSERVE_RETURN_IF_ERROR(c.Validate());
  if (c.vocab_size < 259 && absl::GetFlag(FLAGS_tokenizer).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--vocab ", c.vocab_size, " is too small for the synthetic vocabulary (≥ 259)"));
  }
  return c;
}

absl::StatusOr<WriteOptions> WriteOptionsFromFlags() {
  WriteOptions options;
  PDSERVE_ASSIGN_OR_RETURN(options.format, ParseModelFormat(absl::GetFlag(FLAGS_format)));
  PDSERVE_ASSIGN_OR_RETURN(options.dtype, ParseDType(absl::GetFlag(FLAGS_dtype)));
  options.num_shards = absl::GetFlag(FLAGS_shards);
  if (options.num_shards < 1) return absl::InvalidArgumentError("--shards must be ≥ 1");
  if (absl::GetFlag(FLAGS_out).empty()) return absl::InvalidArgumentError("--out is required");
  return options;
}

}  // namespace

// --tokenizer's vocabulary (and chat template), padded with unused tokens up to the shape's
// vocabulary size as llama.cpp's converter pads Qwen's; without --shape the model takes the
// tokenizer's size. Else the synthetic vocabulary.
absl::StatusOr<Vocabulary> VocabularyFromFlags(ModelConfig& config) {
  const std::string path = absl::GetFlag(FLAGS_tokenizer);
  if (path.empty()) return SyntheticVocabulary(config.vocab_size);
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                           LoadTokenizerFile(path, /*expected_vocab_size=*/0));
  Vocabulary vocab = tokenizer->ExportVocabulary();
  if (absl::GetFlag(FLAGS_shape).empty()) config.vocab_size = vocab.size();
  if (vocab.size() > config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("--tokenizer ", path, " has ", vocab.size(),
                                                   " tokens, more than the shape's vocabulary (",
                                                   config.vocab_size, ")"));
  }
  PadVocabulary(vocab, config.vocab_size);
  return vocab;
}

absl::Status RunMakeModel() {
  PDSERVE_ASSIGN_OR_RETURN(ModelConfig config, ConfigFromFlags());
  PDSERVE_ASSIGN_OR_RETURN(Vocabulary vocab, VocabularyFromFlags(config));
  PDSERVE_ASSIGN_OR_RETURN(WriteOptions options, WriteOptionsFromFlags());
  const std::string out = absl::GetFlag(FLAGS_out);
  auto log = GetLogger("make-model");
  log->info("generating {} ({:.1f}M parameters, seed {})", config.Describe(),
            config.NumParameters() / 1e6, absl::GetFlag(FLAGS_seed));
  ModelWeights weights = MakeRandomModel(config, absl::GetFlag(FLAGS_seed));
  log->info("writing {} {} to {}", ModelFormatName(options.format), DTypeName(options.dtype), out);
  PDSERVE_RETURN_IF_ERROR(WriteModel(out, weights, vocab, options));
  log->info("done");
  return absl::OkStatus();
}

absl::Status RunConvert() {
  PDSERVE_ASSIGN_OR_RETURN(WriteOptions options, WriteOptionsFromFlags());
  PDSERVE_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFromFlags());
  const std::string out = absl::GetFlag(FLAGS_out);
  GetLogger("convert")->info("writing {} {} to {}", ModelFormatName(options.format),
                             DTypeName(options.dtype), out);
  return WriteModel(out, model.weights, model.tokenizer->ExportVocabulary(), options);
}

absl::Status RunQuantize() {
  PDSERVE_ASSIGN_OR_RETURN(QuantMixture mixture, ParseQuantMixture(absl::GetFlag(FLAGS_type)));
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return absl::InvalidArgumentError("--out is required");
  PDSERVE_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFromFlags());
  auto log = GetLogger("quantize");
  const int n_layers = model.weights.config.n_layers;
  log->info("quantizing to {} ({} layers)", QuantMixtureName(mixture), n_layers);
  PDSERVE_ASSIGN_OR_RETURN(QuantizedWeights quantized,
                           QuantizeWeights(model.weights, mixture, [&](int layer) {
                             log->info("layer {}/{} done", layer + 1, n_layers);
                           }));
  std::string types;
  for (auto [dtype, count] : quantized.type_counts) {
    absl::StrAppend(&types, types.empty() ? "" : ", ", count, " ", DTypeName(dtype));
  }
  log->info("matrices: {}", types);
  if (quantized.fallbacks > 0) {
    log->warn(
        "{} matrices have rows that are not whole blocks of their type's first choice and "
        "were stored in a fallback type (as llama-quantize does)",
        quantized.fallbacks);
  }
  PDSERVE_RETURN_IF_ERROR(WriteTypedGgufModel(
      out, quantized.weights, model.tokenizer->ExportVocabulary(), QuantMixtureFileType(mixture)));
  log->info("wrote {}", out);
  return absl::OkStatus();
}

}  // namespace pdserve::cli
