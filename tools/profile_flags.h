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
ABSL_DECLARE_FLAG(bool, zack);
ABSL_DECLARE_FLAG(double, zack_rho);

namespace pdserve::cli {

// The KV technique flags and --calibration (a flag struct, tools/flag_struct.h).
struct ProfileFlags {
  int swiftkv_layer = -1;
  int across_kv = 1;
  bool swiftkv_recovery = false;
  std::string calibration;
  bool zack = false;
  double zack_rho = -1;
  std::string fp8;
  std::string kv_dtype;
  int kcache_topn = 0;
  int kcache_full_layers = 0;
  int kcache_sink = 0;
  int kcache_recent = 0;
  bool kcache_renormalize = false;
  std::string kvcrush_budget;
  std::string kvcrush_policy;
  double kvcrush_ratio = 0;
  double kvcrush_weight = 0;
  double kvcrush_weight_cap = 0;
  int kvcrush_window = 0;
  int kvcrush_max_tokens = 0;
  int kvcrush_pool = 0;
  int kvcrush_sink = 0;
  int kvcrush_recent = 0;
  std::string kvcrush_granularity;
  std::string kvcrush_anchor;
  uint64_t kvcrush_seed = 0;

  template <typename Visitor>
  void VisitFlags(Visitor&& visit) {
    visit("swiftkv_layer", swiftkv_layer);
    visit("across_kv", across_kv);
    visit("swiftkv_recovery", swiftkv_recovery);
    visit("calibration", calibration);
    visit("zack", zack);
    visit("zack_rho", zack_rho);
    visit("fp8", fp8);
    visit("kv_dtype", kv_dtype);
    visit("kcache_topn", kcache_topn);
    visit("kcache_full_layers", kcache_full_layers);
    visit("kcache_sink", kcache_sink);
    visit("kcache_recent", kcache_recent);
    visit("kcache_renormalize", kcache_renormalize);
    visit("kvcrush_budget", kvcrush_budget);
    visit("kvcrush_policy", kvcrush_policy);
    visit("kvcrush_ratio", kvcrush_ratio);
    visit("kvcrush_weight", kvcrush_weight);
    visit("kvcrush_weight_cap", kvcrush_weight_cap);
    visit("kvcrush_window", kvcrush_window);
    visit("kvcrush_max_tokens", kvcrush_max_tokens);
    visit("kvcrush_pool", kvcrush_pool);
    visit("kvcrush_sink", kvcrush_sink);
    visit("kvcrush_recent", kvcrush_recent);
    visit("kvcrush_granularity", kvcrush_granularity);
    visit("kvcrush_anchor", kvcrush_anchor);
    visit("kvcrush_seed", kvcrush_seed);
  }
};

// The profile `flags` describe; InvalidArgument for values out of range.
absl::StatusOr<CompressionProfile> ProfileFrom(const ProfileFlags& flags);
// ProfileFrom the current flags.
absl::StatusOr<CompressionProfile> ProfileFromFlags();

// The model and KV compression to run: the profile applied to `weights` with the calibration
// file `calibration_path` (read only when not empty). Logs the profile and, with a calibration,
// its content hash, which it also stores in *calibration_hash when given (0 without one).
absl::StatusOr<PreparedModel> PrepareModelFrom(const ModelWeights& weights,
                                               const CompressionProfile& profile,
                                               const std::string& calibration_path,
                                               uint64_t* calibration_hash = nullptr);
// PrepareModelFrom with the current --calibration.
absl::StatusOr<PreparedModel> PrepareModelFromFlags(const ModelWeights& weights,
                                                    const CompressionProfile& profile,
                                                    uint64_t* calibration_hash = nullptr);

}  // namespace pdserve::cli

#endif  // PDSERVE_TOOLS_PROFILE_FLAGS_H_
