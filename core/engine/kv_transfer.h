// KV transfer: a sequence's KV cache moved between engines as encoded KV pages
// (core/kv/kv_page.h), so that a prefill worker computes a prompt and a decode worker continues
// it. The exporter encodes every page of every cache layer of a sequence (page i holds tokens
// [i·P, (i+1)·P), P = the engine's kv_page_size); the importer starts a sequence of the same
// length (Engine::AddSequenceWithTokens) and copies each decoded page into it. Both engines
// must run the same weights and compression (checked per page through its layout; the
// calibration hash is the caller's to check). Within one engine, CopySequence copies a sequence's
// cache into a new sequence. Functions take the engine by reference and are as
// thread-safe as the engine: not at all, and only on the thread that drives it.
#ifndef PDSERVE_CORE_ENGINE_KV_TRANSFER_H_
#define PDSERVE_CORE_ENGINE_KV_TRANSFER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine/engine.h"
#include "core/kv/kv_page.h"

namespace pdserve {

// Pages holding num_tokens tokens: ⌈num_tokens / page_size⌉ (0 for num_tokens ≤ 0).
int NumKvPages(int num_tokens, int page_size);
// Tokens of a sequence of `length` in its page page_index (≤ 0 beyond its last page).
int TokensInPage(int length, int page_size, int page_index);

// Whether a received page's header names it page `page_index` of cache layer `cache_layer`, written
// by request `request_id` in KV store epoch `epoch` under calibration `calibration_hash`: what a
// receiver checks before it uses a page it was pointed at (the layout and token count
// ImportKvPage checks).
bool IsPageOf(const KvPageHeader& header, uint64_t request_id, uint64_t epoch,
              uint64_t calibration_hash, int cache_layer, int page_index);

// Page page_index of cache layer cache_layer of a live sequence, encoded with the engine's layout
// for that cache layer, num_tokens = the sequence's tokens in that page, their positions
// (Engine::RowPositions; FailedPrecondition where the engine does not know them) and score biases.
// Reads what Engine::SequencePage holds: on an engine with a host mirror (the GPU engine), only
// pages of a Forward run with a CacheLayerObserver, once it was told of the layer, are current.
// NotFound for an unknown sequence, OutOfRange for a cache layer or page outside the sequence's.
absl::StatusOr<std::string> EncodeSequencePage(Engine& engine, int sequence, int cache_layer,
                                               int page_index, uint64_t request_id,
                                               uint64_t calibration_hash, uint64_t epoch = 0);

// Copies a decoded page into the sequence's page header.page_index of header.cache_layer: its score
// biases (Engine::SetRowScoreBiases: Unimplemented on an engine without token retention for
// nonzero ones), K, and V when write_v (a decode worker whose value tier already holds a KCache
// layer's V skips it; page.v may then be empty, as DecodeKvPageHead leaves it). Slots beyond
// num_tokens are copied too (zeros in a decoded page). NotFound for an unknown sequence;
// InvalidArgument naming the mismatch when the cache layer is not the engine's, the layout differs
// from the engine's plan for it, the page index is beyond the sequence's pages, num_tokens differs
// from the sequence's tokens in that page, a position is not before the sequence's next one
// (SequencePosition: call SetSequencePosition first for retained tokens) or the last page's last
// position is not right before it, or the section sizes are wrong.
absl::Status ImportKvPage(Engine& engine, int sequence, const KvPageView& page, bool write_v);

// A new sequence of `engine` whose cache is a copy of live sequence `sequence`'s — the same length,
// every page of every cache layer copied, K and V — so that it continues exactly as `sequence`
// would: many sequences of one long context for the cost of one prefill (pdserve bench --batch).
// Copies the pages only: decode-time state (KVCrush's accumulated eviction scores) starts afresh,
// so copy a sequence right after its prefill. NotFound for an unknown sequence; FailedPrecondition
// for a sequence SetSequencePosition moved (retained tokens' positions are not copied), an engine
// other than the CPU one (its pool is the cache itself, not a mirror) or one whose value tier
// comes from EngineOptions::value_tier_factory (it may be remote); ResourceExhausted when no
// sequence slot or not enough pages are free. On any error nothing stays taken.
absl::StatusOr<int> CopySequence(Engine& engine, int sequence);

// OK when CopySequence can copy `sequence` (given free room); else the error it would return for
// the sequence or the engine (NotFound or FailedPrecondition, as above). Changes nothing.
absl::Status CheckCopyable(const Engine& engine, int sequence);

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_KV_TRANSFER_H_
