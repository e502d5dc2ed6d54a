#include "kernels/kcache_attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/decode_chunks.h"
#include "kernels/cpu/softmax.h"

namespace pdserve::kernels {
namespace {

// Per-thread workspace: scores (then probabilities) of the group's query heads [group, C], their
// sum [C], the keep mask and the selection order [C] each, and the chunks' partials
// (decode_chunks.h) [chunks, group].
int64_t PerThreadFloats(const AttentionShape& shape, int max_context) {
  return int64_t{max_context} * (shape.group() + 3) +
         int64_t{MaxDecodeChunks(max_context)} * shape.group() * PartialFloats(shape.head_dim);
}

// Scores of query head j's row p[0, n_tokens) become the chunks' unnormalized softmaxes, their
// stats going to the head's partials (`stride` floats apart); adds the head's probabilities over
// the whole row to total[0, n_tokens).
void ChunkSoftmax(float* p, int n_tokens, int page_size, float* partials, int64_t stride,
                  float* total) {
  const int chunks = DecodeChunks(n_tokens, page_size), chunk = DecodeChunkTokens(page_size);
  for (int c = 0; c < chunks; ++c) {
    const ExpStats e = ExpInPlace(p + c * chunk, std::min(chunk, n_tokens - c * chunk));
    partials[c * stride] = e.max;
    partials[c * stride + 1] = e.sum;
  }
  const ExpStats merged = MergedStats(partials, stride, chunks);
  for (int c = 0; c < chunks; ++c) {
    const float scale = std::exp(partials[c * stride] - merged.max) / merged.sum;
    for (int t = c * chunk; t < std::min(n_tokens, (c + 1) * chunk); ++t) total[t] += p[t] * scale;
  }
}

// Drops the unselected tokens from head j's weights p[0, n_tokens); renormalized, each chunk's
// sum becomes the sum of what it keeps, unless it keeps no weight at all.
void KeepSelected(float* p, const uint8_t* keep, int n_tokens, int page_size, bool renormalize,
                  float* partials, int64_t stride) {
  float kept = 0.0f;
  for (int t = 0; t < n_tokens; ++t) {
    p[t] = keep[t] ? p[t] : 0.0f;
    kept += p[t];
  }
  if (!renormalize || !(kept > 0.0f)) return;
  const int chunks = DecodeChunks(n_tokens, page_size), chunk = DecodeChunkTokens(page_size);
  for (int c = 0; c < chunks; ++c) {
    const int t0 = c * chunk, t1 = std::min(n_tokens, t0 + chunk);
    partials[c * stride + 1] = std::accumulate(p + t0, p + t1, 0.0f);
  }
}

// KV head g of one decode sequence: every query head of the group at once, so each key and each
// fetched value page is read once per pass of kGroupPass heads. The values are weighted chunk by
// chunk and merged as Attention's decode path does (decode_chunks.h), so that with every token
// selected the result is its result.
void AttendGroup(const DecodeRowKernels& rk, const AttentionShape& s, const AttentionSequence& seq,
                 int sequence, int g, const TopNOptions& options, const FetchValuePage& fetch,
                 float* ws, int* selected) {
  const int group = s.group(), n_tokens = seq.start_pos + 1;
  const PagedKvView& kv = seq.kv;
  const int chunks = DecodeChunks(n_tokens, kv.page_size);
  const int chunk = DecodeChunkTokens(kv.page_size);
  const int64_t record = PartialFloats(s.head_dim), chunk_stride = group * record;
  float* probs = ws;                                 // [group, n_tokens]
  float* total = probs + int64_t{group} * n_tokens;  // [n_tokens]
  auto* keep = reinterpret_cast<uint8_t*>(total + n_tokens);
  auto* order = reinterpret_cast<int*>(total + 2 * int64_t{n_tokens});
  float* partials = total + 3 * int64_t{n_tokens};  // [chunks, group] records
  ScoreHeads(rk, s, kv, g, g + 1, seq.q, 0, n_tokens, probs, n_tokens);
  AddTokenBias(seq.token_bias, 0, n_tokens, group, probs, n_tokens);
  std::fill(total, total + n_tokens, 0.0f);
  for (int j = 0; j < group; ++j) {
    ChunkSoftmax(probs + int64_t{j} * n_tokens, n_tokens, kv.page_size, partials + j * record,
                 chunk_stride, total);
  }
  const int kept = SelectTokens(total, n_tokens, options, keep, order);
  if (selected != nullptr) *selected = kept;
  for (int j = 0; j < group; ++j) {
    KeepSelected(probs + int64_t{j} * n_tokens, keep, n_tokens, kv.page_size, options.renormalize,
                 partials + j * record, chunk_stride);
    for (int c = 0; c < chunks; ++c) {
      float* o = partials + c * chunk_stride + j * record + kPartialHeader;
      std::fill(o, o + kv.v.dim(g), 0.0f);
    }
  }
  for (int t = 0, page = 0; t < n_tokens; t += kv.page_size, ++page) {
    const int count = std::min(kv.page_size, n_tokens - t);
    if (std::none_of(keep + t, keep + t + count, [](uint8_t k) { return k != 0; })) continue;
    const int c = t / chunk;
    const PageRows rows = PageRowsOf(kv.v, fetch(sequence, page, g), kv.page_size, g, count);
    ForEachPass(s, g, g + 1, [&](int /*g*/, int h0, int nq) {
      float* out[kGroupPass];
      for (int j = 0; j < nq; ++j) {
        out[j] = partials + c * chunk_stride + (h0 - g * group + j) * record + kPartialHeader;
      }
      rk.accumulate(probs + int64_t{h0 - g * group} * n_tokens + t, n_tokens, nq, rows, out);
    });
  }
  for (int j = 0; j < group; ++j) {
    MergeChunks(partials + j * record, chunk_stride, chunks, kv.v.dim(g),
                seq.out + s.out_offset(g * group + j));
  }
}

}  // namespace

int SelectTokens(const float* scores, int n_tokens, const TopNOptions& options, uint8_t* keep,
                 int* order) {
  const int sink = std::clamp(options.sink, 0, n_tokens);
  const int recent_begin = std::max(sink, n_tokens - std::max(options.recent, 0));
  std::fill(keep, keep + sink, 1);
  std::fill(keep + sink, keep + recent_begin, 0);
  std::fill(keep + recent_begin, keep + n_tokens, 1);
  const int candidates = recent_begin - sink;
  const int take = std::clamp(options.top_n, 0, candidates);
  for (int i = 0; i < candidates; ++i) order[i] = sink + i;
  // Larger scores first, ties to the lower index; NaN scores rank last (after −∞ too), which
  // keeps the order a strict weak one.
  auto before = [scores](int a, int b) {
    const bool na = std::isnan(scores[a]), nb = std::isnan(scores[b]);
    if (na != nb) return nb;
    return !na && scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
  };
  if (take < candidates) std::nth_element(order, order + take, order + candidates, before);
  for (int i = 0; i < take; ++i) keep[order[i]] = 1;
  return sink + (n_tokens - recent_begin) + take;
}

size_t KCacheWorkspaceFloats(const AttentionShape& shape, int num_threads, int max_context) {
  return static_cast<size_t>(num_threads) * PerThreadFloats(shape, max_context);
}

void KCacheAttention(ThreadPool& pool, const AttentionShape& shape,
                     std::span<const AttentionSequence> sequences, const TopNOptions& options,
                     const FetchValuePage& fetch, std::span<float> workspace,
                     std::span<int> selected) {
  const int64_t tasks = static_cast<int64_t>(sequences.size()) * shape.n_kv_heads;
  const size_t per_thread = workspace.size() / pool.size();
  const DecodeRowKernels& rk = ActiveDecodeRows();
  pool.ParallelForDynamic(tasks, 1, [&](int64_t begin, int64_t end, int thread) {
    for (int64_t task = begin; task < end; ++task) {
      const int sequence = static_cast<int>(task / shape.n_kv_heads);
      const int g = static_cast<int>(task % shape.n_kv_heads);
      AttendGroup(rk, shape, sequences[sequence], sequence, g, options, fetch,
                  workspace.data() + thread * per_thread,
                  selected.empty() ? nullptr : &selected[task]);
    }
  });
}

}  // namespace pdserve::kernels
