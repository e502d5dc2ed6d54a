// pdserve calibrate: fits the SwiftKV recovery and/or the ZACK bases on a text corpus and writes
// one calibration file (core/calib/calibration.h). The text is tokenized once and cut into chunks
// of --ctx tokens, each starting with BOS, as eval does; --calibration-chunks caps how many are
// streamed. Progress goes to stderr; the last stdout line is a JSON summary with the content hash.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/compress/calibrator.h"
#include "nlohmann/json.hpp"
#include "tools/cli_flags.h"
#include "tools/commands.h"
#include "tools/profile_flags.h"

ABSL_FLAG(double, ridge, 1e-4, "calibrate: ridge λ relative to the mean diagonal of XᵀX");
ABSL_FLAG(double, zack_kept_fraction, 0.0,
          "calibrate: choose ZACK ranks keeping this fraction of the K/V dimensions (0 = by ρ)");
ABSL_FLAG(int, zack_rank_multiple, 0,
          "calibrate: ZACK ranks in multiples of this, rounded up, the removal rate chosen so that "
          "they meet --zack-kept-fraction (whole vectors, which decode reads fastest); 1 = as "
          "chosen; 0 = automatic (16 for heads of ≥ 64 dimensions in multiples of 16, else 1)");
ABSL_FLAG(int, calibration_chunks, 0, "calibrate: chunks of the text to stream; 0 = all");

namespace pdserve::cli {
namespace {

absl::StatusOr<CalibrateOptions> CalibrateOptionsFromFlags() {
  CalibrateOptions o;
  o.swiftkv_layer = absl::GetFlag(FLAGS_swiftkv_layer);
  o.across_kv = absl::GetFlag(FLAGS_across_kv);
  o.ridge = absl::GetFlag(FLAGS_ridge);
  o.zack = absl::GetFlag(FLAGS_zack);
  o.zack_rho = std::max(0.0, absl::GetFlag(FLAGS_zack_rho));
  o.zack_kept_fraction = absl::GetFlag(FLAGS_zack_kept_fraction);
  o.zack_rank_multiple = absl::GetFlag(FLAGS_zack_rank_multiple);
  o.num_threads = absl::GetFlag(FLAGS_threads);
  if (absl::GetFlag(FLAGS_out).empty()) return absl::InvalidArgumentError("--out is required");
  if (absl::GetFlag(FLAGS_calibration_chunks) < 0) {
    return absl::InvalidArgumentError("--calibration-chunks must be ≥ 0");
  }
  auto log = GetLogger("calibrate");
  o.progress = [log](const char* phase, int done, int total) {
    if (done == total || done % 25 == 0) log->info("{}: {}/{} chunks", phase, done, total);
  };
  return o;
}

}  // namespace

absl::Status RunCalibrate() {
  PDSERVE_ASSIGN_OR_RETURN(CalibrateOptions options, CalibrateOptionsFromFlags());
  const std::string text_path = absl::GetFlag(FLAGS_text);
  PDSERVE_ASSIGN_OR_RETURN(std::string text, ReadTextFile(text_path));
  PDSERVE_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFromFlags());
  const int ctx = absl::GetFlag(FLAGS_ctx);
  if (ctx < 2 || ctx > model.weights.config.max_seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ctx ", ctx, " is outside [2, ", model.weights.config.max_seq_len, "]"));
  }
  const std::vector<int> tokens = model.tokenizer->Encode(text, /*add_bos=*/true);
  std::vector<std::vector<int32_t>> chunks;
  const size_t limit = absl::GetFlag(FLAGS_calibration_chunks);
  for (size_t start = 0; start + ctx <= tokens.size(); start += ctx) {
    if (limit > 0 && chunks.size() == limit) break;
    chunks.emplace_back(tokens.begin() + start, tokens.begin() + start + ctx);
    if (model.tokenizer->add_bos()) chunks.back()[0] = model.tokenizer->bos_id();
  }
  if (chunks.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--text has ", tokens.size(), " tokens, fewer than one chunk of ", ctx));
  }
  PDSERVE_ASSIGN_OR_RETURN(Calibration calibration,
                           Calibrate(model.weights, chunks, options, text_path));
  const std::string out = absl::GetFlag(FLAGS_out);
  PDSERVE_RETURN_IF_ERROR(WriteCalibrationFile(out, calibration));
  nlohmann::json report = {{"out", out},
                           {"content_hash", absl::StrFormat("%016x", CalibrationHash(calibration))},
                           {"tokens", calibration.tokens}};
  if (calibration.swiftkv) {
    report["swiftkv_mse_init"] = calibration.swiftkv->mse_init;
    report["swiftkv_mse_fit"] = calibration.swiftkv->mse_fit;
  }
  if (calibration.zack) {
    report["zack_removal_rate"] = calibration.zack->removal_rate;
    int kept = 0, total = 0;
    for (const auto& layer : calibration.zack->heads) {
      for (const ZackHeadBasis& head : layer) {
        kept += head.qk_rank + head.vo_rank;
        total += 2 * calibration.model.head_dim;
      }
    }
    report["zack_kept_fraction"] = static_cast<double>(kept) / total;
  }
  std::printf("%s\n", report.dump().c_str());
  return absl::OkStatus();
}

}  // namespace pdserve::cli
