// Rotary position embedding. For head dim d and pair index i < d/2 the angle at position p is
// p · θ^(-2i/d); the pair is (2i, 2i+1) with adjacent pairing (llama2.c, GGUF) or (i, i + d/2)
// with split-half pairing (Hugging Face). RopeTable precomputes cos/sin per position exactly as
// llama2.c does (fp32 powf/cosf/sinf), so both paths rotate by identical values. Either may
// rescale the frequencies as Llama 3.1 does (RopeScaling), by the same fp32 rule, or divide them
// by per-pair factors as GGUF files store that scaling (rope_freqs.weight).
#ifndef PDSERVE_KERNELS_ROPE_H_
#define PDSERVE_KERNELS_ROPE_H_

#include <cstdint>
#include <vector>

#include "core/tensor/rope_pairing.h"

namespace pdserve::kernels {

// Llama 3.1 frequency scaling ("rope_type": "llama3"). Each frequency f = θ^(-2i/d) has the
// wavelength 2π/f; wavelengths shorter than original_max_positions / high_freq_factor keep f,
// longer than original_max_positions / low_freq_factor become f / factor, and those between
// blend the two linearly in original_max_positions / wavelength. factor = 0 means no scaling.
// Requires, when factor > 0: high_freq_factor > low_freq_factor > 0 and original_max_positions > 0.
// GGUF files carry the same scaling as one divisor per pair (llama.cpp's rope_freqs.weight): when
// freq_factors is set (head_dim/2 positive values), f_i / freq_factors[i] is used instead.
struct RopeScaling {
  float factor = 0;  // 0 = none
  float low_freq_factor = 1;
  float high_freq_factor = 4;
  int original_max_positions = 8192;
  std::vector<float> freq_factors = {};  // empty, or one divisor per pair (overrides the rule)

  bool enabled() const { return factor > 0 || !freq_factors.empty(); }
  // The per-pair divisors that reproduce the rule (factor > 0; empty otherwise) for `head_dim`,
  // computed in fp32 as llama.cpp's converter writes them to GGUF.
  std::vector<float> FreqFactors(int head_dim, float theta) const;
};

// cos and sin for positions [0, max_positions): [max_positions, head_dim/2] each. Immutable.
class RopeTable {
 public:
  // The table holds exactly ApplyRopeReference's angles for the same theta and scaling.
  RopeTable(int head_dim, int max_positions, float theta, const RopeScaling& scaling = {});
  const float* cos(int pos) const { return cos_.data() + static_cast<int64_t>(pos) * half_; }
  const float* sin(int pos) const { return sin_.data() + static_cast<int64_t>(pos) * half_; }
  int head_dim() const { return 2 * half_; }
  int max_positions() const { return max_positions_; }

 private:
  int half_;
  int max_positions_;
  std::vector<float> cos_;
  std::vector<float> sin_;
};

// Rotates `n_heads` consecutive head vectors of x ([n_heads, head_dim]) at position `pos`.
// Requires pos < table.max_positions().
void ApplyRope(float* x, int n_heads, const RopeTable& table, int pos, RopePairing pairing);

// What ApplyRopeReference rotates by: pair i turns by pos · f_i, f_i = θ^(-2i/d) rescaled by
// `scaling` when it is enabled.
struct RopeParams {
  int head_dim = 0;  // even
  float theta = 10000.0f;
  RopePairing pairing = RopePairing::kAdjacent;
  RopeScaling scaling;  // none by default
};

// The specification: computes the angles directly (same fp32 formula), no table. Rotates
// `n_heads` consecutive head vectors of x ([n_heads, params.head_dim]) at position `pos`.
void ApplyRopeReference(float* x, int n_heads, int pos, const RopeParams& params);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_ROPE_H_
