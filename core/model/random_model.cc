#include "core/model/random_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pdserve {
namespace {

struct NamedShape {
  const char* name;
  int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len;
  float rope_theta = 10000.0f;
  float llama3_rope_factor = 0;  // Llama 3.1 RoPE scaling (low 1, high 4, original 8192); 0: none
  ModelFamily family = ModelFamily::kLlama;
  float norm_eps = 1e-5f;
  int head_dim = 0;  // 0: dim / n_heads
};

constexpr NamedShape kShapes[] = {
    {"stories260K", 64, 172, 5, 8, 4, 512, 512},
    {"stories15M", 288, 768, 6, 6, 6, 32000, 256},
    {"stories42M", 512, 1376, 8, 8, 8, 32000, 1024},
    {"stories110M", 768, 2048, 12, 12, 12, 32000, 1024},
    // Llama 3.2 1B's dimensions and RoPE scaling (tied embeddings, as all shapes here), at a
    // benchmark's context rather than 128K.
    {"llama3.2-1B", 2048, 8192, 16, 32, 8, 128256, 4096, 500000.0f, 32.0f},
    // Qwen2.5 0.5B and Qwen3 1.7B (both tie their embeddings), at a benchmark's context.
    {"qwen2.5-0.5B", 896, 4864, 24, 14, 2, 151936, 4096, 1000000.0f, 0.0f, ModelFamily::kQwen2,
     1e-6f},
    {"qwen3-1.7B", 2048, 6144, 28, 16, 8, 151936, 4096, 1000000.0f, 0.0f, ModelFamily::kQwen3,
     1e-6f},
    // Qwen3 0.6B: heads of 128 on a width of 1024 (16 × 128 ≠ 1024).
    {"qwen3-0.6B", 1024, 3072, 28, 16, 8, 151936, 4096, 1000000.0f, 0.0f, ModelFamily::kQwen3,
     1e-6f, 128},
};

// splitmix64: a small, well-mixed, seedable generator.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float Uniform(float lo, float hi) {  // [lo, hi)
    return lo + (hi - lo) * static_cast<float>(Next() >> 40) / 16777216.0f;
  }

 private:
  uint64_t state_;
};

Tensor RandomTensor(Rng& rng, std::vector<int64_t> shape, float center, float spread) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> values(n);
  for (float& v : values) v = center + rng.Uniform(-spread, spread);
  return MakeF32Tensor(std::move(values), std::move(shape));
}

// Biases of the size of the projections' outputs and head norms ≈ 1 but far enough from it that
// a kernel skipping them would be caught.
void AddFamilyTensors(Rng& rng, const ModelConfig& c, LayerWeights& layer) {
  const int64_t q = c.q_dim(), kv = c.kv_dim(), hd = c.head_dim();
  if (c.traits().qkv_bias) {
    layer.bq = RandomTensor(rng, {q}, 0.0f, 0.5f);
    layer.bk = RandomTensor(rng, {kv}, 0.0f, 0.5f);
    layer.bv = RandomTensor(rng, {kv}, 0.0f, 0.5f);
  }
  if (c.traits().qk_norm) {
    layer.q_norm = RandomTensor(rng, {hd}, 1.0f, 0.5f);
    layer.k_norm = RandomTensor(rng, {hd}, 1.0f, 0.5f);
  }
}

}  // namespace

absl::StatusOr<ModelConfig> ShapeByName(const std::string& name) {
  std::string known;
  for (const NamedShape& s : kShapes) {
    if (name == s.name) {
      ModelConfig c;
      c.dim = s.dim;
      c.hidden_dim = s.hidden_dim;
      c.n_layers = s.n_layers;
      c.n_heads = s.n_heads;
      c.n_kv_heads = s.n_kv_heads;
      c.vocab_size = s.vocab_size;
      c.max_seq_len = s.max_seq_len;
      c.rope_theta = s.rope_theta;
      c.rope_scaling.factor = s.llama3_rope_factor;  // the other parameters' defaults are 3.2's
      c.family = s.family;
      c.norm_eps = s.norm_eps;
      c.explicit_head_dim = s.head_dim;
      return c;
    }
    absl::StrAppend(&known, known.empty() ? "" : ", ", s.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown shape '", name, "' (known: ", known, ")"));
}

ModelWeights MakeRandomModel(const ModelConfig& config, uint64_t seed) {
  Rng rng(seed);
  const int64_t d = config.dim, q = config.q_dim(), kv = config.kv_dim(), h = config.hidden_dim;
  const float in_d = 1.0f / std::sqrt(static_cast<float>(d));
  const float in_q = 1.0f / std::sqrt(static_cast<float>(q));
  const float in_h = 1.0f / std::sqrt(static_cast<float>(h));
  ModelWeights w;
  w.config = config;
  w.token_embedding = RandomTensor(rng, {config.vocab_size, d}, 0.0f, 1.0f);
  for (int l = 0; l < config.n_layers; ++l) {
    LayerWeights layer;
    layer.attn_norm = RandomTensor(rng, {d}, 1.0f, 0.1f);
    layer.wq = RandomTensor(rng, {q, d}, 0.0f, in_d);
    layer.wk = RandomTensor(rng, {kv, d}, 0.0f, in_d);
    layer.wv = RandomTensor(rng, {kv, d}, 0.0f, in_d);
    layer.wo = RandomTensor(rng, {d, q}, 0.0f, in_q);
    layer.ffn_norm = RandomTensor(rng, {d}, 1.0f, 0.1f);
    layer.w1 = RandomTensor(rng, {h, d}, 0.0f, in_d);
    layer.w2 = RandomTensor(rng, {d, h}, 0.0f, in_h);
    layer.w3 = RandomTensor(rng, {h, d}, 0.0f, in_d);
    AddFamilyTensors(rng, config, layer);  // after the others: Llama models stay as they were
    w.layers.push_back(std::move(layer));
  }
  w.final_norm = RandomTensor(rng, {d}, 1.0f, 0.1f);
  w.classifier = config.tied_embeddings ? w.token_embedding
                                        : RandomTensor(rng, {config.vocab_size, d}, 0.0f, in_d);
  return w;
}

Vocabulary SyntheticVocabulary(int size) {
  Vocabulary v;
  auto add = [&v](std::string piece, TokenType type, float score) {
    v.pieces.push_back(std::move(piece));
    v.types.push_back(type);
    v.scores.push_back(score);
  };
  add("<unk>", TokenType::kUnknown, 0.0f);
  add("<s>", TokenType::kControl, 0.0f);
  add("</s>", TokenType::kControl, 0.0f);
  for (int b = 0; b < 256; ++b) add(absl::StrFormat("<0x%02X>", b), TokenType::kByte, 0.0f);
  // Pieces: " a".." z", then two-letter words, then numbered words: all distinct.
  for (int i = 0; v.size() < size; ++i) {
    std::string piece = i < 26         ? std::string(" ") + static_cast<char>('a' + i)
                        : i < 26 + 676 ? std::string{static_cast<char>('a' + (i - 26) / 26),
                                                     static_cast<char>('a' + (i - 26) % 26)}
                                       : absl::StrCat(" w", i);
    add(std::move(piece), TokenType::kNormal, -static_cast<float>(i));
  }
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  return v;
}

}  // namespace pdserve
