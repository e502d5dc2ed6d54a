#include "kernels/rope.h"

#include <cmath>

namespace pdserve::kernels {
namespace {

// The angle of pair i at `pos`, computed as llama2.c's run.c does.
float Angle(int pos, int i, int head_dim, float theta) {
  float freq = 1.0f / powf(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  return static_cast<float>(pos) * freq;
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

RopeTable::RopeTable(int head_dim, int max_positions, float theta)
    : half_(head_dim / 2),
      max_positions_(max_positions),
      cos_(static_cast<size_t>(max_positions) * half_),
      sin_(cos_.size()) {
  for (int pos = 0; pos < max_positions; ++pos) {
    for (int i = 0; i < half_; ++i) {
      float angle = Angle(pos, i, head_dim, theta);
      cos_[static_cast<size_t>(pos) * half_ + i] = cosf(angle);
      sin_[static_cast<size_t>(pos) * half_ + i] = sinf(angle);
    }
  }
}

void ApplyRope(float* x, int n_heads, const RopeTable& table, int pos, RopePairing pairing) {
  const int d = table.head_dim();
  for (int h = 0; h < n_heads; ++h) Rotate(x + h * d, d, table.cos(pos), table.sin(pos), pairing);
}

void ApplyRopeReference(float* x, int n_heads, int head_dim, int pos, float theta,
                        RopePairing pairing) {
  const int half = head_dim / 2;
  std::vector<float> cos(half), sin(half);
  for (int i = 0; i < half; ++i) {
    cos[i] = cosf(Angle(pos, i, head_dim, theta));
    sin[i] = sinf(Angle(pos, i, head_dim, theta));
  }
  for (int h = 0; h < n_heads; ++h)
    Rotate(x + h * head_dim, head_dim, cos.data(), sin.data(), pairing);
}

}  // namespace pdserve::kernels
