#include "tools/profile_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/kv/token_retention.h"
#include "tools/flag_struct.h"

ABSL_FLAG(int, swiftkv_layer, -1,
          "SwiftKV: prompt tokens run layers below this one; later layers' KV come from its input "
          "(-1 = off, or the checkpoint's own)");
ABSL_FLAG(int, across_kv, 1, "AcrossKV: later layers sharing one KV cache (with --swiftkv-layer)");
ABSL_FLAG(bool, swiftkv_recovery, false,
          "Use the SwiftKV projections fitted by `pdserve calibrate` (needs --calibration)");
ABSL_FLAG(std::string, calibration, "", "Calibration file written by `pdserve calibrate`");
ABSL_FLAG(bool, zack, false, "ZACK: attention on reduced K/V dimensions (needs --calibration)");
ABSL_FLAG(double, zack_rho, -1.0,
          "ZACK removal rate ρ re-choosing every rank; negative = the calibration's ranks");
ABSL_FLAG(std::string, fp8, "off", "FP8 e4m3 KV cache: off, per-token or per-page scales");
ABSL_FLAG(std::string, kv_dtype, "f32",
          "KV elements without FP8: f32 (the plain model, bit for bit) or f16 (half the bytes, as "
          "llama.cpp and vLLM store by default; CPU only)");
ABSL_FLAG(int, kcache_topn, 0, "KCache: value tokens fetched per KV head per decode step; 0 = off");
ABSL_FLAG(int, kcache_full_layers, 2, "KCache: layers below this attend densely");
ABSL_FLAG(int, kcache_sink, 4, "KCache: first tokens always kept");
ABSL_FLAG(int, kcache_recent, 16, "KCache: newest tokens always kept");
ABSL_FLAG(bool, kcache_renormalize, false,
          "KCache: renormalize the kept probabilities instead of using the full softmax's");
// The token retention flags' defaults are RetentionOptions' own (core/kv/token_retention.h).
constexpr pdserve::RetentionOptions kRetentionDefaults{};
ABSL_FLAG(
    std::string, kvcrush_budget, "off",
    "Token retention (KVCrush): prompt tokens each cache layer keeps, as a count (\"256\") or "
    "a share of the prompt (\"25%\"); off = every token");
ABSL_FLAG(std::string, kvcrush_policy, "kvcrush",
          "Token retention: kvcrush (SnapKV + representatives of the evicted), snapkv (importance "
          "only) or recent (sink and newest tokens only)");
ABSL_FLAG(double, kvcrush_ratio, kRetentionDefaults.kvcrush_ratio,
          "KVCrush: share of the budget (beyond sink and recent) kept as representatives");
ABSL_FLAG(double, kvcrush_weight, kRetentionDefaults.kvcrush_weight,
          "KVCrush: a representative standing for n tokens (itself and the evicted of its group) "
          "gets this times ln min(n, --kvcrush-weight-cap) added to its attention scores; 0 = "
          "none");
ABSL_FLAG(double, kvcrush_weight_cap, kRetentionDefaults.kvcrush_weight_cap,
          "KVCrush: a representative weighs at most as much as this many tokens (≥ 1)");
ABSL_FLAG(int, kvcrush_window, kRetentionDefaults.window,
          "Token retention: the prompt's last queries that score tokens");
ABSL_FLAG(int, kvcrush_max_tokens, kRetentionDefaults.max_tokens,
          "Decode-time eviction (H2O): once a sequence's cache reaches this + a page, keep this "
          "many tokens by the attention its decode steps paid them; 0 = off");
ABSL_FLAG(int, kvcrush_pool, kRetentionDefaults.pool,
          "Token retention: average each token's score over this many neighbours (odd; 1 = none)");
ABSL_FLAG(int, kvcrush_sink, kRetentionDefaults.sink, "Token retention: first tokens always kept");
ABSL_FLAG(int, kvcrush_recent, kRetentionDefaults.recent,
          "Token retention: newest prompt tokens always kept (≥ 1)");
ABSL_FLAG(std::string, kvcrush_granularity, "token",
          "Token retention: select single tokens (token) or whole KV pages (page)");
ABSL_FLAG(std::string, kvcrush_anchor, "random",
          "KVCrush anchor: random (seeded), zeros, ones, mean or alternate");
ABSL_FLAG(uint64_t, kvcrush_seed, kRetentionDefaults.seed, "KVCrush: seed of the random anchor");

namespace pdserve::cli {
namespace {

// `value` of --flag as the choice named so; InvalidArgument listing the names otherwise.
template <typename Enum, size_t N>
absl::StatusOr<Enum> ParseChoice(const char* flag, const std::string& value,
                                 const std::pair<const char*, Enum> (&choices)[N]) {
  std::string names;
  for (const auto& [name, choice] : choices) {
    if (value == name) return choice;
    absl::StrAppend(&names, names.empty() ? "" : ", ", name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " '", value, "' is not one of ", names));
}

absl::StatusOr<KvScaleMode> ParseFp8(const std::string& value) {
  static constexpr std::pair<const char*, KvScaleMode> kModes[] = {
      {"off", KvScaleMode::kNone},
      {"per-token", KvScaleMode::kPerTokenHead},
      {"per-page", KvScaleMode::kPerPageHead}};
  return ParseChoice("fp8", value, kModes);
}

// Whether --kv-dtype asks for f16 elements.
absl::StatusOr<bool> ParseKvDtype(const std::string& value) {
  static constexpr std::pair<const char*, bool> kDtypes[] = {{"f32", false}, {"f16", true}};
  return ParseChoice("kv-dtype", value, kDtypes);
}

// "off", a token count or a percentage into options.budget / options.fraction.
absl::Status ParseRetentionBudget(const std::string& value, RetentionOptions& options) {
  if (value == "off") return absl::OkStatus();
  const bool percent = !value.empty() && value.back() == '%';
  const std::string number = percent ? value.substr(0, value.size() - 1) : value;
  double share = 0.0;
  int tokens = 0;
  if (percent ? absl::SimpleAtod(number, &share) && share > 0.0 && share <= 100.0
              : absl::SimpleAtoi(number, &tokens) && tokens > 0) {
    options.fraction = share / 100.0;
    options.budget = tokens;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--kvcrush-budget '", value, "' is not off, a token count ≥ 1 or a percentage in (0, 100]"));
}

absl::StatusOr<RetentionOptions> RetentionFrom(const ProfileFlags& flags) {
  RetentionOptions o;
  PDSERVE_RETURN_IF_ERROR(ParseRetentionBudget(flags.kvcrush_budget, o));
  static constexpr std::pair<const char*, RetentionPolicy> kPolicies[] = {
      {"kvcrush", RetentionPolicy::kKvCrush},
      {"snapkv", RetentionPolicy::kImportance},
      {"recent", RetentionPolicy::kRecent}};
  PDSERVE_ASSIGN_OR_RETURN(o.policy,
                           ParseChoice("kvcrush-policy", flags.kvcrush_policy, kPolicies));
  static constexpr std::pair<const char*, RetentionGranularity> kGranularities[] = {
      {"token", RetentionGranularity::kToken}, {"page", RetentionGranularity::kPage}};
  PDSERVE_ASSIGN_OR_RETURN(
      o.granularity, ParseChoice("kvcrush-granularity", flags.kvcrush_granularity, kGranularities));
  static constexpr std::pair<const char*, AnchorMode> kAnchors[] = {
      {"random", AnchorMode::kRandom},
      {"zeros", AnchorMode::kZeros},
      {"ones", AnchorMode::kOnes},
      {"mean", AnchorMode::kMean},
      {"alternate", AnchorMode::kAlternate}};
  PDSERVE_ASSIGN_OR_RETURN(o.anchor, ParseChoice("kvcrush-anchor", flags.kvcrush_anchor, kAnchors));
  o.kvcrush_ratio = flags.kvcrush_ratio;
  o.kvcrush_weight = flags.kvcrush_weight;
  o.kvcrush_weight_cap = flags.kvcrush_weight_cap;
  o.window = flags.kvcrush_window;
  o.pool = flags.kvcrush_pool;
  o.max_tokens = flags.kvcrush_max_tokens;
  o.sink = flags.kvcrush_sink;
  o.recent = flags.kvcrush_recent;
  o.seed = flags.kvcrush_seed;
  if (absl::Status status = o.Validate(); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--kvcrush-*: ", status.message()));
  }
  return o;
}

}  // namespace

absl::StatusOr<CompressionProfile> ProfileFrom(const ProfileFlags& flags) {
  CompressionProfile p;
  p.swiftkv_layer = flags.swiftkv_layer;
  p.across_kv = flags.across_kv;
  p.swiftkv_recovery = flags.swiftkv_recovery;
  p.zack = flags.zack;
  p.zack_rho = flags.zack_rho;
  PDSERVE_ASSIGN_OR_RETURN(p.fp8, ParseFp8(flags.fp8));
  PDSERVE_ASSIGN_OR_RETURN(p.f16_kv, ParseKvDtype(flags.kv_dtype));
  if (p.f16_kv && p.fp8 != KvScaleMode::kNone) {
    return absl::InvalidArgumentError(
        "--kv-dtype f16 and --fp8 exclude each other: FP8 stores "
        "e4m3 codes; drop one");
  }
  p.kcache.top_n = flags.kcache_topn;
  p.kcache.full_layers = flags.kcache_full_layers;
  p.kcache.sink = flags.kcache_sink;
  p.kcache.recent = flags.kcache_recent;
  p.kcache.renormalize = flags.kcache_renormalize;
  PDSERVE_ASSIGN_OR_RETURN(p.retention, RetentionFrom(flags));
  if (p.swiftkv_layer < -1 || p.across_kv < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--swiftkv-layer ", p.swiftkv_layer,
                                                   " must be ≥ -1 and --across-kv ", p.across_kv,
                                                   " ≥ 1"));
  }
  if (p.zack_rho > 1.0) {
    return absl::InvalidArgumentError(absl::StrCat("--zack-rho ", p.zack_rho, " exceeds 1"));
  }
  KvCompression check;
  check.kcache = p.kcache;
  if (absl::Status status = check.Validate(); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--kcache-*: ", status.message()));
  }
  return p;
}

absl::StatusOr<CompressionProfile> ProfileFromFlags() {
  return ProfileFrom(FlagsTo<ProfileFlags>());
}

absl::StatusOr<PreparedModel> PrepareModelFrom(const ModelWeights& weights,
                                               const CompressionProfile& profile,
                                               const std::string& calibration_path,
                                               uint64_t* calibration_hash) {
  if (calibration_hash != nullptr) *calibration_hash = 0;
  const std::string& path = calibration_path;
  std::optional<Calibration> calibration;
  if (!path.empty()) {
    PDSERVE_ASSIGN_OR_RETURN(calibration, ReadCalibrationFile(path));
    const uint64_t hash = CalibrationHash(*calibration);
    GetLogger("cli")->info("calibration {} (content hash {:016x})", path, hash);
    if (calibration_hash != nullptr) *calibration_hash = hash;
  } else if (profile.needs_calibration()) {
    return absl::InvalidArgumentError("--zack and --swiftkv-recovery need --calibration FILE");
  }
  PDSERVE_ASSIGN_OR_RETURN(PreparedModel prepared,
                           PrepareModel(weights, profile, calibration ? &*calibration : nullptr));
  GetLogger("cli")->info("KV profile: {}", profile.Describe());
  return prepared;
}

absl::StatusOr<PreparedModel> PrepareModelFromFlags(const ModelWeights& weights,
                                                    const CompressionProfile& profile,
                                                    uint64_t* calibration_hash) {
  return PrepareModelFrom(weights, profile, FlagsTo<ProfileFlags>().calibration, calibration_hash);
}

}  // namespace pdserve::cli
