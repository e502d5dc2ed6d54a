// Token retention (KVCrush, research/algorithms.md §5): which of a prompt's tokens keep their KV
// once the prompt is in the cache. Each KV head scores every token (SnapKV: attention of the
// prompt's last queries, see kernels/attention_importance.h); the budget is split into
//
//  - forced units: the last token's unit, then the first `sink` and last `recent` tokens;
//  - an importance part: the best-scored other units (score summed over heads, each head's
//    scores average-pooled over neighbouring tokens first, as SnapKV does);
//  - with KVCrush, a representative part (kvcrush_ratio of what the forced units leave): every
//    remaining candidate gets a binary head-behaviour vector (bit h set when the unit is in head
//    h's top half by that head's score), candidates are sorted by Hamming distance to an anchor
//    vector and representatives are taken uniformly spaced along that order, one per group of
//    similar head behaviour, so that evicted regions keep a proxy. A representative's group is
//    itself and the candidates after it in that order up to the next pick; with kvcrush_weight
//    α > 0 it stands for the group's n tokens, and attention adds α·ln n to its scores
//    (kernels/attention_shape.h: token_bias), giving back part of the attention mass that the
//    evicted tokens of its group held.
//
// A unit is a token (kToken) or a page of page_size tokens (kPage: scores and bits summed per
// page, the last page possibly partial). The budget is counted in units: tokens, or the last page
// and as many whole pages as fit in what its tokens leave of the budget. As the last unit is always
// kept, the number of tokens kept depends only on the prompt's length, the page size and the
// options — never on the scores — so every cache layer of a sequence keeps as many. Pure functions;
// deterministic for a given seed.
#ifndef PDSERVE_CORE_KV_TOKEN_RETENTION_H_
#define PDSERVE_CORE_KV_TOKEN_RETENTION_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pdserve {

enum class RetentionPolicy {
  kRecent,      // sink and the newest tokens only (StreamingLLM)
  kImportance,  // sink, recent, then the best-scored tokens (SnapKV / H2O)
  kKvCrush,     // kImportance plus KVCrush representatives of the rest
};
enum class RetentionGranularity { kToken, kPage };
enum class AnchorMode { kRandom, kZeros, kOnes, kMean, kAlternate };

struct RetentionOptions {
  RetentionPolicy policy = RetentionPolicy::kKvCrush;
  RetentionGranularity granularity = RetentionGranularity::kToken;
  // Tokens kept per cache layer; when 0, `fraction` of the prompt (rounded up). Both 0 = off.
  int budget = 0;
  double fraction = 0.0;
  // Share of the non-forced budget given to representatives. 0.75 measured best on pd10m at its
  // context of 1024 (alone and under the default profile; 0.5 was better at 512 alone).
  double kvcrush_ratio = 0.75;
  // α of a representative's score bias α·ln min(n, kvcrush_weight_cap) (n: the tokens it stands
  // for). α = 1 and no cap would be its group's attention mass were the group's tokens scored
  // alike; they are not, and one token's K and V standing for many is noisy: a smaller α and a
  // cap trade that bias for less variance. 0.5 and 8 measured best on pd10m
  // (docs/measurements.md, "Token retention"). α = 0: plain KVCrush (no bias).
  double kvcrush_weight = 0.5;
  double kvcrush_weight_cap = 8.0;  // ≥ 1
  int window = 32;  // observation window: the prompt's last queries that score tokens
  // SnapKV's pooling: each token's score is the mean over the `pool` tokens centred on it (odd;
  // 1 = none), so that neighbours of an important token stay with it.
  int pool = 7;
  int sink = 4;
  int recent = 16;
  AnchorMode anchor = AnchorMode::kRandom;
  uint64_t seed = 0;  // for AnchorMode::kRandom
  // Decode-time eviction (H2O): a sequence whose cache reaches max_tokens + a page after a decode
  // step keeps max_tokens, ranked by the attention its decode steps paid each token (a running
  // sum; tokens no step has scored yet rank 0) with the same policy. 0 = off.
  int max_tokens = 0;

  bool enabled() const { return retains_prompts() || max_tokens > 0; }
  // Whether a prompt keeps only part of its tokens (a budget or a fraction).
  bool retains_prompts() const { return budget > 0 || fraction > 0.0; }
  // Tokens an n_tokens prompt keeps: min(n_tokens, budget or ⌈fraction · n_tokens⌉), or every
  // one when both are 0.
  int BudgetFor(int n_tokens) const;
  // Whether kept tokens can carry a score bias (KVCrush with a weight).
  bool weights_representatives() const {
    return policy == RetentionPolicy::kKvCrush && kvcrush_weight > 0.0;
  }
  // InvalidArgument naming the field: negative sizes, fraction, ratio or weight outside [0, 1],
  // a weight cap below 1, window < 1, an even or non-positive pool.
  absl::Status Validate() const;
  // "kvcrush 25% token ratio=0.75 weight=0.5 cap=8 anchor=random seed=0 window=32 pool=7 sink=4
  // recent=16": for reports and the compression profile's identity.
  std::string Describe() const;
};

// Indices (ascending) of the tokens of an n_tokens prompt to keep, from per-head scores
// `importance` ([n_heads, n_tokens] row-major; kRecent ignores it and takes n_heads = 0). Keeps
// every token when the budget covers the prompt. Requires options.Validate().ok(), page_size ≥ 1.
//
// stands_for (optional): per kept token, in the order returned, the tokens it stands for — its
// own count plus, for a representative, the counts of the evicted candidates of its group (a page
// unit's count being the mean of its tokens'). `counts` gives each token's own count, ≥ 1 (what an
// earlier selection's stands_for said; empty: 1 each). Without weights_representatives() every
// kept token keeps its own count.
std::vector<int> SelectRetainedTokens(std::span<const float> importance, int n_heads, int n_tokens,
                                      int page_size, const RetentionOptions& options,
                                      std::vector<float>* stands_for = nullptr,
                                      std::span<const float> counts = {});

// The score bias of a token standing for `count` ≥ 1 tokens: options.kvcrush_weight ·
// ln min(count, options.kvcrush_weight_cap) when weights_representatives(), else 0.
float RetentionScoreBias(const RetentionOptions& options, float count);
// Its inverse: the count a bias came from, as far as the cap lets it be known (min(count, cap));
// 1 without weights_representatives().
float RetentionCount(const RetentionOptions& options, float bias);

// How many tokens SelectRetainedTokens keeps of an n_tokens prompt (the budget in tokens, or in
// whole pages with the last page as long as it is): what a prefill worker reserves pages for
// before it runs the prompt.
int RetainedTokenCount(const RetentionOptions& options, int n_tokens, int page_size);

// The units KVCrush adds as representatives, exposed for tests: from `candidates` (unit indices),
// whose binary head-behaviour vectors are rows of `bits` ([n_units, n_heads], 0/1), `count`
// representatives uniformly spaced along the candidates sorted by (Hamming distance to the
// anchor, index). Returns min(count, candidates.size()) units, in the order picked.
std::vector<int> PickRepresentatives(std::span<const int> candidates, std::span<const uint8_t> bits,
                                     int n_heads, int count, AnchorMode anchor, uint64_t seed);

}  // namespace pdserve

#endif  // PDSERVE_CORE_KV_TOKEN_RETENTION_H_
