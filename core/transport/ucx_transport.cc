#include "core/transport/ucx_transport.h"

#include <poll.h>

#include "core/base/mutex.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/hash.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"

namespace pdserve {
namespace {

constexpr char kAddressMagic[] = "PDUCX1";  // + host + '\0' + ucp worker address
constexpr char kRkeyMagic[] = "PDRK";       // + RkeyHeader + ucx packed rkey

// Our envelope around UCX's packed rkey: UCX's unpack takes no length and trusts its input, so
// the bounds, access and a checksum travel with it and are checked before UCX sees the bytes.
struct RkeyHeader {
  uint64_t base;
  uint64_t size;
  uint64_t checksum;  // Fnv1a64 of base, size, access and the ucx bytes
  uint32_t access;    // RemoteAccess
  uint32_t ucx_size;
};
constexpr size_t kRkeyPrefix = sizeof(kRkeyMagic) - 1 + sizeof(RkeyHeader);

std::shared_ptr<spdlog::logger> Log() { return GetLogger("transport"); }

// memcpy for the direct shared-memory path. glibc's memcpy uses `rep movsb` for these sizes, which
// on some CPUs (measured: AMD EPYC with FSRM) runs ~30x slower when the destination lies just
// past the source modulo 4 KiB (e.g. a page-aligned slot copied into a malloc'd buffer at
// page + 16); that case is copied with a plain vector loop instead.
void CopyBytes(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__AVX2__)
  const uintptr_t distance =
      (reinterpret_cast<uintptr_t>(dst) - reinterpret_cast<uintptr_t>(src)) & 4095;
  if (n >= 256 && distance != 0 && distance < 64) {
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
      __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
      __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
      __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), a);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
    }
    std::memcpy(dst + i, src + i, n - i);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

std::string UcsError(ucs_status_t status) { return ucs_status_string(status); }

uint64_t RkeyChecksum(const RkeyHeader& h, const char* ucx_bytes) {
  uint64_t hash = Fnv1a64({reinterpret_cast<const uint8_t*>(&h.base), 16});
  hash = Fnv1a64({reinterpret_cast<const uint8_t*>(&h.access), 8}, hash);
  return Fnv1a64({reinterpret_cast<const uint8_t*>(ucx_bytes), h.ucx_size}, hash);
}

absl::StatusOr<RkeyHeader> ParseRkey(const std::string& packed) {
  if (packed.size() < kRkeyPrefix || packed.compare(0, 4, kRkeyMagic) != 0) {
    return absl::InvalidArgumentError("malformed packed rkey (bad magic or too short)");
  }
  RkeyHeader h;
  std::memcpy(&h, packed.data() + 4, sizeof(h));
  if (packed.size() != kRkeyPrefix + h.ucx_size || h.access > 1 ||
      RkeyChecksum(h, packed.data() + kRkeyPrefix) != h.checksum) {
    return absl::InvalidArgumentError("malformed packed rkey (size or checksum mismatch)");
  }
  return h;
}

class UcxMemoryRegion final : public MemoryRegion {
 public:
  UcxMemoryRegion(ucp_context_h context, ucp_mem_h memh, uint8_t* data, size_t size,
                  std::string packed_rkey)
      : context_(context),
        memh_(memh),
        data_(data),
        size_(size),
        packed_rkey_(std::move(packed_rkey)) {}
  // Deregisters (Register) or frees (Allocate: UCX owns the memory) the region.
  ~UcxMemoryRegion() override { ucp_mem_unmap(context_, memh_); }
  uint64_t address() const override { return reinterpret_cast<uint64_t>(data_); }
  size_t size() const override { return size_; }
  uint8_t* data() const override { return data_; }
  const std::string& packed_rkey() const override { return packed_rkey_; }

 private:
  ucp_context_h context_;
  ucp_mem_h memh_;
  uint8_t* data_;
  size_t size_;
  std::string packed_rkey_;
};

// Packs the rkey of `memh` (covering [data, data + size)) into our envelope and wraps it in a
// region; unmaps `memh` on failure.
absl::StatusOr<std::unique_ptr<MemoryRegion>> MakeRegion(ucp_context_h context, ucp_mem_h memh,
                                                         uint8_t* data, size_t size,
                                                         RemoteAccess access) {
  void* rkey_buffer = nullptr;
  size_t rkey_size = 0;
  ucs_status_t status = ucp_rkey_pack(context, memh, &rkey_buffer, &rkey_size);
  if (status != UCS_OK) {
    ucp_mem_unmap(context, memh);
    return absl::InternalError("ucp_rkey_pack: " + UcsError(status));
  }
  RkeyHeader header{reinterpret_cast<uint64_t>(data), size, 0, static_cast<uint32_t>(access),
                    static_cast<uint32_t>(rkey_size)};
  header.checksum = RkeyChecksum(header, static_cast<const char*>(rkey_buffer));
  std::string packed(kRkeyMagic);
  packed.append(reinterpret_cast<const char*>(&header), sizeof(header));
  packed.append(static_cast<const char*>(rkey_buffer), rkey_size);
  ucp_rkey_buffer_release(rkey_buffer);
  return std::unique_ptr<MemoryRegion>(
      new UcxMemoryRegion(context, memh, data, size, std::move(packed)));
}

unsigned Prot(RemoteAccess access) {
  unsigned prot =
      UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE | UCP_MEM_MAP_PROT_REMOTE_READ;
  if (access == RemoteAccess::kReadWrite) prot |= UCP_MEM_MAP_PROT_REMOTE_WRITE;
  return prot;
}

// Progresses `worker` until every request in `requests` completed or `deadline` passed; frees
// the completed ones (removing them) and returns the first failure among them.
ucs_status_t WaitRequests(UcxTransport* transport, std::vector<void*>& requests,
                          absl::Time deadline, const std::atomic<int>* ep_error) {
  if (requests.empty()) return UCS_OK;
  ucp_worker_h worker = transport->worker();
  // While a caller progresses the worker itself, the progress thread stands back.
  std::atomic<int>& waiters = transport->waiters();
  waiters.fetch_add(1);
  struct Leave {
    std::atomic<int>& waiters;
    ~Leave() { waiters.fetch_sub(1); }
  } leave{waiters};
  ucs_status_t first_error = UCS_OK;
  int idle = 0;
  while (!requests.empty()) {
    if (ucp_worker_progress(worker) == 0) {
      if (++idle > 256) {
        idle = 0;
        if (absl::Now() > deadline) return first_error != UCS_OK ? first_error : UCS_ERR_TIMED_OUT;
        if (ep_error != nullptr && ep_error->load() != UCS_OK) {
          return static_cast<ucs_status_t>(ep_error->load());
        }
        std::this_thread::yield();
      }
    }
    auto it = std::remove_if(requests.begin(), requests.end(), [&](void* request) {
      ucs_status_t status = ucp_request_check_status(request);
      if (status == UCS_INPROGRESS) return false;
      if (status != UCS_OK && first_error == UCS_OK) first_error = status;
      ucp_request_free(request);
      return true;
    });
    requests.erase(it, requests.end());
  }
  return first_error;
}

class UcxEndpoint final : public Endpoint {
 public:
  UcxEndpoint(UcxTransport* transport, std::string peer)
      : transport_(transport), peer_(std::move(peer)) {}
  ~UcxEndpoint() override;

  // Creates the ucp endpoint and completes wireup (a flush) within the transport's timeout.
  absl::Status Open(const ucp_address_t* address);
  void set_lanes(std::vector<UcxLane> lanes) { lanes_ = std::move(lanes); }
  // Set when this same-host endpoint's RMA lanes are tcp: a region the endpoint cannot map
  // directly then really travels over tcp, which Rkey reports loudly, once per region.
  void set_fallback_message(std::string message) { fallback_message_ = std::move(message); }
  const std::vector<UcxLane>& lanes() const { return lanes_; }

  absl::Status PutBatch(const std::string& packed_rkey, std::span<const TransferOp> ops) override {
    return RunBatch(/*put=*/true, packed_rkey, ops);
  }
  absl::Status GetBatch(const std::string& packed_rkey, std::span<const TransferOp> ops) override {
    return RunBatch(/*put=*/false, packed_rkey, ops);
  }
  std::vector<std::string> transports_in_use() const override {
    std::vector<std::string> names;
    for (const UcxLane& lane : lanes_) {
      if (std::find(names.begin(), names.end(), lane.transport) == names.end()) {
        names.push_back(lane.transport);
      }
    }
    return names;
  }
  ucp_ep_h ep() const {
    MutexLock lock(&mu_);
    return ep_;
  }

 private:
  static void OnError(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* self = static_cast<UcxEndpoint*>(arg);
    int expected = UCS_OK;
    self->error_.compare_exchange_strong(expected, status);
  }
  absl::Status RunBatch(bool put, const std::string& packed_rkey, std::span<const TransferOp> ops);
  struct RemoteKey {
    ucp_rkey_h rkey = nullptr;
    // This process's mapping of the region's byte 0 when UCX can give one (ucp_rkey_ptr: a
    // same-host peer's UCX-allocated shared memory) and direct_shared_memory is on; else null.
    uint8_t* direct = nullptr;
    RkeyHeader header{};  // as parsed (and checked) when the key was first used
  };
  absl::StatusOr<RemoteKey> Rkey(const std::string& packed_rkey, const RkeyHeader& header)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Close(bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Failure(const char* what, ucs_status_t status);

  UcxTransport* transport_;
  std::string peer_;
  std::vector<UcxLane> lanes_;
  std::string fallback_message_;
  std::atomic<int> error_{UCS_OK};  // set by the ucp error handler
  mutable Mutex mu_;
  ucp_ep_h ep_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_map<std::string, RemoteKey> rkeys_ ABSL_GUARDED_BY(mu_);
};

UcxEndpoint::~UcxEndpoint() {
  MutexLock lock(&mu_);
  Close(/*force=*/error_.load() != UCS_OK);
}

void UcxEndpoint::Close(bool force) {
  for (auto& [key, rkey] : rkeys_) ucp_rkey_destroy(rkey.rkey);
  rkeys_.clear();
  if (ep_ == nullptr) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  void* request = ucp_ep_close_nbx(ep_, &param);
  if (UCS_PTR_IS_PTR(request)) {
    std::vector<void*> requests = {request};
    absl::Duration bound = std::min(transport_->options().timeout, absl::Seconds(2));
    if (WaitRequests(transport_, requests, absl::Now() + bound, nullptr) == UCS_ERR_TIMED_OUT &&
        !force) {
      // The peer did not answer the graceful close: release the request, then force.
      for (void* r : requests) ucp_request_free(r);
      requests.clear();
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      request = ucp_ep_close_nbx(ep_, &param);
      if (UCS_PTR_IS_PTR(request)) {
        requests.push_back(request);
        WaitRequests(transport_, requests, absl::Now() + bound, nullptr);
      }
    }
    for (void* r : requests) ucp_request_free(r);  // released by UCX once complete
  }
  ep_ = nullptr;
}

absl::Status UcxEndpoint::Failure(const char* what, ucs_status_t status) {
  std::string message = absl::StrCat("ucx ", what, " to peer ", peer_, ": ", UcsError(status));
  if (status == UCS_ERR_TIMED_OUT) {
    return absl::DeadlineExceededError(
        absl::StrCat(message, " (no completion within ",
                     absl::FormatDuration(transport_->options().timeout), "; endpoint closed)"));
  }
  return absl::UnavailableError(message);
}

absl::Status UcxEndpoint::Open(const ucp_address_t* address) {
  MutexLock lock(&mu_);
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = address;
  params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  if (transport_->options().peer_failure_detection) {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &UcxEndpoint::OnError;
    params.err_handler.arg = this;
  }
  ucs_status_t status = ucp_ep_create(transport_->worker(), &params, &ep_);
  if (status != UCS_OK) {
    ep_ = nullptr;
    return Failure("ep_create", status);
  }
  ucp_request_param_t param{};
  void* flush = ucp_ep_flush_nbx(ep_, &param);
  if (UCS_PTR_IS_ERR(flush)) status = UCS_PTR_STATUS(flush);
  if (UCS_PTR_IS_PTR(flush)) {
    std::vector<void*> requests = {flush};
    status =
        WaitRequests(transport_, requests, absl::Now() + transport_->options().timeout, &error_);
    for (void* r : requests) ucp_request_free(r);
  }
  if (status == UCS_OK && error_.load() != UCS_OK) status = ucs_status_t(error_.load());
  if (status != UCS_OK) {
    Close(/*force=*/true);
    return Failure("connect", status);
  }
  return absl::OkStatus();
}

absl::StatusOr<UcxEndpoint::RemoteKey> UcxEndpoint::Rkey(const std::string& packed_rkey,
                                                         const RkeyHeader& header) {
  auto it = rkeys_.find(packed_rkey);
  if (it != rkeys_.end()) return it->second;
  RemoteKey key;
  key.header = header;
  ucs_status_t status = ucp_ep_rkey_unpack(ep_, packed_rkey.data() + kRkeyPrefix, &key.rkey);
  if (status != UCS_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("ucx rkey_unpack for peer ", peer_, ": ", UcsError(status)));
  }
  if (transport_->options().direct_shared_memory && header.size > 0) {
    // Direct access only when the whole region is one contiguous mapping here.
    void* first = nullptr;
    void* last = nullptr;
    if (ucp_rkey_ptr(key.rkey, header.base, &first) == UCS_OK &&
        ucp_rkey_ptr(key.rkey, header.base + header.size - 1, &last) == UCS_OK &&
        static_cast<uint8_t*>(last) - static_cast<uint8_t*>(first) ==
            static_cast<ptrdiff_t>(header.size - 1)) {
      key.direct = static_cast<uint8_t*>(first);
    }
  }
  Log()->debug("rkey of peer {} region [{}, +{}): {}", peer_, header.base, header.size,
               key.direct != nullptr ? "mapped here, direct memcpy" : "ucp put/get");
  if (key.direct == nullptr && !fallback_message_.empty()) {
    Log()->warn(
        "UCX SHARED-MEMORY FALLBACK: region [{}, +{}) of peer {} is not in shared memory "
        "mapped here, so its transfers go over tcp: {}",
        header.base, header.size, peer_, fallback_message_);
  }
  rkeys_.emplace(packed_rkey, key);
  return key;
}

absl::Status UcxEndpoint::RunBatch(bool put, const std::string& packed_rkey,
                                   std::span<const TransferOp> ops) {
  const char* what = put ? "put" : "get";
  MutexLock lock(&mu_);
  // A key seen before was checked then: skip re-parsing (and re-hashing) it on every batch.
  auto cached = rkeys_.find(packed_rkey);
  RkeyHeader header;
  if (cached != rkeys_.end()) {
    header = cached->second.header;
  } else {
    PDSERVE_ASSIGN_OR_RETURN(header, ParseRkey(packed_rkey));
  }
  if (put && header.access != static_cast<uint32_t>(RemoteAccess::kReadWrite)) {
    return absl::PermissionDeniedError(
        absl::StrCat("ucx put to peer ", peer_, ": the region is registered read-only"));
  }
  for (const TransferOp& op : ops) {
    if (op.length == 0) continue;
    if (op.local == nullptr || op.remote_address < header.base || op.length > header.size ||
        op.remote_address - header.base > header.size - op.length) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ucx ", what, " to peer ", peer_, ": op [", op.remote_address, ", +", op.length,
          ") is outside the region [", header.base, ", +", header.size, ") or has no buffer"));
    }
  }
  if (ep_ == nullptr || error_.load() != UCS_OK) {
    return absl::UnavailableError(absl::StrCat(
        "ucx ", what, " to peer ", peer_, ": endpoint failed or closed",
        error_.load() != UCS_OK ? absl::StrCat(" (", UcsError(ucs_status_t(error_.load())), ")")
                                : ""));
  }
  RemoteKey key;
  if (cached != rkeys_.end()) {
    key = cached->second;
  } else {
    PDSERVE_ASSIGN_OR_RETURN(key, Rkey(packed_rkey, header));
  }
  if (key.direct != nullptr) {
    // The peer's memory is mapped here (shared memory): the transfer is a memcpy, complete and
    // visible to the peer when it returns, as ucx_perftest's UCX-allocated buffers get it.
    for (const TransferOp& op : ops) {
      if (op.length == 0) continue;
      uint8_t* remote = key.direct + (op.remote_address - header.base);
      if (put) {
        CopyBytes(remote, static_cast<const uint8_t*>(op.local), op.length);
      } else {
        CopyBytes(static_cast<uint8_t*>(op.local), remote, op.length);
      }
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return absl::OkStatus();
  }
  ucp_rkey_h rkey = key.rkey;
  std::vector<void*> requests;
  requests.reserve(ops.size() + 1);
  ucs_status_t status = UCS_OK;
  ucp_request_param_t param{};
  for (const TransferOp& op : ops) {
    if (op.length == 0) continue;
    void* request = put ? ucp_put_nbx(ep_, op.local, op.length, op.remote_address, rkey, &param)
                        : ucp_get_nbx(ep_, op.local, op.length, op.remote_address, rkey, &param);
    if (UCS_PTR_IS_ERR(request)) {
      status = UCS_PTR_STATUS(request);
      break;
    }
    if (request != nullptr) requests.push_back(request);
  }
  if (status == UCS_OK) {
    void* flush = ucp_ep_flush_nbx(ep_, &param);  // remote completion of every put
    if (UCS_PTR_IS_ERR(flush)) status = UCS_PTR_STATUS(flush);
    if (UCS_PTR_IS_PTR(flush)) requests.push_back(flush);
  }
  ucs_status_t waited =
      WaitRequests(transport_, requests, absl::Now() + transport_->options().timeout, &error_);
  if (status == UCS_OK) status = waited;
  if (status == UCS_OK && error_.load() != UCS_OK) status = ucs_status_t(error_.load());
  if (status == UCS_OK) return absl::OkStatus();
  // Failed or timed out: force the endpoint closed, which completes what is still in flight (so
  // no transfer touches `ops` after we return), then release the requests.
  int expected = UCS_OK;
  error_.compare_exchange_strong(expected, status);
  Close(/*force=*/true);
  WaitRequests(transport_, requests, absl::Now() + absl::Seconds(1), nullptr);
  for (void* r : requests) ucp_request_free(r);
  absl::Status failure = Failure(what, status);
  Log()->error("{}", failure.ToString());
  return failure;
}

bool IsSharedMemory(const std::string& transport) {
  for (const char* name : {"posix", "sysv", "cma", "knem", "xpmem", "self"}) {
    if (transport.rfind(name, 0) == 0) return true;
  }
  return false;
}

// Whether a UCX_TLS-like request names shared memory (or leaves the choice to UCX).
bool RequestExpectsSharedMemory(const std::string& requested) {
  if (requested.empty()) return true;
  for (absl::string_view name : absl::StrSplit(requested, ',')) {
    if (name == "all" || name == "shm" || name == "sm" || IsSharedMemory(std::string(name))) {
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(
    const UcxTransportOptions& options) {
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("UcxTransportOptions.timeout must be positive");
  }
  std::unique_ptr<UcxTransport> transport(new UcxTransport(options));
  PDSERVE_RETURN_IF_ERROR(transport->Init());
  return transport;
}

absl::Status UcxTransport::Init() {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return absl::InternalError("ucp_config_read: " + UcsError(status));
  if (!options_.transports.empty()) {
    status = ucp_config_modify(config, "TLS", options_.transports.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      return absl::InvalidArgumentError(
          absl::StrCat("ucx transports '", options_.transports, "' rejected: ", UcsError(status)));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (status != UCS_OK) {
    context_ = nullptr;
    return absl::UnavailableError(
        absl::StrCat("ucp_init with transports '", options_.transports, "': ", UcsError(status)));
  }
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_MULTI;
  status = ucp_worker_create(context_, &worker_params, &worker_);
  if (status != UCS_OK) {
    worker_ = nullptr;
    return absl::UnavailableError(absl::StrCat("ucp_worker_create with transports '",
                                               options_.transports, "': ", UcsError(status)));
  }
  ucp_address_t* address = nullptr;
  size_t address_size = 0;
  status = ucp_worker_get_address(worker_, &address, &address_size);
  if (status != UCS_OK) return absl::InternalError("ucp_worker_get_address: " + UcsError(status));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  host_ = host;
  address_ = absl::StrCat(kAddressMagic, host_, std::string(1, '\0'));
  address_.append(reinterpret_cast<const char*>(address), address_size);
  ucp_worker_release_address(worker_, address);
  status = ucp_worker_get_efd(worker_, &event_fd_);
  if (status != UCS_OK) {
    Log()->warn("ucp_worker_get_efd: {}; the progress thread will poll", UcsError(status));
    event_fd_ = -1;
  }
  UcxContextResources resources = ReadUcxContextResources(context_);
  available_transports_ = absl::StrJoin(resources.transports, ",");
  available_resources_ = absl::StrJoin(resources.resources, ",");
  if (RequestExpectsSharedMemory(options_.transports) && !options_.transports.empty() &&
      std::none_of(resources.transports.begin(), resources.transports.end(), IsSharedMemory)) {
    Log()->warn(
        "UCX SHARED-MEMORY FALLBACK: requested transports '{}' but the context opened "
        "only '{}'",
        options_.transports, available_transports_);
  }
  progress_thread_ = std::thread([this] { ProgressLoop(); });
  return absl::OkStatus();
}

UcxTransport::~UcxTransport() {
  stop_.store(true);
  if (progress_thread_.joinable()) progress_thread_.join();
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

void UcxTransport::ProgressLoop() {
  // Spin while there is traffic (and for progress_spin after it), then sleep on the event fd.
  // UCX's tcp iface can leave bytes in a socket after its edge-triggered event fired, so a
  // wakeup can be missed; the poll timeout bounds that stall to progress_poll.
  const int poll_ms = std::max<int>(1, absl::ToInt64Milliseconds(options_.progress_poll));
  absl::Time last_activity = absl::Now();
  while (!stop_.load(std::memory_order_relaxed)) {
    if (waiters().load(std::memory_order_relaxed) > 0) {
      usleep(100);
      continue;
    }
    if (ucp_worker_progress(worker_) != 0) {
      last_activity = absl::Now();
      continue;
    }
    if (absl::Now() - last_activity < options_.progress_spin) {
      std::this_thread::yield();
      continue;
    }
    if (event_fd_ < 0) {
      usleep(50);
      continue;
    }
    ucs_status_t status = ucp_worker_arm(worker_);
    if (status == UCS_ERR_BUSY) continue;  // events arrived meanwhile: progress again
    pollfd fd{event_fd_, POLLIN, 0};
    if (poll(&fd, 1, poll_ms) > 0) last_activity = absl::Now();
  }
}

absl::StatusOr<std::unique_ptr<MemoryRegion>> UcxTransport::Register(void* base, size_t size,
                                                                     RemoteAccess access) {
  if (base == nullptr || size == 0) {
    return absl::InvalidArgumentError("ucx Register: null or empty range");
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_PROT;
  params.address = base;
  params.length = size;
  params.prot = Prot(access);
  ucp_mem_h memh = nullptr;
  ucs_status_t status = ucp_mem_map(context_, &params, &memh);
  if (status != UCS_OK) {
    return absl::ResourceExhaustedError(
        absl::StrCat("ucp_mem_map of ", size, " bytes: ", UcsError(status)));
  }
  return MakeRegion(context_, memh, static_cast<uint8_t*>(base), size, access);
}

absl::StatusOr<std::unique_ptr<MemoryRegion>> UcxTransport::Allocate(size_t size,
                                                                     RemoteAccess access) {
  if (size == 0) return absl::InvalidArgumentError("ucx Allocate: size 0");
  // UCX picks the allocator by UCX_ALLOC_PRIO (default md:sysv,md:posix,huge,thp,md:*,mmap,heap)
  // among the memory domains this context opened: with sysv/posix in `transports` the memory is
  // shared memory whose rkey lets a same-host peer map it, so RMA to it is a plain memcpy.
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS | UCP_MEM_MAP_PARAM_FIELD_PROT |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = nullptr;
  params.length = size;
  params.flags = UCP_MEM_MAP_ALLOCATE;
  params.prot = Prot(access);
  params.memory_type = UCS_MEMORY_TYPE_HOST;
  ucp_mem_h memh = nullptr;
  ucs_status_t status = ucp_mem_map(context_, &params, &memh);
  if (status != UCS_OK) {
    return absl::ResourceExhaustedError(
        absl::StrCat("ucp_mem_map (allocate) of ", size, " bytes: ", UcsError(status)));
  }
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  status = ucp_mem_query(memh, &attr);
  if (status != UCS_OK || attr.address == nullptr || attr.length < size) {
    ucp_mem_unmap(context_, memh);
    return absl::InternalError(
        absl::StrCat("ucp_mem_query of an allocation of ", size, " bytes: ", UcsError(status)));
  }
  // The allocation may be rounded up (to pages); the region covers what was asked for.
  return MakeRegion(context_, memh, static_cast<uint8_t*>(attr.address), size, access);
}

absl::StatusOr<std::unique_ptr<Endpoint>> UcxTransport::Connect(const std::string& peer_address) {
  const size_t magic = sizeof(kAddressMagic) - 1;
  size_t host_end = peer_address.find('\0', magic);
  if (peer_address.compare(0, magic, kAddressMagic) != 0 || host_end == std::string::npos ||
      host_end + 1 >= peer_address.size()) {
    return absl::InvalidArgumentError("ucx Connect: malformed peer address");
  }
  std::string peer_host = peer_address.substr(magic, host_end - magic);
  auto endpoint = std::make_unique<UcxEndpoint>(this, peer_host);
  PDSERVE_RETURN_IF_ERROR(
      endpoint->Open(reinterpret_cast<const ucp_address_t*>(peer_address.data() + host_end + 1)));
  {
    std::vector<UcxLane> lanes = ParseUcxEndpointLanes(PrintUcxEndpoint(endpoint->ep()));
    endpoint->set_lanes(std::move(lanes));
  }
  std::vector<std::string> rma = UcxRmaTransports(endpoint->lanes());
  const bool same_host = peer_host == host_;
  if (same_host && std::none_of(rma.begin(), rma.end(), IsSharedMemory)) {
    std::string message = absl::StrCat(
        "ucx endpoint to same-host peer ", peer_host, " moves RMA over '", absl::StrJoin(rma, ","),
        "' (no shared memory; requested '", options_.transports, "', available '",
        available_transports_, "'",
        options_.peer_failure_detection
            ? "; UCX 1.13 posix/sysv lack peer-failure handling: set peer_failure_detection=false"
            : "",
        options_.direct_shared_memory
            ? "; regions the peer allocated with Allocate in shared memory are still reached "
              "directly when this context opened sysv/posix"
            : "",
        ")");
    if (options_.require_shared_memory) return absl::FailedPreconditionError(message);
    const bool may_map =
        options_.direct_shared_memory && (absl::StrContains(available_transports_, "sysv") ||
                                          absl::StrContains(available_transports_, "posix"));
    if (may_map) {
      // Not a fallback yet: shared-memory regions are mapped directly (checked per region).
      Log()->info(
          "ucx endpoint to {}: RMA lanes over tcp; regions in shared memory are reached "
          "directly",
          peer_host);
      endpoint->set_fallback_message(message);
    } else if (RequestExpectsSharedMemory(options_.transports)) {
      Log()->warn("UCX SHARED-MEMORY FALLBACK: {}", message);
    }
  }
  Log()->debug("{}", DescribeTransport(*this, endpoint.get()));
  return std::unique_ptr<Endpoint>(std::move(endpoint));
}

std::string DescribeTransport(const Transport& transport, const Endpoint* endpoint) {
  std::string out = "ucx";
  if (auto* ucx = dynamic_cast<const UcxTransport*>(&transport)) {
    absl::StrAppend(&out, " requested='", ucx->options().transports, "' resources='",
                    ucx->available_resources(), "'");
  } else {
    out = "transport";
  }
  absl::StrAppend(&out, " available='", transport.available_transports(), "'");
  if (endpoint != nullptr) {
    absl::StrAppend(&out, " endpoint=[", absl::StrJoin(endpoint->transports_in_use(), ","), "]");
    if (auto* ucx_ep = dynamic_cast<const UcxEndpoint*>(endpoint)) {
      absl::StrAppend(&out, " rma=[", absl::StrJoin(UcxRmaTransports(ucx_ep->lanes()), ","), "]");
    }
  }
  return out;
}

}  // namespace pdserve
