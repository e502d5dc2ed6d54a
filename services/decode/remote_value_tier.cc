#include "services/decode/remote_value_tier.h"

#include <array>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/kv/kv_page.h"

namespace pdserve {
namespace {

// Zero rows and unit scales for `head` of the mirror page `mirror`: what a failed fetch reads.
void Blank(const KvSectionLayout& l, int head, uint8_t* mirror) {
  std::memset(mirror + l.head_offset(head), 0,
              static_cast<size_t>(l.page_size()) * l.dim(head) * l.element_bytes());
  for (int i = 0; i < l.scales_per_head(); ++i) {
    const float one = 1.0f;
    std::memcpy(mirror + l.scale_offset(head) + 4 * i, &one, 4);
  }
}

}  // namespace

absl::Status RemotePageSource::failure() const {
  MutexLock lock(&mu_);
  return failure_;
}

void RemotePageSource::RecordFailure(const absl::Status& status) {
  MutexLock lock(&mu_);
  if (failure_.ok()) failure_ = status;
  failed_.store(true, std::memory_order_release);
}

absl::StatusOr<std::unique_ptr<RemoteValueTier>> RemoteValueTier::Create(
    int page_size, int num_pages, std::vector<KvSectionLayout> sections) {
  const int num_sections = static_cast<int>(sections.size());
  absl::StatusOr<std::unique_ptr<InProcessValueTier>> local =
      InProcessValueTier::Create(page_size, num_pages, std::move(sections));
  if (!local.ok()) return local.status();
  return std::unique_ptr<RemoteValueTier>(
      new RemoteValueTier(std::move(*local), num_sections, num_pages));
}

RemoteValueTier::RemoteValueTier(std::unique_ptr<InProcessValueTier> local, int num_sections,
                                 int num_pages)
    : local_(std::move(local)), remote_(num_sections, std::vector<Remote>(num_pages)) {}

uint8_t* RemoteValueTier::WritablePage(int section, int32_t page) {
  remote(section, page) = Remote{};
  return local_->WritablePage(section, page);
}

void RemoteValueTier::MapRemote(int section, int32_t page, std::shared_ptr<RemotePageSource> source,
                                uint64_t v_address, std::vector<uint64_t> head_checksums) {
  remote(section, page) = Remote{std::move(source), v_address, std::move(head_checksums)};
}

const uint8_t* RemoteValueTier::FetchHead(int section, int32_t page, int head) {
  const KvSectionLayout& l = layout(section);
  const int64_t row_bytes = int64_t{l.page_size()} * l.dim(head) * l.element_bytes();
  const int64_t scale_bytes = int64_t{l.scales_per_head()} * 4;
  bytes_fetched_.fetch_add(row_bytes + scale_bytes, std::memory_order_relaxed);
  uint8_t* mirror = local_->WritablePage(section, page);
  const Remote& r = remote(section, page);
  if (r.source == nullptr) return mirror;

  std::array<TransferOp, 2> ops;
  int n = 0;
  if (row_bytes > 0) {
    ops[n++] = TransferOp{mirror + l.head_offset(head), static_cast<size_t>(row_bytes),
                          r.v_address + static_cast<uint64_t>(l.head_offset(head))};
  }
  if (scale_bytes > 0) {
    ops[n++] = TransferOp{mirror + l.scale_offset(head), static_cast<size_t>(scale_bytes),
                          r.v_address + static_cast<uint64_t>(l.scale_offset(head))};
  }
  if (n == 0) return mirror;
  if (r.source->failed()) {
    Blank(l, head, mirror);
    return mirror;
  }
  absl::Status status = r.source->endpoint().GetBatch(r.source->rkey(), {ops.data(), size_t(n)});
  if (status.ok()) remote_bytes_.fetch_add(row_bytes + scale_bytes, std::memory_order_relaxed);
  if (status.ok() && KvHeadChecksum(l, head, mirror) != r.head_checksums[head]) {
    status =
        absl::DataLossError(absl::StrCat("V head ", head, " of value page ", page, " (section ",
                                         section, ") does not match its page's checksum"));
  }
  if (!status.ok()) {
    r.source->RecordFailure(status);
    Blank(l, head, mirror);
  }
  return mirror;
}

}  // namespace pdserve
