#include "core/engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace pdserve {

absl::Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > 100.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature ", temperature, " is outside [0, 100]"));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p ", top_p, " is outside (0, 1]"));
  }
  if (top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k ", top_k, " is negative"));
  }
  return absl::OkStatus();
}

int ArgMax(std::span<const float> values) {
  return static_cast<int>(std::max_element(values.begin(), values.end()) - values.begin());
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), state_(params.seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull) {}

float Sampler::NextUniform() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  return static_cast<float>((state_ * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

int Sampler::Sample(std::span<const float> logits) {
  const int greedy = ArgMax(logits);
  const float max_logit = logits[greedy];
  if (params_.temperature == 0.0f || !std::isfinite(max_logit)) {
    return greedy;
  }
  float sum = 0.0f;
  for (float logit : logits) sum += std::exp((logit - max_logit) / params_.temperature);
  // Without top-k, tokens below this mass can never enter the top-p set (llama2.c's cut): at most
  // vocab − 1 of them together hold less than 1 − top_p.
  const bool cut = params_.top_k == 0 && params_.top_p < 1.0f && logits.size() > 1;
  const float cutoff = cut ? (1.0f - params_.top_p) / (logits.size() - 1) * sum : 0.0f;
  candidates_.clear();
  for (size_t i = 0; i < logits.size(); ++i) {
    float p = std::exp((logits[i] - max_logit) / params_.temperature);
    if (p >= cutoff) candidates_.emplace_back(p, static_cast<int>(i));
  }
  if (candidates_.empty() || !std::isfinite(sum)) {
    return greedy;  // NaN logits: nothing sensible to sample
  }
  if (params_.top_k == 0 && params_.top_p >= 1.0f) {
    return SampleInOrder(sum);
  }
  // Most likely first; ties to the lower id. Top-k first, then top-p within the k kept (as
  // llama.cpp and transformers do).
  auto more_likely = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t keep = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = params_.top_k;
  }
  std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(),
                    more_likely);
  candidates_.resize(keep);
  float kept_total = sum;
  if (params_.top_k > 0) {
    kept_total = 0.0f;
    for (const auto& candidate : candidates_) kept_total += candidate.first;
  }
  float kept_mass = 0.0f;
  size_t n = 0;
  while (n < keep) {
    kept_mass += candidates_[n].first;
    ++n;
    if (kept_mass >= params_.top_p * kept_total) break;
  }
  candidates_.resize(n);
  return SampleInOrder(kept_mass);
}

int Sampler::SampleInOrder(float mass) {
  const float target = NextUniform() * mass;
  float cumulative = 0.0f;
  for (const auto& [p, id] : candidates_) {
    cumulative += p;
    if (target < cumulative) return id;
  }
  return candidates_.back().second;
}

}  // namespace pdserve
