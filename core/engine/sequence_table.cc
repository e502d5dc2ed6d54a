#include "core/engine/sequence_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace pdserve {

kernels::AttentionSequence SegmentQueries(const Segment& segment, const float* q, int64_t q_stride,
                                          float* out, int64_t out_stride) {
  kernels::AttentionSequence seq;
  seq.q = q + int64_t{segment.row} * q_stride;
  seq.q_row_stride = q_stride;
  seq.out = out + int64_t{segment.row} * out_stride;
  seq.out_row_stride = out_stride;
  seq.n_queries = segment.n;
  seq.start_pos = segment.start_pos;
  return seq;
}

SequenceTable::SequenceTable(PageAllocator& pool, const SequenceLimits& limits)
    : pool_(pool),
      limits_(limits),
      sequences_(limits.max_sequences),
      seen_(limits.max_sequences),
      pages_before_(limits.max_sequences) {
  segments_.reserve(limits.max_sequences);
}

absl::StatusOr<int> SequenceTable::Add() {
  for (size_t i = 0; i < sequences_.size(); ++i) {
    if (!sequences_[i].live) {
      sequences_[i].live = true;
      return static_cast<int>(i);
    }
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("engine: all ", sequences_.size(), " sequence slots are in use"));
}

absl::StatusOr<int> SequenceTable::AddWithTokens(int num_tokens) {
  if (num_tokens < 1 || num_tokens > limits_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("engine: a sequence of ", num_tokens,
                                                   " tokens; must be in [1, ", limits_.max_context,
                                                   "]"));
  }
  PDSERVE_ASSIGN_OR_RETURN(const int sequence, Add());
  BlockTable& table = sequences_[sequence].table;
  if (absl::Status status = table.Reserve(pool_, num_tokens); !status.ok()) {
    sequences_[sequence].live = false;  // Reserve kept the table empty
    return status;
  }
  table.set_num_tokens(num_tokens);
  return sequence;
}

absl::Status SequenceTable::Remove(int sequence) {
  if (Length(sequence) < 0) {
    return absl::NotFoundError(absl::StrCat("engine: no live sequence ", sequence));
  }
  sequences_[sequence].table.Release(pool_);
  sequences_[sequence].live = false;
  sequences_[sequence].dropped = 0;
  return absl::OkStatus();
}

absl::StatusOr<int32_t> SequenceTable::PageId(int sequence, int cache_layer, int num_cache_layers,
                                              int page_index) const {
  if (Length(sequence) < 0) {
    return absl::NotFoundError(absl::StrCat("engine: no live sequence ", sequence));
  }
  const std::vector<int32_t>& pages = table(sequence).pages();
  if (cache_layer < 0 || cache_layer >= num_cache_layers || page_index < 0 ||
      page_index >= static_cast<int>(pages.size())) {
    return absl::OutOfRangeError(
        absl::StrCat("engine: sequence ", sequence, " has cache layers [0, ", num_cache_layers,
                     ") and pages [0, ", pages.size(), "); asked for cache layer ", cache_layer,
                     " page ", page_index));
  }
  return pages[page_index];
}

int SequenceTable::Length(int sequence) const {
  if (sequence < 0 || sequence >= static_cast<int>(sequences_.size()) ||
      !sequences_[sequence].live) {
    return -1;
  }
  return sequences_[sequence].table.num_tokens();
}

int SequenceTable::Position(int sequence) const {
  const int length = Length(sequence);
  return length < 0 ? -1 : length + sequences_[sequence].dropped;
}

void SequenceTable::Truncate(int sequence, int tokens) {
  Sequence& s = sequences_[sequence];
  s.dropped += s.table.num_tokens() - tokens;
  s.table.set_num_tokens(tokens);
  s.table.ShrinkTo(pool_, (tokens + pool_.page_size() - 1) / pool_.page_size());
}

absl::Status SequenceTable::SetPosition(int sequence, int position) {
  const int length = Length(sequence);
  if (length < 0) return absl::NotFoundError(absl::StrCat("engine: no live sequence ", sequence));
  if (position < length || position > limits_.max_context) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine: position ", position, " for a sequence of ", length,
                     " tokens; must be in [", length, ", ", limits_.max_context, "]"));
  }
  sequences_[sequence].dropped = position - length;
  return absl::OkStatus();
}

absl::Status SequenceTable::Validate(std::span<const ForwardChunk> chunks) {
  if (chunks.empty()) return absl::InvalidArgumentError("engine: no chunks to run");
  if (chunks.size() > sequences_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine: ", chunks.size(), " chunks in one batch; at most one per sequence (",
                     sequences_.size(), ")"));
  }
  int64_t total = 0;
  std::fill(seen_.begin(), seen_.end(), 0);
  for (const ForwardChunk& chunk : chunks) {
    const int length = Position(chunk.sequence);
    if (length < 0) {
      return absl::InvalidArgumentError(absl::StrCat("engine: unknown sequence ", chunk.sequence));
    }
    if (seen_[chunk.sequence]) {
      return absl::InvalidArgumentError(
          absl::StrCat("engine: sequence ", chunk.sequence, " appears twice in one batch"));
    }
    seen_[chunk.sequence] = 1;
    if (chunk.tokens.empty()) return absl::InvalidArgumentError("engine: empty chunk");
    if (length + static_cast<int64_t>(chunk.tokens.size()) > limits_.max_context) {
      return absl::InvalidArgumentError(absl::StrCat(
          "engine: sequence ", chunk.sequence, " would hold ", length + chunk.tokens.size(),
          " tokens; the context limit is ", limits_.max_context));
    }
    for (int32_t token : chunk.tokens) {
      if (token < 0 || token >= limits_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine: token id ", token, " outside the vocabulary [0, ", limits_.vocab_size, ")"));
      }
    }
    total += static_cast<int64_t>(chunk.tokens.size());
  }
  if (total > limits_.max_batch_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine: ", total, " tokens in one batch; the limit is ", limits_.max_batch_tokens));
  }
  return absl::OkStatus();
}

absl::Status SequenceTable::Reserve(std::span<const ForwardChunk> chunks) {
  for (size_t i = 0; i < chunks.size(); ++i) {
    BlockTable& table = sequences_[chunks[i].sequence].table;
    pages_before_[i] = table.pages().size();
    absl::Status status =
        table.Reserve(pool_, table.num_tokens() + static_cast<int>(chunks[i].tokens.size()));
    if (!status.ok()) {
      for (size_t j = 0; j < i; ++j) {  // give back what earlier chunks took: nothing changes
        sequences_[chunks[j].sequence].table.ShrinkTo(pool_, pages_before_[j]);
      }
      return status;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::span<Segment>> SequenceTable::Begin(std::span<const ForwardChunk> chunks,
                                                        int32_t* tokens, int32_t* positions) {
  PDSERVE_RETURN_IF_ERROR(Validate(chunks));
  PDSERVE_RETURN_IF_ERROR(Reserve(chunks));
  int n = 0;
  segments_.clear();
  for (const ForwardChunk& chunk : chunks) {
    BlockTable& table = sequences_[chunk.sequence].table;
    const int start = table.num_tokens(), dropped = sequences_[chunk.sequence].dropped;
    const int count = static_cast<int>(chunk.tokens.size());
    segments_.push_back(
        {chunk.sequence, n, count, start, chunk.all_logits, count == 1, chunk.retain});
    for (int i = 0; i < count; ++i, ++n) {
      tokens[n] = chunk.tokens[i];
      positions[n] = start + dropped + i;
    }
    table.set_num_tokens(start + count);
  }
  return std::span<Segment>(segments_);
}

int SequenceTable::CompactToLogitRows(int32_t* kept_rows) {
  int rows = 0;
  for (Segment& segment : segments_) {
    const int keep = segment.all_logits ? segment.n : 1;
    const int first = segment.row + segment.n - keep;
    for (int i = 0; i < keep; ++i) kept_rows[rows + i] = first + i;
    segment.start_pos += segment.n - keep;
    segment.row = rows;
    segment.n = keep;
    rows += keep;
  }
  return rows;
}

}  // namespace pdserve
