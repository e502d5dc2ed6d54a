// Calibration: the offline artifact `pdserve calibrate` writes and every worker loads. It holds
// the closed-form SwiftKV recovery (per AcrossKV group leader) and the ZACK bases (per cache layer
// and KV head), for one model shape. Workers compare content hashes: prefill and decode must run
// with the same file.
//
// File format (little endian), version kCalibrationVersion:
//   magic "PDSCALIB" | u32 version | u32 reserved (0) | u64 body_bytes | u64 fnv1a64(body) | body
// The body is a sequence of fields (layout in calibration.cc); readers reject anything outside the
// declared sizes, unknown versions, trailing bytes, non-finite numbers and shape mismatches.
//
// Plain structs and pure functions: thread-safe on distinct (or only read) calibrations.
#ifndef PDSERVE_CORE_CALIB_CALIBRATION_H_
#define PDSERVE_CORE_CALIB_CALIBRATION_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pdserve {

inline constexpr uint32_t kCalibrationVersion = 1;

// Limits ValidateCalibration enforces (they also bound every count a file can claim).
inline constexpr size_t kMaxCalibrationCorpusBytes = 4096;
inline constexpr int kMaxCalibrationDim = 1 << 17;
inline constexpr int kMaxCalibrationLayers = 4096;
inline constexpr int kMaxCalibrationHeads = 4096;
inline constexpr int kMaxCalibrationHeadDim = 4096;

// The model shape a calibration belongs to.
struct CalibrationModel {
  int dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  bool operator==(const CalibrationModel&) const = default;
};

// SwiftKV later-layer K/V projections fitted in closed form (DESIGN §4, "training-free
// recovery"). For leader i (layer l + i·G): wk[i], wv[i] are [kv_dim, dim] row-major f32 applied
// to x = RMSNorm(h_l; norm). mse_* are calibration mean squared errors per element (K and V
// together) of the plain initialization (group mean of the original projections) and of the fit;
// the fit is kept only when not worse.
struct SwiftKvRecovery {
  int layer = 0;  // l, the first layer whose KV comes from h_l
  int group = 1;  // G, AcrossKV group size
  double ridge_lambda = 0.0;
  std::vector<float> norm;  // [dim]
  std::vector<std::vector<float>> wk, wv;
  std::vector<double> mse_init, mse_fit;  // per leader
  bool operator==(const SwiftKvRecovery&) const = default;
};

// ZACK bases of one KV head of one cache layer. Bases are [head_dim, head_dim] row-major with
// basis vector i in row i, orthonormal, sorted by descending eigenvalue of the sample Gram matrix
// (eigenvalue = squared singular value). The rank keeps the first `rank` rows.
struct ZackHeadBasis {
  int qk_rank = 0;
  int vo_rank = 0;
  std::vector<float> qk_basis;  // post-RoPE [q of the group's heads; k] samples
  std::vector<double> qk_eigenvalues;
  std::vector<float> vo_basis;  // [v samples; o-projection slices of every reading layer]
  std::vector<double> vo_eigenvalues;
  bool operator==(const ZackHeadBasis&) const = default;
};

struct ZackBases {
  double removal_rate = 0.0;  // ρ the ranks were chosen with (or the one a target ratio implied)
  std::vector<std::vector<ZackHeadBasis>> heads;  // [cache layer][kv head]
  bool operator==(const ZackBases&) const = default;
};

struct Calibration {
  CalibrationModel model;
  std::string corpus;  // what was streamed (file name), for the record
  int64_t tokens = 0;  // calibration tokens streamed
  std::optional<SwiftKvRecovery> swiftkv;
  std::optional<ZackBases> zack;
  bool operator==(const Calibration&) const = default;  // exact, field by field
};

// Checks internal consistency against `calibration.model`: the model shape within the limits
// above with n_kv_heads dividing n_heads; corpus ≤ kMaxCalibrationCorpusBytes; tokens ≥ 0;
// SwiftKV 0 ≤ l < L, G ≥ 1 dividing L − l, (L − l)/G leaders each with [kv_dim, dim] wk and wv,
// norm [dim], λ ≥ 0, MSEs ≥ 0; ZACK ρ ∈ [0, 1], l + (L − l)/G cache layers with SwiftKV (else L,
// or a SwiftKV checkpoint's l + (L − l)/G when calibrated on one; BuildKvPlan checks which the
// served model has) of n_kv_heads heads, ranks in [1, head_dim], [head_dim, head_dim] bases,
// head_dim eigenvalues in descending order; every number finite. Orthonormality of the bases is not
// checked. InvalidArgument naming the first problem's field.
absl::Status ValidateCalibration(const Calibration& calibration);

// The serialized bytes (header + body). Total: it writes whatever the structs hold, but only a
// calibration that passes ValidateCalibration parses back. The header's hash is CalibrationHash.
std::string SerializeCalibration(const Calibration& calibration);
// Strict parsing of untrusted bytes: InvalidArgument (or DataLoss "content hash mismatch") naming
// what is wrong; every count is checked against the remaining bytes before anything is allocated.
// Validates the result. Parse(Serialize(c)) == c for a valid c, and Serialize(Parse(b)) == b.
absl::StatusOr<Calibration> ParseCalibration(std::string_view bytes);

// The fnv1a64 content hash of a calibration's body, as written in its header (computed without
// materializing the bytes).
uint64_t CalibrationHash(const Calibration& calibration);

// Validates, writes `path`.tmp and renames it over `path` (readers never see a partial file).
// InvalidArgument for an invalid calibration; the errno's code (NotFound for a missing directory)
// or Internal for I/O failures.
absl::Status WriteCalibrationFile(const std::string& path, const Calibration& calibration);
// NotFound for a missing file; otherwise as ParseCalibration, with messages prefixed by the path.
absl::StatusOr<Calibration> ReadCalibrationFile(const std::string& path);

}  // namespace pdserve

#endif  // PDSERVE_CORE_CALIB_CALIBRATION_H_
