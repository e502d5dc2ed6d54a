// LlamaEngine's token retention (KvCompression::retention): see llama_engine.h.
#include <algorithm>

#include "core/engine/llama_engine.h"
#include "core/kv/kv_row_codec.h"
#include "core/kv/token_retention.h"
#include "kernels/attention_importance.h"

namespace pdserve {

void LlamaEngine::BeginRetention() {
  retaining_.clear();
  scoring_.clear();
  const RetentionOptions& options = options_.compression.retention;
  if (!options.enabled()) return;
  const size_t per_token = plan_.caches.size() * config().n_kv_heads;
  const bool scored = options.policy != RetentionPolicy::kRecent;
  for (size_t s = 0; s < segments_.size(); ++s) {
    const Segment& segment = segments_[s];
    const int tokens = segment.start_pos + segment.n;
    if (segment.retain && options.BudgetFor(tokens) < tokens) {
      Retaining& r = retaining_.emplace_back();
      r.segment = static_cast<int>(s);
      r.tokens = tokens;
      if (scored) r.importance.assign(per_token * tokens, 0.0f);
    } else if (segment.decode && !segment.retain && options.max_tokens > 0) {
      GrowRunningScores(segment.sequence, tokens);
      if (scored) scoring_.push_back(static_cast<int>(s));
      if (tokens >= options.max_tokens + options_.kv_page_size) {
        Retaining& r = retaining_.emplace_back();
        r.segment = static_cast<int>(s);
        r.tokens = tokens;
        r.prompt = false;
      }
    }
  }
}

void LlamaEngine::GrowRunningScores(int sequence, int tokens) {
  const int old_ld = running_ld_[sequence];
  if (tokens <= old_ld) return;
  // Room for the sequence's rows and for those a decode step adds up to max_tokens + a page.
  const int ld =
      std::max(tokens, options_.compression.retention.max_tokens + options_.kv_page_size);
  const int64_t rows = int64_t{static_cast<int>(plan_.caches.size())} * config().n_kv_heads;
  std::vector<float> grown(rows * ld, 0.0f);
  const std::vector<float>& old = running_scores_[sequence];
  for (int64_t r = 0; r < rows && old_ld > 0; ++r) {
    std::copy_n(old.begin() + r * old_ld, old_ld, grown.begin() + r * ld);
  }
  running_scores_[sequence] = std::move(grown);
  running_ld_[sequence] = ld;
}

void LlamaEngine::ObserveImportance(int layer, const float* q, int64_t q_stride) {
  const RetentionOptions& options = options_.compression.retention;
  if (retaining_.empty() && scoring_.empty()) return;
  if (options.policy == RetentionPolicy::kRecent) return;
  const int cache = plan_.layers[layer].cache, heads = config().n_kv_heads;
  const kernels::AttentionShape shape = CacheShape(cache);
  // The segment's last `window` queries (after SwiftKV, a prompt has its last row only) into
  // `scores` ([heads, ld] from its first float).
  auto observe = [&](const Segment& segment, int window, float* scores, int64_t ld) {
    window = std::min(window, segment.n);
    kernels::AttentionSequence seq;
    seq.q = q + int64_t{segment.row + segment.n - window} * q_stride;
    seq.q_row_stride = q_stride;
    seq.n_queries = window;
    seq.start_pos = segment.start_pos + segment.n - window;
    seq.kv = CacheView(cache, table_->table(segment.sequence));
    seq.token_bias = RowBiases(segment.sequence, cache);
    kernels::AttentionImportance(pool_, shape, seq, {scores, static_cast<size_t>(heads * ld)}, ld,
                                 importance_workspace_);
  };
  for (Retaining& r : retaining_) {
    if (!r.prompt) continue;  // its decode step is in scoring_
    observe(segments_[r.segment], options.window,
            r.importance.data() + int64_t{cache} * heads * r.tokens, r.tokens);
  }
  for (int s : scoring_) {
    const Segment& segment = segments_[s];
    observe(segment, 1,
            running_scores_[segment.sequence].data() +
                int64_t{cache} * heads * running_ld_[segment.sequence],
            running_ld_[segment.sequence]);
  }
}

void LlamaEngine::RetainTokens() {
  if (retaining_.empty()) return;
  const RetentionOptions& options = options_.compression.retention;
  const int caches = static_cast<int>(plan_.caches.size());
  for (const Retaining& r : retaining_) {
    const int sequence = segments_[r.segment].sequence;
    if (r.prompt) {
      KeepSelected(sequence, r.tokens, options.BudgetFor(r.tokens),
                   r.importance.empty() ? nullptr : r.importance.data(), r.tokens);
    } else {
      KeepSelected(sequence, r.tokens, options.max_tokens, running_scores_[sequence].data(),
                   running_ld_[sequence]);
    }
  }
  retaining_.clear();
  for (int c = 0; c < caches && layer_observer_ != nullptr; ++c) {
    layer_observer_->CacheLayerStored(c);
  }
}

void LlamaEngine::KeepSelected(int sequence, int tokens, int budget, const float* scores,
                               int64_t ld) {
  RetentionOptions options = options_.compression.retention;
  options.budget = budget;
  const int heads = config().n_kv_heads, page_size = options_.kv_page_size;
  const int caches = static_cast<int>(plan_.caches.size());
  const std::vector<int32_t>& pages = table_->table(sequence).pages();
  std::vector<float>& running = running_scores_[sequence];
  size_t kept_tokens = 0;
  std::vector<std::vector<int32_t>> positions(caches);
  std::vector<float> packed;  // a cache layer's scores, [heads, tokens], when ld ≠ tokens
  const bool weighted = options.weights_representatives();
  // Counts from an earlier selection (decode-time eviction); none before a prompt's, all 1.
  const bool earlier = weighted && !row_biases_[sequence].empty();
  if (weighted && !earlier) AllocateRowBiases(sequence);
  std::vector<float> counts, stands_for;  // what each row stands for, before and after
  for (int c = 0; c < caches; ++c) {
    std::span<const float> layer;
    if (scores != nullptr && ld == tokens) {
      layer = {scores + int64_t{c} * heads * ld, static_cast<size_t>(heads) * tokens};
    } else if (scores != nullptr) {
      packed.resize(static_cast<size_t>(heads) * tokens);
      for (int h = 0; h < heads; ++h) {
        std::copy_n(scores + (int64_t{c} * heads + h) * ld, tokens,
                    packed.begin() + int64_t{h} * tokens);
      }
      layer = packed;
    }
    std::vector<float>* biases = weighted ? &row_biases_[sequence][c] : nullptr;
    if (earlier) {
      counts.resize(tokens);
      for (int t = 0; t < tokens; ++t) counts[t] = RetentionCount(options, (*biases)[t]);
    }
    const std::vector<int> kept = SelectRetainedTokens(layer, heads, tokens, page_size, options,
                                                       weighted ? &stands_for : nullptr, counts);
    kept_tokens = kept.size();  // the same for every cache layer (token_retention.h)
    if (weighted) {
      for (size_t i = 0; i < kept.size(); ++i) {
        (*biases)[i] = RetentionScoreBias(options, stands_for[i]);
      }
      std::fill(biases->begin() + kept.size(), biases->begin() + tokens, 0.0f);
    }
    positions[c].resize(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) positions[c][i] = RowPosition(sequence, c, kept[i]);
    const CachePlan& cache = plan_.caches[c];
    CompactKvRows(cache.layout.k, pages, kept,
                  [&](int32_t page) { return kv_->Page(k_section_[c], page); });
    CompactKvRows(cache.layout.v, pages, kept, [&](int32_t page) {
      return cache.kcache ? tier_->WritablePage(v_section_[c], page)
                          : kv_->Page(v_section_[c], page);
    });
    for (int h = 0; h < heads && !running.empty(); ++h) {
      float* row = running.data() + (int64_t{c} * heads + h) * running_ld_[sequence];
      for (size_t i = 0; i < kept.size(); ++i) row[i] = row[kept[i]];
      std::fill(row + kept.size(), row + tokens, 0.0f);
    }
  }
  table_->Truncate(sequence, static_cast<int>(kept_tokens));
  // Rows of a sequence given its position came from pages: their positions are not known here.
  if (!position_set_[sequence]) kept_positions_[sequence] = std::move(positions);
}

int32_t LlamaEngine::RowPosition(int sequence, int cache, int row) const {
  if (position_set_[sequence]) return -1;
  const std::vector<std::vector<int32_t>>& kept = kept_positions_[sequence];
  if (!kept.empty() && row < static_cast<int>(kept[cache].size())) return kept[cache][row];
  return row + table_->Position(sequence) - table_->Length(sequence);
}

float LlamaEngine::RowScoreBias(int sequence, int cache, int row) const {
  const float* biases = RowBiases(sequence, cache);
  return biases != nullptr ? biases[row] : 0.0f;
}

absl::Status LlamaEngine::StoreRowScoreBiases(int sequence, int cache, int first,
                                              std::span<const float> biases) {
  if (row_biases_[sequence].empty()) {
    if (std::all_of(biases.begin(), biases.end(), [](float b) { return b == 0.0f; })) {
      return absl::OkStatus();
    }
    AllocateRowBiases(sequence);
  }
  std::copy(biases.begin(), biases.end(), row_biases_[sequence][cache].begin() + first);
  return absl::OkStatus();
}

const float* LlamaEngine::RowBiases(int sequence, int cache) const {
  const std::vector<std::vector<float>>& biases = row_biases_[sequence];
  return biases.empty() ? nullptr : biases[cache].data();
}

void LlamaEngine::AllocateRowBiases(int sequence) {
  row_biases_[sequence].assign(plan_.caches.size(), std::vector<float>(max_context_, 0.0f));
}

void LlamaEngine::ForgetPositions(int sequence) {
  kept_positions_[sequence].clear();
  row_biases_[sequence] = {};  // frees it
  position_set_[sequence] = 0;
  running_scores_[sequence] = {};  // frees it
  running_ld_[sequence] = 0;
}

void LlamaEngine::CacheLayerStored(int cache) {
  // A retaining Forward tells the observer once the pages are compacted (RetainTokens).
  if (layer_observer_ != nullptr && retaining_.empty()) layer_observer_->CacheLayerStored(cache);
}

}  // namespace pdserve
