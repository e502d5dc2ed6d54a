// SequenceTable: an engine's live sequences and the bookkeeping of one Forward over them, shared
// by the CPU and CUDA engines — sequence slots and their block tables in a PageAllocator,
// validation of a batch of chunks, page reservation with all-or-nothing rollback, and the segments
// that map batch rows to (sequence, position). Owns no KV memory. Not thread-safe (the engine's
// caller drives it).
#ifndef PDSERVE_CORE_ENGINE_SEQUENCE_TABLE_H_
#define PDSERVE_CORE_ENGINE_SEQUENCE_TABLE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine/engine.h"
#include "core/kv/page_allocator.h"
#include "kernels/attention_shape.h"

namespace pdserve {

// Rows [row, row + n) of a batch belong to `sequence`, at cache rows [start_pos, start_pos + n)
// (positions differ by the tokens retention dropped: SequenceTable::Position).
struct Segment {
  int sequence = -1;
  int row = 0;
  int n = 0;
  int start_pos = 0;
  bool all_logits = false;
  bool decode = false;  // a one-token chunk: a decode step (KCache selects for these)
  bool retain = false;  // ForwardChunk::retain
};

// The attention kernels' view of a segment's queries: its rows of `q` (q_stride floats apart) and
// of `out` (out_stride floats apart), its query count and start position; `kv` is the caller's.
kernels::AttentionSequence SegmentQueries(const Segment& segment, const float* q, int64_t q_stride,
                                          float* out, int64_t out_stride);

struct SequenceLimits {
  int max_sequences = 0;
  int max_context = 0;
  int max_batch_tokens = 0;
  int vocab_size = 0;
};

class SequenceTable {
 public:
  SequenceTable(PageAllocator& pool, const SequenceLimits& limits);

  // Starts an empty sequence; ResourceExhausted when every slot is live.
  absl::StatusOr<int> Add();
  // Starts a sequence already holding num_tokens tokens, their pages reserved. InvalidArgument
  // unless 1 ≤ num_tokens ≤ max_context; ResourceExhausted when no slot or pages are free (then
  // nothing is taken).
  absl::StatusOr<int> AddWithTokens(int num_tokens);
  // Frees the sequence and its pages; NotFound for an unknown id.
  absl::Status Remove(int sequence);
  // Tokens in the sequence's cache, or -1 for an unknown id.
  int Length(int sequence) const;
  // Length plus the tokens Truncate dropped: the next token's position; -1 for an unknown id.
  int Position(int sequence) const;
  // Token retention: the live sequence keeps only its first `tokens` rows (the caller moved the
  // kept ones there), frees the pages beyond them and counts the rest as dropped. Requires
  // 0 ≤ tokens ≤ Length(sequence).
  void Truncate(int sequence, int tokens);
  // Engine::SetSequencePosition: the next token of the sequence takes `position`.
  absl::Status SetPosition(int sequence, int position);
  // Requires Length(sequence) ≥ 0.
  const BlockTable& table(int sequence) const { return sequences_[sequence].table; }
  // The pool page holding page page_index of cache layer cache_layer (of num_cache_layers, which
  // share one page list) of a live sequence: Engine::SequencePage's lookup and errors (NotFound,
  // OutOfRange).
  absl::StatusOr<int32_t> PageId(int sequence, int cache_layer, int num_cache_layers,
                                 int page_index) const;

  // Checks a batch as Engine::Forward promises, reserves its pages (all or nothing), advances the
  // sequences' lengths and returns the batch's segments in chunk order; tokens[r] and
  // positions[r] receive row r's token and position (room for max_batch_tokens rows). Positions,
  // not lengths, are bounded by max_context. On error nothing changes.
  absl::StatusOr<std::span<Segment>> Begin(std::span<const ForwardChunk> chunks, int32_t* tokens,
                                           int32_t* positions);

  // Keeps only the rows of the current batch that need logits (a segment's last, or all when
  // all_logits), renumbered from 0 in order; kept_rows[r] receives the old row of new row r
  // (room for max_batch_tokens). Returns their count. Idempotent once compacted.
  int CompactToLogitRows(int32_t* kept_rows);
  std::span<const Segment> segments() const { return segments_; }

 private:
  struct Sequence {
    bool live = false;
    BlockTable table;
    int dropped = 0;  // tokens Truncate removed
  };
  absl::Status Validate(std::span<const ForwardChunk> chunks);
  absl::Status Reserve(std::span<const ForwardChunk> chunks);

  PageAllocator& pool_;
  SequenceLimits limits_;
  std::vector<Sequence> sequences_;
  std::vector<Segment> segments_;
  std::vector<char> seen_;            // per slot, while validating
  std::vector<size_t> pages_before_;  // per chunk, while reserving
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_SEQUENCE_TABLE_H_
