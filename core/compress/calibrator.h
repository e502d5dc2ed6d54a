// Calibrate: streams calibration sequences through the model and fits what `pdserve calibrate`
// writes (core/calib/calibration.h):
//
//  1. SwiftKV recovery (swiftkv_layer ≥ 0): a plain forward pass collects x = RMSNorm(h_l) with
//     layer l's attention norm and the teacher targets Y_j = RMSNorm_j(h_j)·Wk_jᵀ (and Wv) of
//     every later layer; each AcrossKV leader gets W = (XᵀX + λI)⁻¹XᵀȲ, Ȳ the group's mean
//     target, λ = ridge · trace(XᵀX)/dim, solved in fp64. A fit worse than the plain initialization
//     (the group mean of the original projections) on calibration MSE is replaced by it.
//  2. ZACK (zack): a pass of the model as it will run (SwiftKV applied) accumulates per cache
//     layer and KV head the Gram matrices of post-RoPE [q of every reading layer's group heads; k]
//     and of [v; o-projection slices of every reading layer], eigendecomposes them, and picks the
//     ranks by removal rate ρ, or the ρ meeting a target kept fraction of the cache's dimensions.
#ifndef PDSERVE_CORE_COMPRESS_CALIBRATOR_H_
#define PDSERVE_CORE_COMPRESS_CALIBRATOR_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/calib/calibration.h"
#include "core/model/model_weights.h"

namespace pdserve {

struct CalibrateOptions {
  int swiftkv_layer = -1;  // -1: no SwiftKV recovery
  int across_kv = 1;
  double ridge = 1e-4;  // λ relative to the mean diagonal of XᵀX
  bool zack = false;
  double zack_rho = 0.0;  // removal rate; 0 keeps full rank (ranks can be re-chosen at serve time)
  double zack_kept_fraction = 0.0;  // target fraction of K/V dimensions kept, in (0, 1]
  // Ranks in multiples of this (RoundRankUpToMultiple), ρ chosen so that the rounded ranks meet
  // zack_kept_fraction; 1 keeps them as ρ chose them; 0 picks ZackRankMultipleFor's.
  int zack_rank_multiple = 0;
  int num_threads = 0;  // 0 = automatic
  // Called after each sequence of each pass: (phase, sequences done, sequences in the pass).
  std::function<void(const char* phase, int done, int total)> progress;
};

// What ZACK ranks are whole multiples of by default: 16 floats, one AVX-512 vector (two AVX2 ones).
inline constexpr int kZackAutoRankMultiple = 16;

// The rank multiple calibration uses for heads of `head_dim` dimensions: `option` when > 0; for 0
// (automatic) kZackAutoRankMultiple where a head holds at least four such vectors and a whole
// number of them (64, 80, 128, … dimensions: the decode kernels then read no partial vector, and a
// rank can still be a quarter of the head), else 1 (narrow heads keep every rank).
int ZackRankMultipleFor(int option, int head_dim);

// `sequences`: token ids, each at most the model's context (typically BOS + a window of text).
// InvalidArgument for options that do not fit the model, no sequences, or nothing to calibrate.
absl::StatusOr<Calibration> Calibrate(const ModelWeights& weights,
                                      std::span<const std::vector<int32_t>> sequences,
                                      const CalibrateOptions& options, const std::string& corpus);

}  // namespace pdserve

#endif  // PDSERVE_CORE_COMPRESS_CALIBRATOR_H_
