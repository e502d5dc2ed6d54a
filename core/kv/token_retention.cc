#include "core/kv/token_retention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pdserve {
namespace {

const char* PolicyName(RetentionPolicy policy) {
  switch (policy) {
    case RetentionPolicy::kRecent:
      return "recent";
    case RetentionPolicy::kImportance:
      return "snapkv";
    case RetentionPolicy::kKvCrush:
      return "kvcrush";
  }
  return "?";
}

const char* AnchorName(AnchorMode anchor) {
  switch (anchor) {
    case AnchorMode::kRandom:
      return "random";
    case AnchorMode::kZeros:
      return "zeros";
    case AnchorMode::kOnes:
      return "ones";
    case AnchorMode::kMean:
      return "mean";
    case AnchorMode::kAlternate:
      return "alternate";
  }
  return "?";
}

// The prompt cut into units (tokens or pages) with their scores summed.
struct Units {
  int size = 1;   // tokens per unit
  int count = 0;  // units
  int first(int u) const { return u * size; }
};

// Per head, each token's score averaged over the `pool` tokens centred on it (those that exist).
std::vector<float> PoolScores(std::span<const float> importance, int n_heads, int n_tokens,
                              int pool) {
  std::vector<float> pooled(importance.begin(), importance.end());
  const int half = pool / 2;
  if (half == 0) return pooled;
  for (int h = 0; h < n_heads; ++h) {
    const float* row = importance.data() + int64_t{h} * n_tokens;
    double sum = 0.0;  // of row[t - half .. t + half] within range, slid along t
    for (int t = 0; t < std::min(half, n_tokens); ++t) sum += row[t];
    for (int t = 0; t < n_tokens; ++t) {
      if (t + half < n_tokens) sum += row[t + half];
      if (t - half - 1 >= 0) sum -= row[t - half - 1];
      const int count = std::min(n_tokens - 1, t + half) - std::max(0, t - half) + 1;
      pooled[int64_t{h} * n_tokens + t] = static_cast<float>(sum / count);
    }
  }
  return pooled;
}

// Units a budget of `tokens` keeps: every unit is whole, the last (possibly partial) one always
// kept, so pages fill the budget after the last page's tokens (at least the last page).
int UnitBudget(int tokens, int n_tokens, const Units& units) {
  const int last = n_tokens - (units.count - 1) * units.size;
  return std::min(units.count, 1 + std::max(0, (tokens - last) / units.size));
}

// Indices of the `k` largest of `scores` among `from` (ties to the lower index), in any order.
// The order compared by is total, so the set is unique: a linear-time selection finds it.
std::vector<int> TopK(std::span<const int> from, std::span<const double> scores, int k) {
  k = std::min<int>(k, static_cast<int>(from.size()));
  if (k <= 0) return {};
  // (−score, index) in ascending order is that order, compared in place (no indirection).
  std::vector<std::pair<double, int>> order;
  order.reserve(from.size());
  for (int u : from) order.emplace_back(-scores[u], u);
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end());
  std::vector<int> top(k);
  for (int i = 0; i < k; ++i) top[i] = order[i].second;
  return top;
}

// sums[u] += the scores in `row` of unit u's tokens, for every unit.
void AddUnitSums(const float* row, int n_tokens, const Units& units, std::span<double> sums) {
  if (units.size == 1) {
    for (int t = 0; t < n_tokens; ++t) sums[t] += row[t];
    return;
  }
  for (int u = 0; u < units.count; ++u) {
    for (int t = units.first(u); t < std::min(n_tokens, units.first(u + 1)); ++t) sums[u] += row[t];
  }
}

std::vector<uint8_t> Anchor(std::span<const int> candidates, std::span<const uint8_t> bits,
                            int n_heads, AnchorMode mode, uint64_t seed) {
  std::vector<uint8_t> anchor(n_heads, 0);
  std::mt19937_64 random(seed);
  for (int h = 0; h < n_heads; ++h) {
    switch (mode) {
      case AnchorMode::kRandom:
        anchor[h] = static_cast<uint8_t>(random() & 1);
        break;
      case AnchorMode::kZeros:
        break;
      case AnchorMode::kOnes:
        anchor[h] = 1;
        break;
      case AnchorMode::kMean: {
        int ones = 0;
        for (int u : candidates) ones += bits[int64_t{u} * n_heads + h];
        anchor[h] = 2 * ones >= static_cast<int>(candidates.size()) ? 1 : 0;
        break;
      }
      case AnchorMode::kAlternate:
        anchor[h] = static_cast<uint8_t>(h % 2);
        break;
    }
  }
  return anchor;
}

// `candidates` sorted by (Hamming distance of their bits to the anchor, index).
std::vector<int> HammingOrder(std::span<const int> candidates, std::span<const uint8_t> bits,
                              int n_heads, AnchorMode anchor_mode, uint64_t seed) {
  const std::vector<uint8_t> anchor = Anchor(candidates, bits, n_heads, anchor_mode, seed);
  std::vector<std::pair<int, int>> sorted;  // (Hamming distance, unit)
  sorted.reserve(candidates.size());
  for (int u : candidates) {
    int distance = 0;
    for (int h = 0; h < n_heads; ++h) distance += bits[int64_t{u} * n_heads + h] != anchor[h];
    sorted.emplace_back(distance, u);
  }
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> order(sorted.size());
  for (size_t i = 0; i < sorted.size(); ++i) order[i] = sorted[i].second;
  return order;
}

// Where group i of `count` ≤ m starts in an order of m candidates: groups are the uniformly spaced
// runs [GroupStart(i), GroupStart(i + 1)), each represented by its first candidate.
int GroupStart(int i, int m, int count) { return static_cast<int>(int64_t{i} * m / count); }

// Each unit's count: the mean of its tokens' `counts` (1 each when empty).
std::vector<double> UnitCounts(std::span<const float> counts, int n_tokens, const Units& units) {
  std::vector<double> unit_counts(units.count, 1.0);
  if (counts.empty()) return unit_counts;
  for (int u = 0; u < units.count; ++u) {
    const int end = std::min(n_tokens, units.first(u + 1));
    double sum = 0.0;
    for (int t = units.first(u); t < end; ++t) sum += counts[t];
    unit_counts[u] = sum / (end - units.first(u));
  }
  return unit_counts;
}

// Per unit and head, 1 when the unit is in that head's top half (⌊units/2⌋ best, ties to the
// lower index) by the head's score summed over the unit's tokens: [units, n_heads].
std::vector<uint8_t> HeadBehaviourBits(std::span<const float> importance, int n_heads, int n_tokens,
                                       const Units& units) {
  std::vector<uint8_t> bits(static_cast<size_t>(units.count) * n_heads, 0);
  std::vector<double> head_scores(units.count);
  std::vector<int> all(units.count);
  std::iota(all.begin(), all.end(), 0);
  for (int h = 0; h < n_heads; ++h) {
    std::fill(head_scores.begin(), head_scores.end(), 0.0);
    AddUnitSums(importance.data() + int64_t{h} * n_tokens, n_tokens, units, head_scores);
    for (int u : TopK(all, head_scores, units.count / 2)) bits[int64_t{u} * n_heads + h] = 1;
  }
  return bits;
}

}  // namespace

int RetentionOptions::BudgetFor(int n_tokens) const {
  if (budget > 0) return std::min(n_tokens, budget);
  const int from_fraction = static_cast<int>(std::ceil(fraction * n_tokens));
  return fraction > 0.0 ? std::min(n_tokens, std::max(1, from_fraction)) : n_tokens;
}

absl::Status RetentionOptions::Validate() const {
  if (budget < 0) return absl::InvalidArgumentError(absl::StrCat("budget ", budget, " < 0"));
  if (max_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max tokens ", max_tokens, " < 0"));
  }
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("fraction ", fraction, " is outside [0, 1]"));
  }
  if (!(kvcrush_ratio >= 0.0 && kvcrush_ratio <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kvcrush ratio ", kvcrush_ratio, " is outside [0, 1]"));
  }
  if (!(kvcrush_weight >= 0.0 && kvcrush_weight <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kvcrush weight ", kvcrush_weight, " is outside [0, 1]"));
  }
  if (!(kvcrush_weight_cap >= 1.0 && std::isfinite(kvcrush_weight_cap))) {
    return absl::InvalidArgumentError(
        absl::StrCat("kvcrush weight cap ", kvcrush_weight_cap, " is not finite and ≥ 1"));
  }
  if (window < 1) return absl::InvalidArgumentError(absl::StrCat("window ", window, " < 1"));
  if (pool < 1 || pool % 2 == 0) {
    return absl::InvalidArgumentError(absl::StrCat("pool ", pool, " must be odd and ≥ 1"));
  }
  if (sink < 0 || recent < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sink ", sink, " and recent ", recent, " must be ≥ 0"));
  }
  return absl::OkStatus();
}

std::string RetentionOptions::Describe() const {
  std::string size = budget > 0     ? absl::StrCat(budget, " tokens")
                     : fraction > 0 ? absl::StrFormat("%g%%", fraction * 100.0)
                                    : std::string("whole prompt");
  std::string text = absl::StrCat(PolicyName(policy), " ", size,
                                  granularity == RetentionGranularity::kPage ? " page" : " token");
  if (policy == RetentionPolicy::kKvCrush) {
    absl::StrAppend(&text,
                    absl::StrFormat(" ratio=%g weight=%g cap=%g anchor=%s seed=%d", kvcrush_ratio,
                                    kvcrush_weight, kvcrush_weight_cap, AnchorName(anchor), seed));
  }
  if (policy != RetentionPolicy::kRecent)
    absl::StrAppend(&text, " window=", window, " pool=", pool);
  absl::StrAppend(&text, " sink=", sink, " recent=", recent);
  if (max_tokens > 0) absl::StrAppend(&text, " max=", max_tokens);
  return text;
}

int RetainedTokenCount(const RetentionOptions& options, int n_tokens, int page_size) {
  const int budget = options.BudgetFor(n_tokens);
  if (budget >= n_tokens || options.granularity == RetentionGranularity::kToken) return budget;
  const Units pages{page_size, (n_tokens + page_size - 1) / page_size};
  const int last = n_tokens - (pages.count - 1) * page_size;
  return (UnitBudget(budget, n_tokens, pages) - 1) * page_size + last;
}

std::vector<int> PickRepresentatives(std::span<const int> candidates, std::span<const uint8_t> bits,
                                     int n_heads, int count, AnchorMode anchor_mode,
                                     uint64_t seed) {
  const int m = static_cast<int>(candidates.size());
  count = std::min(count, m);
  if (count <= 0) return {};
  const std::vector<int> order = HammingOrder(candidates, bits, n_heads, anchor_mode, seed);
  std::vector<int> picked(count);
  for (int i = 0; i < count; ++i) picked[i] = order[GroupStart(i, m, count)];
  return picked;
}

float RetentionScoreBias(const RetentionOptions& options, float count) {
  if (!options.weights_representatives()) return 0.0f;
  const double capped = std::min(double{count}, options.kvcrush_weight_cap);
  return static_cast<float>(options.kvcrush_weight * std::log(capped));
}

float RetentionCount(const RetentionOptions& options, float bias) {
  if (!options.weights_representatives()) return 1.0f;
  return static_cast<float>(std::exp(double{bias} / options.kvcrush_weight));
}

std::vector<int> SelectRetainedTokens(std::span<const float> importance, int n_heads, int n_tokens,
                                      int page_size, const RetentionOptions& options,
                                      std::vector<float>* stands_for,
                                      std::span<const float> counts) {
  const int budget_tokens = options.BudgetFor(n_tokens);
  std::vector<int> kept_tokens;
  const auto own_count = [&](int t) { return counts.empty() ? 1.0f : counts[t]; };
  if (stands_for != nullptr) stands_for->clear();
  if (budget_tokens >= n_tokens) {
    kept_tokens.resize(n_tokens);
    std::iota(kept_tokens.begin(), kept_tokens.end(), 0);
    for (int t = 0; t < n_tokens && stands_for != nullptr; ++t) stands_for->push_back(own_count(t));
    return kept_tokens;
  }
  Units units;
  units.size = options.granularity == RetentionGranularity::kPage ? page_size : 1;
  units.count = (n_tokens + units.size - 1) / units.size;
  const int budget = UnitBudget(budget_tokens, n_tokens, units);
  const auto units_of = [&](int tokens) { return (tokens + units.size - 1) / units.size; };

  // Forced: the last unit, sink units, then recent units from the end, within the budget.
  std::vector<uint8_t> kept(units.count, 0);
  kept[units.count - 1] = 1;
  int n_kept = 1;
  for (int u = 0; u < units_of(options.sink) && n_kept < budget; ++u) {
    if (!kept[u]) kept[u] = 1, ++n_kept;
  }
  const int recent = units_of(options.recent);
  for (int u = units.count - 1; u >= 0 && n_kept < budget && u >= units.count - recent; --u) {
    if (!kept[u]) kept[u] = 1, ++n_kept;
  }
  std::vector<int> free_units;
  for (int u = 0; u < units.count; ++u) {
    if (!kept[u]) free_units.push_back(u);
  }
  const int rest = budget - n_kept;

  std::vector<double> scores(units.count, 0.0);
  std::vector<double> group_extra(units.count, 0.0);  // a representative's group, beyond itself
  std::vector<float> pooled;
  if (options.policy == RetentionPolicy::kRecent) {
    for (int u = 0; u < units.count; ++u) scores[u] = u;  // newest first
  } else {
    pooled = PoolScores(importance, n_heads, n_tokens, options.pool);
    importance = pooled;
    for (int h = 0; h < n_heads; ++h) {
      AddUnitSums(importance.data() + int64_t{h} * n_tokens, n_tokens, units, scores);
    }
  }
  const int representatives = options.policy == RetentionPolicy::kKvCrush
                                  ? static_cast<int>(options.kvcrush_ratio * rest)
                                  : 0;
  for (int u : TopK(free_units, scores, rest - representatives)) kept[u] = 1;
  if (representatives > 0) {
    std::vector<int> candidates;
    for (int u : free_units) {
      if (!kept[u]) candidates.push_back(u);
    }
    const std::vector<uint8_t> bits = HeadBehaviourBits(importance, n_heads, n_tokens, units);
    const std::vector<int> order =
        HammingOrder(candidates, bits, n_heads, options.anchor, options.seed);
    const int m = static_cast<int>(order.size()), groups = std::min(representatives, m);
    const std::vector<double> unit_counts = UnitCounts(counts, n_tokens, units);
    for (int i = 0; i < groups; ++i) {
      const int pick = order[GroupStart(i, m, groups)];
      kept[pick] = 1;
      if (!options.weights_representatives()) continue;
      for (int j = GroupStart(i, m, groups) + 1; j < GroupStart(i + 1, m, groups); ++j) {
        group_extra[pick] += unit_counts[order[j]];
      }
    }
  }
  for (int u = 0; u < units.count; ++u) {
    if (!kept[u]) continue;
    for (int t = units.first(u); t < std::min(n_tokens, units.first(u + 1)); ++t) {
      kept_tokens.push_back(t);
      if (stands_for != nullptr) {
        stands_for->push_back(own_count(t) + static_cast<float>(group_extra[u]));
      }
    }
  }
  return kept_tokens;
}

}  // namespace pdserve
