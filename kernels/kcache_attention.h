// KCache decode attention (DESIGN §4, research/algorithms.md §4.3): for one-token queries, scores
// over every cached key, softmax over all of them, then per KV head a selected set of tokens —
// the first `sink` tokens, the last `recent` tokens, and the `top_n` others with the largest
// probability summed over the head's query heads (ties to the lower position) — whose values are
// fetched page by page and combined with the full-softmax probabilities, optionally renormalized
// over the selected set. Keys are read as in kernels/attention.h; values through a fetch callback,
// so they can live in another memory tier, and only pages holding a selected token are fetched.
//
// With top_n + sink + recent ≥ the context every token is selected and, unnormalized, the result
// is bit-identical to Attention's decode path.
#ifndef PDSERVE_KERNELS_KCACHE_ATTENTION_H_
#define PDSERVE_KERNELS_KCACHE_ATTENTION_H_

#include <cstdint>
#include <functional>
#include <span>

#include "core/base/thread_pool.h"
#include "kernels/attention.h"

namespace pdserve::kernels {

struct TopNOptions {
  int top_n = 0;
  int sink = 0;
  int recent = 0;
  bool renormalize = false;
};

// Returns the start of the V section of page `page_index` (in sequence order) of sequence
// `sequence` (index into the span), to be read for KV head `head`: rows and scales laid out as
// kv.v describes. Called concurrently from pool threads; the pointer stays valid until the
// KCacheAttention call returns.
using FetchValuePage = std::function<const uint8_t*(int sequence, int page_index, int head)>;

// Floats of workspace KCacheAttention needs.
size_t KCacheWorkspaceFloats(const AttentionShape& shape, int num_threads, int max_context);

// Every sequence must have n_queries == 1; kv.v.pool is ignored (values come from `fetch`).
// `selected`, when not empty, receives per (sequence, KV head) the number of tokens selected.
void KCacheAttention(ThreadPool& pool, const AttentionShape& shape,
                     std::span<const AttentionSequence> sequences, const TopNOptions& options,
                     const FetchValuePage& fetch, std::span<float> workspace,
                     std::span<int> selected = {});

// Which tokens of [0, n_tokens) to keep given per-token scores: sink, recent, then top_n by score
// (ties to the lower index). Writes 1/0 into keep[0, n_tokens); returns how many are kept.
// `order` is scratch of n_tokens ints.
int SelectTokens(const float* scores, int n_tokens, const TopNOptions& options, uint8_t* keep,
                 int* order);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_KCACHE_ATTENTION_H_
