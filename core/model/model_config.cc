#include "core/model/model_config.h"

#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

constexpr int kMaxDim = 1 << 16;
constexpr int kMaxLayers = 1024;
constexpr int kMaxVocab = 1 << 22;
constexpr int kMaxContext = 1 << 22;
constexpr int kMaxHeadDim = 1024;

absl::Status CheckRange(const char* name, int value, int max) {
  if (value <= 0 || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: ", name, " = ", value, " is outside [1, ", max, "]"));
  }
  return absl::OkStatus();
}

// The Llama 3.1 scaling's requirements (kernels/rope.h); none (factor 0) is always valid.
absl::Status CheckRopeScaling(const kernels::RopeScaling& s) {
  if (s.factor == 0.0f) return absl::OkStatus();
  if (!(s.factor >= 1.0f && s.factor < 1e6f)) {
    return absl::InvalidArgumentError(absl::StrCat("model config: rope_scaling.factor ", s.factor,
                                                   " is neither 0 (none) nor in [1, 1e6)"));
  }
  if (!(s.low_freq_factor > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("model config: rope_scaling.low_freq_factor ",
                                                   s.low_freq_factor, " is not > 0"));
  }
  if (!(s.high_freq_factor > s.low_freq_factor && s.high_freq_factor < 1e6f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: rope_scaling.high_freq_factor ", s.high_freq_factor,
                     " is not in (low_freq_factor = ", s.low_freq_factor, ", 1e6)"));
  }
  if (s.original_max_positions < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: rope_scaling.original_max_positions ", s.original_max_positions,
                     " is not ≥ 1"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t ModelConfig::NumParameters() const {
  int64_t d = dim, h = hidden_dim, q = q_dim(), kv = kv_dim();
  int64_t per_layer = 2 * d + d * q * 2 + 2 * d * kv + 3 * d * h;
  if (traits().qkv_bias) per_layer += q + 2 * kv;
  if (traits().qk_norm) per_layer += 2 * head_dim();
  int64_t embeddings = static_cast<int64_t>(vocab_size) * d * (tied_embeddings ? 1 : 2);
  return embeddings + n_layers * per_layer + d;
}

absl::Status ModelConfig::Validate() const {
  for (auto [name, value, max] :
       {std::tuple{"dim", dim, kMaxDim}, std::tuple{"hidden_dim", hidden_dim, 4 * kMaxDim},
        std::tuple{"n_layers", n_layers, kMaxLayers}, std::tuple{"n_heads", n_heads, kMaxDim},
        std::tuple{"n_kv_heads", n_kv_heads, kMaxDim},
        std::tuple{"vocab_size", vocab_size, kMaxVocab},
        std::tuple{"max_seq_len", max_seq_len, kMaxContext}}) {
    if (absl::Status s = CheckRange(name, value, max); !s.ok()) return s;
  }
  if (explicit_head_dim < 0 || explicit_head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("model config: head dim ", explicit_head_dim,
                                                   " is outside [1, ", kMaxHeadDim, "]"));
  }
  if (explicit_head_dim == 0 && dim % n_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: dim ", dim, " is not divisible by n_heads ", n_heads));
  }
  if (q_dim() > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: ", n_heads, " heads of ", head_dim(), " exceed ", kMaxDim));
  }
  if (n_heads % n_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model config: n_heads ", n_heads,
                                                   " is not divisible by n_kv_heads ", n_kv_heads));
  }
  if (head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: head dim ", head_dim(), " is odd; RoPE needs pairs"));
  }
  if (!(norm_eps > 0.0f && norm_eps < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: norm_eps ", norm_eps, " is outside (0, 1)"));
  }
  if (!(rope_theta > 1.0f && rope_theta < 1e12f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: rope_theta ", rope_theta, " is outside (1, 1e12)"));
  }
  const std::vector<float>& factors = rope_scaling.freq_factors;
  if (!factors.empty()) {
    if (static_cast<int>(factors.size()) != head_dim() / 2) {
      return absl::InvalidArgumentError(absl::StrCat("model config: ", factors.size(),
                                                     " RoPE frequency factors for head dim ",
                                                     head_dim(), " (expected head_dim/2)"));
    }
    for (size_t i = 0; i < factors.size(); ++i) {
      if (!(factors[i] > 0.0f && factors[i] < 1e6f)) {
        return absl::InvalidArgumentError(absl::StrCat("model config: RoPE frequency factor ", i,
                                                       " = ", factors[i], " is not in (0, 1e6)"));
      }
    }
  }
  return CheckRopeScaling(rope_scaling);
}

std::string ModelConfig::Describe() const {
  std::string scaling;
  if (rope_scaling.factor == 0.0f && !rope_scaling.freq_factors.empty()) {
    scaling = ", rope frequency factors from the file";
  } else if (rope_scaling.factor != 0.0f) {
    scaling = absl::StrCat(", llama3 rope scaling ×", rope_scaling.factor, " (low ",
                           rope_scaling.low_freq_factor, ", high ", rope_scaling.high_freq_factor,
                           ", original ctx ", rope_scaling.original_max_positions, ")");
  }
  const std::string head_width =
      explicit_head_dim > 0 ? absl::StrCat(" of ", explicit_head_dim) : std::string();
  return absl::StrCat(traits().name, ": dim ", dim, ", hidden ", hidden_dim, ", ", n_layers,
                      " layers, ", n_heads, " heads", head_width, " (", n_kv_heads, " kv), vocab ",
                      vocab_size, ", ctx ", max_seq_len, ", rope ",
                      rope_pairing == RopePairing::kAdjacent ? "adjacent" : "split-half", scaling);
}

}  // namespace pdserve
