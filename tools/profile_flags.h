// Flags that choose the KV techniques (SwiftKV, AcrossKV, ZACK, FP8, KCache, token retention) for
// generate, eval and bench, and the calibration file they may need.
#ifndef PDSERVE_TOOLS_PROFILE_FLAGS_H_
#define PDSERVE_TOOLS_PROFILE_FLAGS_H_

#include <optional>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "core/calib/calibration.h"
#include "core/compress/profile.h"
#include "core/model/model_weights.h"

ABSL_DECLARE_FLAG(int, swiftkv_layer);
ABSL_DECLARE_FLAG(int, across_kv);
ABSL_DECLARE_FLAG(bool, swiftkv_recovery);
ABSL_DECLARE_FLAG(std::string, calibration);
ABSL_DECLARE_FLAG(bool, zack);
ABSL_DECLARE_FLAG(double, zack_rho);
ABSL_DECLARE_FLAG(std::string, fp8);
ABSL_DECLARE_FLAG(int, kcache_topn);
ABSL_DECLARE_FLAG(int, kcache_full_layers);
ABSL_DECLARE_FLAG(int, kcache_sink);
ABSL_DECLARE_FLAG(int, kcache_recent);
ABSL_DECLARE_FLAG(bool, kcache_renormalize);

namespace pdserve::cli {

// The profile the flags describe; InvalidArgument for values out of range.
absl::StatusOr<CompressionProfile> ProfileFromFlags();

// The model and KV compression to run: the profile applied to `weights` with the --calibration
// file (read only when given). Logs the profile and, with a calibration, its content hash, which
// it also stores in *calibration_hash when given (0 without a calibration).
absl::StatusOr<PreparedModel> PrepareModelFromFlags(const ModelWeights& weights,
                                                    const CompressionProfile& profile,
                                                    uint64_t* calibration_hash = nullptr);

}  // namespace pdserve::cli

#endif  // PDSERVE_TOOLS_PROFILE_FLAGS_H_
