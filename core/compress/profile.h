// CompressionProfile: the user's choice of techniques (CLI flags, worker configuration) and
// PrepareModel, which turns a model plus an optional calibration into what LlamaEngine runs:
// weights with their SwiftKV structure and the KV compression options.
//
//  - SwiftKV: a SwiftKV checkpoint runs as trained; a plain model is rewired with
//    (swiftkv_layer, across_kv) — the training initialization — and, with swiftkv_recovery, takes
//    the closed-form projections fitted by `pdserve calibrate` for that same (l, G).
//  - ZACK: bases and ranks from the calibration; zack_rho ≥ 0 re-chooses every rank from the stored
//    eigenvalues.
//  - FP8, f16 KV, KCache and token retention pass through to KvCompression.
#ifndef PDSERVE_CORE_COMPRESS_PROFILE_H_
#define PDSERVE_CORE_COMPRESS_PROFILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/calib/calibration.h"
#include "core/engine/kv_compression.h"
#include "core/model/model_weights.h"

namespace pdserve {

struct CompressionProfile {
  int swiftkv_layer = -1;  // -1: the checkpoint's own SwiftKV, or none for a plain model
  int across_kv = 1;       // AcrossKV group size when rewiring
  bool swiftkv_recovery = false;
  bool zack = false;
  double zack_rho = -1.0;  // < 0: the calibration's ranks
  KvScaleMode fp8 = KvScaleMode::kNone;
  bool f16_kv = false;  // f16 KV elements instead of f32 (without FP8)
  KCacheOptions kcache;
  RetentionOptions retention;  // token retention (KVCrush); off unless enabled()

  bool needs_calibration() const { return swiftkv_recovery || zack; }
  // "swiftkv l=3 G=1 +recovery, zack rho=0.1, fp8 per-token, kcache N=32": for reports.
  std::string Describe() const;
};

struct PreparedModel {
  ModelWeights weights;
  KvCompression compression;
};

// InvalidArgument for a profile that does not fit the model (l out of range, G not dividing
// L − l, a SwiftKV checkpoint asked for another l), a calibration for another model shape, or a
// profile needing a calibration (or a part of one) that `calibration` lacks.
absl::StatusOr<PreparedModel> PrepareModel(const ModelWeights& weights,
                                           const CompressionProfile& profile,
                                           const Calibration* calibration);

// The calibration's model shape for `config`.
CalibrationModel CalibrationModelOf(const ModelConfig& config);

}  // namespace pdserve

#endif  // PDSERVE_CORE_COMPRESS_PROFILE_H_
