#include "kernels/kcache_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/softmax.h"

namespace pdserve::kernels {
namespace {

// Per-thread workspace: probabilities of the group's query heads [group, C], their sum [C], and
// the keep mask and the selection order [C] each.
int64_t PerThreadFloats(const AttentionShape& shape, int max_context) {
  return int64_t{max_context} * (shape.group() + 3);
}

// KV head g of one decode sequence: every query head of the group at once, so each key and each
// fetched value page is read once per pass of kGroupPass heads.
void AttendGroup(const DecodeRowKernels& rk, const AttentionShape& s, const AttentionSequence& seq,
                 int sequence, int g, const TopNOptions& options, const FetchValuePage& fetch,
                 float* ws, int* selected) {
  const int group = s.group(), n_tokens = seq.start_pos + 1;
  const PagedKvView& kv = seq.kv;
  float* probs = ws;                                 // [group, n_tokens]
  float* total = probs + int64_t{group} * n_tokens;  // [n_tokens]
  auto* keep = reinterpret_cast<uint8_t*>(total + n_tokens);
  auto* order = reinterpret_cast<int*>(total + 2 * int64_t{n_tokens});
  ScoreHeads(rk, s, kv, g, g + 1, seq.q, n_tokens, probs, n_tokens);
  std::fill(total, total + n_tokens, 0.0f);
  for (int j = 0; j < group; ++j) {
    float* p = probs + int64_t{j} * n_tokens;
    SoftmaxInPlace(p, n_tokens);
    for (int t = 0; t < n_tokens; ++t) total[t] += p[t];
  }
  const int kept = SelectTokens(total, n_tokens, options, keep, order);
  if (selected != nullptr) *selected = kept;
  for (int j = 0; j < group; ++j) {
    float* p = probs + int64_t{j} * n_tokens;
    float mass = 0.0f;
    for (int t = 0; t < n_tokens; ++t) {
      p[t] = keep[t] ? p[t] : 0.0f;
      mass += p[t];
    }
    if (options.renormalize && mass > 0.0f) {
      for (int t = 0; t < n_tokens; ++t) p[t] /= mass;
    }
    float* out = seq.out + s.out_offset(g * group + j);
    std::fill(out, out + kv.v.dim(g), 0.0f);
  }
  for (int t = 0, page = 0; t < n_tokens; t += kv.page_size, ++page) {
    const int count = std::min(kv.page_size, n_tokens - t);
    if (std::none_of(keep + t, keep + t + count, [](uint8_t k) { return k != 0; })) continue;
    const PageRows rows = PageRowsOf(kv.v, fetch(sequence, page, g), kv.page_size, g, count);
    ForEachPass(s, g, g + 1, [&](int /*g*/, int h0, int nq) {
      float* out[kGroupPass];
      for (int j = 0; j < nq; ++j) out[j] = seq.out + s.out_offset(h0 + j);
      rk.accumulate(probs + int64_t{h0 - g * group} * n_tokens + t, n_tokens, nq, rows, out);
    });
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
