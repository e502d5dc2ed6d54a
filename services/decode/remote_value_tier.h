// RemoteValueTier: the decode worker's ValueTier (core/kv/value_tier.h) for KCache layers. The V
// pages of a prompt stay in the KV store; a decode step fetches, with one-sided UCX gets, only the
// heads of the pages KCache selected (DESIGN §2 step 4). Pages written in this process — generated
// tokens' V, and a prompt's last, partly filled page, which decode keeps appending to — live in a
// local mirror laid out like the in-process tier.
//
// A page id is remote from MapRemote until the next WritablePage of that id (the engine calls
// WritablePage when it reuses the page for new tokens). Fetches of distinct (section, page, head)
// may run concurrently; MapRemote runs between Forward calls on the engine's thread.
//
// Every fetched head is verified against the checksum its page's header recorded for it
// (KvHeadChecksum, core/kv/kv_page.h): bytes that changed in the store since the page was pulled —
// torn, tampered, or a freed slot's next owner — never reach attention. A failed or refused fetch
// cannot return an error through FetchHead: the head reads as zeros (unit scales) and the page's
// source records the failure (DataLoss for a checksum mismatch, the transport's error otherwise),
// which the decode worker checks after each step (source->failed()).
#ifndef PDSERVE_SERVICES_DECODE_REMOTE_VALUE_TIER_H_
#define PDSERVE_SERVICES_DECODE_REMOTE_VALUE_TIER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "core/kv/value_tier.h"
#include "core/transport/transport.h"

namespace pdserve {

// Where remote pages are read from: an endpoint to a KV store and the key of its pool.
class RemotePageSource {
 public:
  RemotePageSource(std::shared_ptr<Endpoint> endpoint, std::string packed_rkey)
      : endpoint_(std::move(endpoint)), rkey_(std::move(packed_rkey)) {}

  Endpoint& endpoint() const { return *endpoint_; }
  const std::string& rkey() const { return rkey_; }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  absl::Status failure() const;
  void RecordFailure(const absl::Status& status);

 private:
  std::shared_ptr<Endpoint> endpoint_;
  std::string rkey_;
  std::atomic<bool> failed_{false};
  mutable Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

class RemoteValueTier final : public ValueTier {
 public:
  static absl::StatusOr<std::unique_ptr<RemoteValueTier>> Create(
      int page_size, int num_pages, std::vector<KvSectionLayout> sections);

  const KvSectionLayout& layout(int section) const override { return local_->layout(section); }
  // Local bytes; the page stops being remote.
  uint8_t* WritablePage(int section, int32_t page) override;
  // Remote pages: gets the head's rows and scales into the mirror first (counted as remote).
  const uint8_t* FetchHead(int section, int32_t page, int head) override;
  int64_t bytes_fetched() const override { return bytes_fetched_.load(); }
  // The part of bytes_fetched() that crossed the transport.
  int64_t remote_bytes_fetched() const { return remote_bytes_.load(); }

  // Page `page` of `section` is the V section whose first byte is at `v_address` in the source;
  // `head_checksums` (one per head of the section: the page header's v_head_checksums) are what
  // each fetched head must match.
  void MapRemote(int section, int32_t page, std::shared_ptr<RemotePageSource> source,
                 uint64_t v_address, std::vector<uint64_t> head_checksums);

 private:
  struct Remote {
    std::shared_ptr<RemotePageSource> source;  // null: local
    uint64_t v_address = 0;
    std::vector<uint64_t> head_checksums;
  };
  RemoteValueTier(std::unique_ptr<InProcessValueTier> local, int num_sections, int num_pages);
  Remote& remote(int section, int32_t page) { return remote_[section][page]; }

  std::unique_ptr<InProcessValueTier> local_;
  std::vector<std::vector<Remote>> remote_;  // [section][page]
  std::atomic<int64_t> bytes_fetched_{0};
  std::atomic<int64_t> remote_bytes_{0};
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_DECODE_REMOTE_VALUE_TIER_H_
