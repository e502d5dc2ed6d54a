#include "kernels/rope.h"

#include <cmath>
#include <numbers>
#include <vector>

namespace pdserve::kernels {
namespace {

// The frequency of pair i, computed as llama2.c's run.c does.
float Frequency(int i, int head_dim, float theta) {
  return 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
}

// `freq` rescaled by the Llama 3.1 rule (rope.h), in fp32. Requires scaling.factor > 0.
float Llama3Frequency(float freq, const RopeScaling& scaling) {
  const float original = static_cast<float>(scaling.original_max_positions);
  const float wavelength = 2.0f * std::numbers::pi_v<float> / freq;
  const float low_freq_wavelength = original / scaling.low_freq_factor;
  const float high_freq_wavelength = original / scaling.high_freq_factor;
  if (wavelength < high_freq_wavelength) return freq;
  if (wavelength > low_freq_wavelength) return freq / scaling.factor;
  const float smooth = (original / wavelength - scaling.low_freq_factor) /
                       (scaling.high_freq_factor - scaling.low_freq_factor);
  return (1.0f - smooth) * freq / scaling.factor + smooth * freq;
}

// The frequency of pair i with `scaling` applied when set; the angle at pos is pos · this.
float ScaledFrequency(int i, int head_dim, float theta, const RopeScaling& scaling) {
  const float freq = Frequency(i, head_dim, theta);
  if (!scaling.freq_factors.empty()) return freq / scaling.freq_factors[i];
  return scaling.factor > 0 ? Llama3Frequency(freq, scaling) : freq;
}

inline void Rotate(float* x, int head_dim, const float* cos, const float* sin,
                   RopePairing pairing) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    int a = pairing == RopePairing::kAdjacent ? 2 * i : i;
    int b = pairing == RopePairing::kAdjacent ? 2 * i + 1 : i + half;
    float x0 = x[a], x1 = x[b];
    // Explicit fma: the compiler may not contract these differently in different callers.
    x[a] = std::fma(x0, cos[i], -(x1 * sin[i]));
    x[b] = std::fma(x0, sin[i], x1 * cos[i]);
  }
}

}  // namespace

std::vector<float> RopeScaling::FreqFactors(int head_dim, float theta) const {
  std::vector<float> factors;
  if (!(factor > 0)) return factors;
  // In fp32, as llama.cpp's converter computes them (torch float32).
  const float original = static_cast<float>(original_max_positions);
  const float low_wavelength = original / low_freq_factor;
  const float high_wavelength = original / high_freq_factor;
  for (int i = 0; i < head_dim / 2; ++i) {
    const float wavelength = 2.0f * std::numbers::pi_v<float> / Frequency(i, head_dim, theta);
    float divisor = 1;
    if (wavelength > low_wavelength) {
      divisor = factor;
    } else if (wavelength >= high_wavelength) {
      const float smooth =
          (original / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
      divisor = 1.0f / ((1.0f - smooth) / factor + smooth);
    }
    factors.push_back(divisor);
  }
  return factors;
}

RopeTable::RopeTable(int head_dim, int max_positions, float theta, const RopeScaling& scaling)
    : half_(head_dim / 2),
      max_positions_(max_positions),
      cos_(static_cast<size_t>(max_positions) * half_),
      sin_(cos_.size()) {
  std::vector<float> freq(half_);
  for (int i = 0; i < half_; ++i) freq[i] = ScaledFrequency(i, head_dim, theta, scaling);
  for (int pos = 0; pos < max_positions; ++pos) {
    for (int i = 0; i < half_; ++i) {
      float angle = static_cast<float>(pos) * freq[i];
      cos_[static_cast<size_t>(pos) * half_ + i] = cosf(angle);
      sin_[static_cast<size_t>(pos) * half_ + i] = sinf(angle);
    }
  }
}

void ApplyRope(float* x, int n_heads, const RopeTable& table, int pos, RopePairing pairing) {
  const int d = table.head_dim();
  for (int h = 0; h < n_heads; ++h) Rotate(x + h * d, d, table.cos(pos), table.sin(pos), pairing);
}

void ApplyRopeReference(float* x, int n_heads, int pos, const RopeParams& params) {
  const int head_dim = params.head_dim, half = head_dim / 2;
  std::vector<float> cos(half), sin(half);
  for (int i = 0; i < half; ++i) {
    const float angle =
        static_cast<float>(pos) * ScaledFrequency(i, head_dim, params.theta, params.scaling);
    cos[i] = cosf(angle);
    sin[i] = sinf(angle);
  }
  for (int h = 0; h < n_heads; ++h)
    Rotate(x + h * head_dim, head_dim, cos.data(), sin.data(), params.pairing);
}

}  // namespace pdserve::kernels
