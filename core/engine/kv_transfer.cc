#include "core/engine/kv_transfer.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace pdserve {

int TokensInPage(int length, int page_size, int page_index) {
  return std::min(page_size, length - page_index * page_size);
}

int NumKvPages(int num_tokens, int page_size) {
  if (num_tokens <= 0) return 0;
  return static_cast<int>((int64_t{num_tokens} + page_size - 1) / page_size);
}

bool IsPageOf(const KvPageHeader& header, uint64_t request_id, uint64_t epoch,
              uint64_t calibration_hash, int cache_layer, int page_index) {
  return header.request_id == request_id && header.epoch == epoch &&
         header.calibration_hash == calibration_hash && header.cache_layer == cache_layer &&
         header.page_index == page_index;
}

absl::StatusOr<std::string> EncodeSequencePage(Engine& engine, int sequence, int cache_layer,
                                               int page_index, uint64_t request_id,
                                               uint64_t calibration_hash, uint64_t epoch) {
  PDSERVE_ASSIGN_OR_RETURN(const KvPageSlots slots,
                           engine.SequencePage(sequence, cache_layer, page_index));
  const int page_size = engine.options().kv_page_size;
  const int num_tokens = TokensInPage(engine.SequenceLength(sequence), page_size, page_index);
  if (num_tokens < 1) {
    return absl::OutOfRangeError(absl::StrCat("kv transfer: page ", page_index, " of sequence ",
                                              sequence, " holds no tokens"));
  }
  KvPageHeader header;
  header.calibration_hash = calibration_hash;
  header.request_id = request_id;
  header.epoch = epoch;
  header.cache_layer = cache_layer;
  header.page_index = page_index;
  header.num_tokens = num_tokens;
  header.layout = engine.plan().caches[cache_layer].layout;
  PDSERVE_ASSIGN_OR_RETURN(
      header.positions,
      engine.RowPositions(sequence, cache_layer, page_index * page_size, num_tokens));
  PDSERVE_ASSIGN_OR_RETURN(
      header.score_biases,
      engine.RowScoreBiases(sequence, cache_layer, page_index * page_size, num_tokens));
  return EncodeKvPage(header, {slots.k, static_cast<size_t>(header.layout.k.bytes())},
                      {slots.v, static_cast<size_t>(header.layout.v.bytes())});
}

absl::Status ImportKvPage(Engine& engine, int sequence, const KvPageView& page, bool write_v) {
  const KvPageHeader& h = page.header;
  const int length = engine.SequenceLength(sequence);
  if (length < 0) {
    return absl::NotFoundError(absl::StrCat("kv transfer: no live sequence ", sequence));
  }
  const std::string context =
      absl::StrCat("kv transfer: page ", h.page_index, " of cache layer ", h.cache_layer,
                   " (request ", h.request_id, ") into sequence ", sequence, ": ");
  const std::vector<CachePlan>& caches = engine.plan().caches;
  if (h.cache_layer < 0 || h.cache_layer >= static_cast<int>(caches.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, "the engine has cache layers [0, ", caches.size(), ")"));
  }
  const KvLayerLayout& layout = caches[h.cache_layer].layout;
  if (!(h.layout == layout)) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, "the page's layout (K ", KvElementName(h.layout.k.element()), " ",
        h.layout.k.n_heads(), " heads, ", h.layout.k.bytes(), " bytes; V ",
        KvElementName(h.layout.v.element()), " ", h.layout.v.bytes(), " bytes; page size ",
        h.layout.k.page_size(), ") differs from the engine's (K ",
        KvElementName(layout.k.element()), " ", layout.k.n_heads(), " heads, ", layout.k.bytes(),
        " bytes; V ", KvElementName(layout.v.element()), " ", layout.v.bytes(),
        " bytes; page size ", layout.k.page_size(), ")"));
  }
  const int page_size = layout.k.page_size();
  const int pages = NumKvPages(length, page_size);
  if (h.page_index < 0 || h.page_index >= pages) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, "the sequence of ", length, " tokens has pages [0, ", pages, ")"));
  }
  const int expected = TokensInPage(length, page_size, h.page_index);
  if (h.num_tokens != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, "the page holds ", h.num_tokens, " tokens; the sequence's page holds ", expected));
  }
  // Positions: before the sequence's next one, the last token's right before it (retention always
  // keeps it). Pages of a sequence moved by SetSequencePosition must come after that call.
  const int next = engine.SequencePosition(sequence);
  const bool last_page = h.page_index == pages - 1;
  const int64_t last = h.positions.empty() ? int64_t{h.page_index} * page_size + h.num_tokens - 1
                                           : h.positions.back();
  if (last >= next || (last_page && last != next - 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, "its last token is at position ", last, "; the sequence's ",
        last_page ? "last token is at " : "tokens are before ", next - (last_page ? 1 : 0)));
  }
  if (static_cast<int64_t>(page.k.size()) != layout.k.bytes() ||
      (write_v && static_cast<int64_t>(page.v.size()) != layout.v.bytes())) {
    return absl::InvalidArgumentError(absl::StrCat(context, "sections of ", page.k.size(), " and ",
                                                   page.v.size(), " bytes; the layout needs ",
                                                   layout.k.bytes(), " and ", layout.v.bytes()));
  }
  PDSERVE_ASSIGN_OR_RETURN(const KvPageSlots slots,
                           engine.SequencePage(sequence, h.cache_layer, h.page_index));
  if (!h.score_biases.empty()) {
    absl::Status status =
        engine.SetRowScoreBiases(sequence, h.cache_layer, h.page_index * page_size, h.score_biases);
    if (!status.ok()) return absl::Status(status.code(), absl::StrCat(context, status.message()));
  }
  std::memcpy(slots.k, page.k.data(), page.k.size());
  if (write_v) std::memcpy(slots.v, page.v.data(), page.v.size());
  return absl::OkStatus();
}

absl::Status CheckCopyable(const Engine& engine, int sequence) {
  const int length = engine.SequenceLength(sequence);
  if (length < 0) {
    return absl::NotFoundError(absl::StrCat("kv copy: no live sequence ", sequence));
  }
  if (engine.options().device != Device::kCpu) {
    return absl::FailedPreconditionError(
        absl::StrCat("kv copy: needs the CPU engine, not ", DeviceName(engine.options().device)));
  }
  if (engine.options().value_tier_factory) {
    return absl::FailedPreconditionError(
        "kv copy: the value tier comes from a factory (it may be remote); copies need it "
        "in-process");
  }
  if (engine.SequencePosition(sequence) != length) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kv copy: sequence ", sequence, " kept ", length, " of its tokens (retention moved it)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> CopySequence(Engine& engine, int sequence) {
  PDSERVE_RETURN_IF_ERROR(CheckCopyable(engine, sequence));
  const int length = engine.SequenceLength(sequence);
  if (length == 0) return engine.AddSequence();
  PDSERVE_ASSIGN_OR_RETURN(const int copy, engine.AddSequenceWithTokens(length));
  auto copy_page = [&](int cache_layer, int page_index) -> absl::Status {
    PDSERVE_ASSIGN_OR_RETURN(const KvPageSlots from,
                             engine.SequencePage(sequence, cache_layer, page_index));
    PDSERVE_ASSIGN_OR_RETURN(const KvPageSlots to,
                             engine.SequencePage(copy, cache_layer, page_index));
    const KvLayerLayout& layout = engine.plan().caches[cache_layer].layout;
    std::memcpy(to.k, from.k, layout.k.bytes());
    std::memcpy(to.v, from.v, layout.v.bytes());
    return absl::OkStatus();
  };
  const int pages = NumKvPages(length, engine.options().kv_page_size);
  for (int c = 0; c < static_cast<int>(engine.plan().caches.size()); ++c) {
    for (int p = 0; p < pages; ++p) {
      if (absl::Status status = copy_page(c, p); !status.ok()) {
        (void)engine.RemoveSequence(copy);
        return status;
      }
    }
  }
  return copy;
}

}  // namespace pdserve
