#include "core/model/model_config.h"

#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

constexpr int kMaxDim = 1 << 16;
constexpr int kMaxLayers = 1024;
constexpr int kMaxVocab = 1 << 22;
constexpr int kMaxContext = 1 << 22;

absl::Status CheckRange(const char* name, int value, int max) {
  if (value <= 0 || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: ", name, " = ", value, " is outside [1, ", max, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t ModelConfig::NumParameters() const {
  int64_t d = dim, h = hidden_dim, kv = kv_dim();
  int64_t per_layer = 2 * d + d * d * 2 + 2 * d * kv + 3 * d * h;
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
  if (dim % n_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config: dim ", dim, " is not divisible by n_heads ", n_heads));
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
  return absl::OkStatus();
}

std::string ModelConfig::Describe() const {
  return absl::StrCat("dim ", dim, ", hidden ", hidden_dim, ", ", n_layers, " layers, ", n_heads,
                      " heads (", n_kv_heads, " kv), vocab ", vocab_size, ", ctx ", max_seq_len,
                      ", rope ",
                      rope_pairing == RopePairing::kAdjacent ? "adjacent" : "split-half");
}

}  // namespace pdserve
