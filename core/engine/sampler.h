// Sampler: picks the next token from logits. Temperature 0 is greedy (the lowest id among equal
// maxima); otherwise softmax(logits / temperature), restricted to the top_k most likely tokens
// (0 = all) and then to the smallest set of those whose probability, renormalized over them,
// reaches top_p, sampled with a seeded xorshift RNG, so equal seeds give equal outputs. Logits
// that are NaN or infinite fall back to greedy. One Sampler per sequence; not thread-safe.
#ifndef PDSERVE_CORE_ENGINE_SAMPLER_H_
#define PDSERVE_CORE_ENGINE_SAMPLER_H_

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace pdserve {

struct SamplingParams {
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;

  // InvalidArgument naming the field: temperature must be finite and in [0, 100], top_p in
  // (0, 1], top_k ≥ 0.
  absl::Status Validate() const;
};

class Sampler {
 public:
  // Requires params.Validate().ok().
  explicit Sampler(const SamplingParams& params);

  int Sample(std::span<const float> logits);

 private:
  float NextUniform();  // in [0, 1)
  // Samples from candidates_ (in their order) with total probability `mass`.
  int SampleInOrder(float mass);

  SamplingParams params_;
  uint64_t state_;
  std::vector<std::pair<float, int>> candidates_;  // reused across calls
};

// Index of the largest value (the first on ties).
int ArgMax(std::span<const float> values);

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_SAMPLER_H_
