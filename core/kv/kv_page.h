// KV page wire format: one page of `page_size` token slots of one cache layer (a model layer or
// an AcrossKV group) for all its KV heads, as prefill ships it to decode and the KV store keeps
// it. Little endian:
//
//   "PDKV" | u32 version | u64 calibration_hash | u64 request_id | u64 epoch | i32 cache_layer
//   | i32 page_index | i32 num_tokens | i32 page_size
//   | K section: u8 element | u8 scale mode | u16 heads | u16 dims[heads]
//   | V section: the same
//   | i32 positions[page_size] | f32 score_biases[page_size]
//   | u64 v_head_checksums[V heads]
//   | zero padding to a multiple of 8 bytes
//   | K bytes | u64 Xxh64 of every byte before it (the head checksum)
//   | V bytes | u64 Xxh64 of every byte before it
//
// The K and V bytes are exactly as KvSectionLayout (kv_layout.h) lays them out, so the K and the V
// bytes start 8-byte aligned relative to the page start. The head checksum lets a receiver that
// leaves V where it is (KCache's value tier) verify the rest (version 3), and the V head checksums
// (version 4) let it verify each head of V it fetches later, alone. The epoch (version 3) is
// the KV store slot's allocation epoch the page was written under: a page read back under another
// epoch is stale. Slots ≥ num_tokens carry nothing: their rows,
// their per-token scales, their positions and score biases and each section's tail padding are zero
// on the wire (the encoder writes zeros there whatever its input holds; the decoder rejects
// anything else), so a page is a pure function of its valid tokens. Positions (version 2) are the
// tokens' positions in their prompt: page_index · page_size + slot, unless token retention
// (core/kv/ token_retention.h) dropped tokens before them; score biases (version 5) what token
// retention adds to a KVCrush representative's attention scores (0 for every other token).
// Functions are pure and thread-safe.
#ifndef PDSERVE_CORE_KV_KV_PAGE_H_
#define PDSERVE_CORE_KV_KV_PAGE_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "core/kv/kv_layout.h"

namespace pdserve {

inline constexpr uint32_t kKvPageVersion = 5;

struct KvPageHeader {
  uint64_t calibration_hash = 0;  // content hash of the Calibration both sides must share
  uint64_t request_id = 0;
  uint64_t epoch = 0;       // the KV store slot's allocation epoch; 0 outside a store
  int32_t cache_layer = 0;  // ≥ 0
  int32_t page_index = 0;   // ≥ 0: the page's number within the request, in token order
  int32_t num_tokens = 0;   // valid slots [0, num_tokens); 1 ≤ num_tokens ≤ page_size
  KvLayerLayout layout;     // K and V have the same page_size
  // The valid slots' positions, ≥ 0 and strictly increasing. EncodeKvPage takes empty as
  // page_index · page_size + slot (no token dropped); DecodeKvPage always fills num_tokens.
  std::vector<int32_t> positions;
  // The valid slots' score biases (kernels/attention_shape.h: token_bias), finite and ≥ 0.
  // EncodeKvPage takes empty as all 0; DecodeKvPage always fills num_tokens.
  std::vector<float> score_biases;
  // KvHeadChecksum of each V head. EncodeKvPage computes them (what the header holds is ignored);
  // the decoders fill them, and DecodeKvPage checks them against the V bytes.
  std::vector<uint64_t> v_head_checksums;
};

// A decoded page; k and v view the decoded bytes ([layout.k.bytes()] and [layout.v.bytes()]).
struct KvPageView {
  KvPageHeader header;
  std::span<const uint8_t> k;
  std::span<const uint8_t> v;
};

// Serializes a page in the current version. `k` and `v` hold layout.k.bytes() and
// layout.v.bytes() bytes; what they hold for slots ≥ num_tokens is ignored. InvalidArgument
// when the header breaks its field contracts or a valid slot breaks DecodeKvPage's content rules,
// so every page this returns decodes.
absl::StatusOr<std::string> EncodeKvPage(const KvPageHeader& header, std::span<const uint8_t> k,
                                         std::span<const uint8_t> v);

// Byte offsets, from an encoded page's first byte, of its K bytes and of its V bytes (a page of
// this layout, any header values): where a receiver finds the sections without decoding, e.g. to
// leave V in a value tier. KvPageVOffset is also the length of the page's head (header, K bytes
// and head checksum: what DecodeKvPageHead takes), and KvPageBytes the whole page's. Requires a
// valid layout.
int64_t KvPageKOffset(const KvLayerLayout& layout);
// Where the header's V head checksums start (for tools that reseal a damaged page: tests, fuzzers).
int64_t KvPageVHeadChecksumsOffset(const KvLayerLayout& layout);
int64_t KvPageVOffset(const KvLayerLayout& layout);
int64_t KvPageBytes(const KvLayerLayout& layout);

// The checksum of head `head` of a section laid out by `layout` whose first byte is `section`:
// Xxh64 of the head's rows (all page_size slots) seeded with Xxh64 of its scales — exactly the
// bytes a value tier fetches for one head. Reads only those bytes.
uint64_t KvHeadChecksum(const KvSectionLayout& layout, int head, const uint8_t* section);

// Strict decoding of untrusted bytes. InvalidArgument naming the problem for a bad magic, an
// unsupported version, truncation or trailing bytes, header fields out of range (see
// KvSectionLayout::Validate and KvPageHeader), or bad content: a scale of a valid slot that is not
// finite and > 0, a non-finite element (f32 Inf/NaN, e4m3 NaN code) in a valid slot, a nonzero
// byte where the page carries nothing. DataLoss when a checksum does not match. Reads only
// within `bytes`; allocates O(heads).
absl::StatusOr<KvPageView> DecodeKvPage(std::span<const uint8_t> bytes);

// Only the header of a page (what page it says it is; positions included): the same header rules
// as DecodeKvPage, neither checksum nor section content checked — for diagnostics and for the
// fuzzer to find the head checksum, never to accept a page. Reads only within `bytes`.
absl::StatusOr<KvPageHeader> DecodeKvPageHeader(std::span<const uint8_t> bytes);

// Decodes the first KvPageVOffset(layout) bytes of a page — its header, K section and head
// checksum — for a receiver that leaves V where it is. The same header and K content rules as
// DecodeKvPage; DataLoss when the head checksum does not match. V is not covered: the receiver
// checks each V head it reads against header.v_head_checksums (KvHeadChecksum). v is empty in
// the result.
absl::StatusOr<KvPageView> DecodeKvPageHead(std::span<const uint8_t> bytes);

}  // namespace pdserve

#endif  // PDSERVE_CORE_KV_KV_PAGE_H_
