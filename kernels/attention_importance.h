// AttentionImportance: SnapKV's per-KV-head token scores (research/algorithms.md §5), what token
// retention (core/kv/token_retention.h) ranks a prompt's tokens by. For the queries of one
// sequence — query i at position start_pos + i attending to tokens [0, start_pos + i], as in
// kernels/attention.h — it adds each query's softmax probabilities, averaged over the query heads
// of a KV head, into that KV head's row:
//
//   importance[g · ld + t] += Σ_i (1 / group) Σ_{h of g} softmax_i,h(q_i,h · k_t / √head_dim)
//
// for t < n_keys = start_pos + n_queries (a token a query does not see gets nothing from it). Keys
// are read as attention reads them (f32, f16, FP8; ZACK widths), so the scores are those of the
// cache as stored. fp32 arithmetic: a prompt's window (16 queries or more) as GEMMs over the keys
// gathered once per KV head, as prefill attention runs; fewer queries on the decode row kernels.
#ifndef PDSERVE_KERNELS_ATTENTION_IMPORTANCE_H_
#define PDSERVE_KERNELS_ATTENTION_IMPORTANCE_H_

#include <cstddef>
#include <span>

#include "core/base/thread_pool.h"
#include "kernels/attention_shape.h"

namespace pdserve::kernels {

// Floats of workspace AttentionImportance needs for `num_threads` threads, contexts up to
// `max_context` and KV pages of `page_size` tokens.
size_t AttentionImportanceWorkspaceFloats(const AttentionShape& shape, int num_threads,
                                          int max_context, int page_size);

// Adds the sequence's queries' probabilities into `importance` ([n_kv_heads, ld], ld ≥ n_keys =
// start_pos + n_queries; H2O's running scores use a fixed ld), split across the pool by KV head.
// sequence.out is not used. Does not allocate.
void AttentionImportance(ThreadPool& pool, const AttentionShape& shape,
                         const AttentionSequence& sequence, std::span<float> importance, int64_t ld,
                         std::span<float> workspace);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_ATTENTION_IMPORTANCE_H_
