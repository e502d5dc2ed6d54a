#include "core/kv/kv_page.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/byte_reader.h"
#include "core/base/hash.h"
#include "core/base/status_macros.h"

namespace pdserve {
namespace {

constexpr char kMagic[4] = {'P', 'D', 'K', 'V'};
constexpr size_t kSectionAlignment = 8;
constexpr int64_t kChecksumBytes = sizeof(uint64_t);

size_t PaddingAfter(size_t offset) {
  return (kSectionAlignment - offset % kSectionAlignment) % kSectionAlignment;
}

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

float LoadFloat(const uint8_t* p) {
  float value;
  std::memcpy(&value, p, sizeof(value));
  return value;
}

template <typename T>
void Append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

// [offset, offset + length) within a section.
struct ByteRange {
  int64_t offset;
  int64_t length;
};

// The bytes of a section that carry nothing when slots [0, num_tokens) are valid: per head the
// per-token scales and rows of later slots, then the section's tail padding.
std::vector<ByteRange> UnusedRanges(const KvSectionLayout& layout, int num_tokens) {
  std::vector<ByteRange> ranges;
  const int page_size = layout.page_size();
  for (int g = 0; g < layout.n_heads(); ++g) {
    if (layout.scale_mode() == KvScaleMode::kPerTokenHead) {
      ranges.push_back(
          {layout.scale_offset(g) + int64_t{num_tokens} * 4, int64_t{page_size - num_tokens} * 4});
    }
    const int64_t rows_end = layout.row_offset(g, page_size);
    ranges.push_back(
        {layout.row_offset(g, num_tokens), rows_end - layout.row_offset(g, num_tokens)});
  }
  const int64_t elements_end = layout.row_offset(layout.n_heads() - 1, page_size);
  ranges.push_back({elements_end, layout.bytes() - elements_end});
  return ranges;
}

absl::Status ValidateSection(const char* name, int page_size, const std::vector<int>& dims,
                             KvElement element, KvScaleMode scales) {
  absl::Status status = KvSectionLayout::Validate(page_size, dims, element, scales);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat(name, " section: ", status.message()));
}

// The positions of the valid slots: as many, ≥ 0, strictly increasing (empty: the default ones,
// which must fit in an i32).
absl::Status ValidatePositions(const KvPageHeader& header) {
  const std::vector<int32_t>& positions = header.positions;
  if (positions.empty()) {
    const int64_t last =
        int64_t{header.page_index} * header.layout.k.page_size() + header.num_tokens - 1;
    if (last <= std::numeric_limits<int32_t>::max()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("page ", header.page_index, "'s positions overflow"));
  }
  if (static_cast<int>(positions.size()) != header.num_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(positions.size(), " positions for ", header.num_tokens, " valid slots"));
  }
  for (size_t s = 0; s < positions.size(); ++s) {
    if (positions[s] < 0 || (s > 0 && positions[s] <= positions[s - 1])) {
      return absl::InvalidArgumentError(absl::StrCat("slot ", s, "'s position ", positions[s],
                                                     " is negative or not after the slot before"));
    }
  }
  return absl::OkStatus();
}

// The score biases of the valid slots: as many (or none), finite and ≥ 0.
absl::Status ValidateScoreBiases(const KvPageHeader& header) {
  const std::vector<float>& biases = header.score_biases;
  if (!biases.empty() && static_cast<int>(biases.size()) != header.num_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat(biases.size(), " score biases for ", header.num_tokens, " valid slots"));
  }
  for (size_t s = 0; s < biases.size(); ++s) {
    if (!(std::isfinite(biases[s]) && biases[s] >= 0.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", s, "'s score bias ", biases[s], " is not finite and ≥ 0"));
    }
  }
  return absl::OkStatus();
}

// The header's own fields; the sections are valid layouts.
absl::Status ValidateHeaderFields(const KvPageHeader& header) {
  const int page_size = header.layout.k.page_size();
  if (header.layout.v.page_size() != page_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "K page size ", page_size, " differs from V page size ", header.layout.v.page_size()));
  }
  if (header.cache_layer < 0 || header.page_index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative cache layer ", header.cache_layer,
                                                   " or page index ", header.page_index));
  }
  if (header.num_tokens < 1 || header.num_tokens > page_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_tokens ", header.num_tokens, " not in [1, page size ", page_size, "]"));
  }
  PDSERVE_RETURN_IF_ERROR(ValidatePositions(header));
  return ValidateScoreBiases(header);
}

// Scales of valid slots (all per-page scales) are finite and > 0.
absl::Status CheckScales(const char* name, const KvSectionLayout& layout, int num_tokens,
                         std::span<const uint8_t> bytes) {
  const int used =
      layout.scale_mode() == KvScaleMode::kPerTokenHead ? num_tokens : layout.scales_per_head();
  for (int g = 0; g < layout.n_heads(); ++g) {
    for (int s = 0; s < used; ++s) {
      const float scale = LoadFloat(bytes.data() + layout.scale_offset(g) + int64_t{s} * 4);
      if (!(std::isfinite(scale) && scale > 0.0f)) {
        return absl::InvalidArgumentError(absl::StrCat(name, " section: head ", g, " scale ", s,
                                                       " is ", scale, "; must be finite and > 0"));
      }
    }
  }
  return absl::OkStatus();
}

// Elements of valid slots are finite: no f32 or f16 Inf/NaN, no e4m3 NaN code (0x7F/0xFF).
absl::Status CheckElements(const char* name, const KvSectionLayout& layout, int num_tokens,
                           std::span<const uint8_t> bytes) {
  auto finite_at = [&layout](const uint8_t* rows, int64_t i) {
    switch (layout.element()) {
      case KvElement::kF32:
        return std::isfinite(LoadFloat(rows + 4 * i));
      case KvElement::kF16:
        return (rows[2 * i + 1] & 0x7C) != 0x7C;  // exponent all ones: Inf or NaN
      case KvElement::kE4M3:
        return (rows[i] & 0x7F) != 0x7F;
    }
    return false;
  };
  for (int g = 0; g < layout.n_heads(); ++g) {
    const uint8_t* rows = bytes.data() + layout.row_offset(g, 0);
    const int64_t count = int64_t{num_tokens} * layout.dim(g);
    for (int64_t i = 0; i < count; ++i) {
      const bool finite = finite_at(rows, i);
      if (!finite) {
        return absl::InvalidArgumentError(absl::StrCat(name, " section: head ", g, " slot ",
                                                       i / layout.dim(g), " element ",
                                                       i % layout.dim(g), " is not finite"));
      }
    }
  }
  return absl::OkStatus();
}

// DecodeKvPage's content rules for one section of `layout.bytes()` bytes.
absl::Status CheckSection(const char* name, const KvSectionLayout& layout, int num_tokens,
                          std::span<const uint8_t> bytes) {
  PDSERVE_RETURN_IF_ERROR(CheckScales(name, layout, num_tokens, bytes));
  PDSERVE_RETURN_IF_ERROR(CheckElements(name, layout, num_tokens, bytes));
  for (const ByteRange& range : UnusedRanges(layout, num_tokens)) {
    const auto unused = bytes.subspan(range.offset, range.length);
    const auto nonzero = std::find_if(unused.begin(), unused.end(), [](uint8_t b) { return b; });
    if (nonzero != unused.end()) {
      return absl::InvalidArgumentError(absl::StrCat(name, " section: nonzero byte at offset ",
                                                     range.offset + (nonzero - unused.begin()),
                                                     " outside the valid slots"));
    }
  }
  return absl::OkStatus();
}

void AppendSectionHeader(std::string& out, const KvSectionLayout& layout) {
  Append(out, static_cast<uint8_t>(layout.element()));
  Append(out, static_cast<uint8_t>(layout.scale_mode()));
  Append(out, static_cast<uint16_t>(layout.n_heads()));
  for (int dim : layout.dims()) Append(out, static_cast<uint16_t>(dim));
}

void AppendHeader(std::string& out, const KvPageHeader& header) {
  out.append(kMagic, sizeof(kMagic));
  Append(out, kKvPageVersion);
  Append(out, header.calibration_hash);
  Append(out, header.request_id);
  Append(out, header.epoch);
  Append(out, header.cache_layer);
  Append(out, header.page_index);
  Append(out, header.num_tokens);
  Append(out, static_cast<int32_t>(header.layout.k.page_size()));
  AppendSectionHeader(out, header.layout.k);
  AppendSectionHeader(out, header.layout.v);
  for (int s = 0; s < header.layout.k.page_size(); ++s) {
    const bool valid = s < header.num_tokens;
    const int64_t fallback = int64_t{header.page_index} * header.layout.k.page_size() + s;
    Append(out, !valid                     ? int32_t{0}
                : header.positions.empty() ? static_cast<int32_t>(fallback)
                                           : header.positions[s]);
  }
  for (int s = 0; s < header.layout.k.page_size(); ++s) {
    const bool given = s < header.num_tokens && !header.score_biases.empty();
    Append(out, given ? header.score_biases[s] : 0.0f);
  }
  // The V head checksums: placeholders, filled once the V section is appended (AppendPage).
  out.append(sizeof(uint64_t) * static_cast<size_t>(header.layout.v.n_heads()), '\0');
  out.append(PaddingAfter(out.size()), '\0');
}

std::vector<uint64_t> VHeadChecksums(const KvSectionLayout& v, std::span<const uint8_t> section) {
  std::vector<uint64_t> checksums(v.n_heads());
  for (int g = 0; g < v.n_heads(); ++g) checksums[g] = KvHeadChecksum(v, g, section.data());
  return checksums;
}

absl::Status CheckSize(const char* name, const KvSectionLayout& layout,
                       std::span<const uint8_t> bytes) {
  if (static_cast<int64_t>(bytes.size()) == layout.bytes()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " section has ", bytes.size(),
                                                 " bytes; the layout needs ", layout.bytes()));
}

// Appends `bytes` (layout.bytes() of them) with the unused ranges zeroed; then checks the valid
// slots.
absl::Status AppendSection(std::string& out, const char* name, const KvSectionLayout& layout,
                           int num_tokens, std::span<const uint8_t> bytes) {
  const size_t start = out.size();
  out.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  for (const ByteRange& range : UnusedRanges(layout, num_tokens)) {
    std::memset(out.data() + start + range.offset, 0, range.length);
  }
  return CheckSection(name, layout, num_tokens, AsBytes(out).subspan(start));
}

absl::StatusOr<KvSectionLayout> ReadSection(ByteReader& reader, const char* name, int page_size) {
  PDSERVE_ASSIGN_OR_RETURN(uint8_t element, reader.Read<uint8_t>(absl::StrCat(name, " element")));
  PDSERVE_ASSIGN_OR_RETURN(uint8_t scales, reader.Read<uint8_t>(absl::StrCat(name, " scales")));
  PDSERVE_ASSIGN_OR_RETURN(uint16_t heads, reader.Read<uint16_t>(absl::StrCat(name, " heads")));
  std::vector<int> dims;
  for (int g = 0; g < heads; ++g) {
    PDSERVE_ASSIGN_OR_RETURN(uint16_t dim, reader.Read<uint16_t>(absl::StrCat(name, " dims")));
    dims.push_back(dim);
  }
  const auto kv_element = static_cast<KvElement>(element);
  const auto scale_mode = static_cast<KvScaleMode>(scales);
  absl::Status status = ValidateSection(name, page_size, dims, kv_element, scale_mode);
  if (!status.ok()) return reader.Error(status.message());
  return KvSectionLayout(page_size, std::move(dims), kv_element, scale_mode);
}

// A value per slot of a page (`plural`: "positions"): the valid slots' into `values`, then the
// other slots', which must be zero bytes (an error naming the `singular` value otherwise).
template <typename T>
absl::Status ReadSlotValues(ByteReader& reader, int page_size, int num_tokens,
                            absl::string_view plural, absl::string_view singular,
                            std::vector<T>& values) {
  const std::string what = absl::StrCat("the ", plural);
  values.resize(num_tokens);
  for (T& value : values) {
    PDSERVE_ASSIGN_OR_RETURN(value, reader.Read<T>(what));
  }
  PDSERVE_ASSIGN_OR_RETURN(auto unused,
                           reader.ReadBytes(int64_t{page_size - num_tokens} * sizeof(T), what));
  if (std::any_of(unused.begin(), unused.end(), [](uint8_t b) { return b; })) {
    return reader.Error(absl::StrCat("nonzero ", singular, " beyond the valid slots"));
  }
  return absl::OkStatus();
}

absl::StatusOr<KvPageHeader> ReadHeader(ByteReader& reader) {
  PDSERVE_ASSIGN_OR_RETURN(auto magic, reader.ReadBytes(sizeof(kMagic), "the magic"));
  if (std::memcmp(magic.data(), kMagic, sizeof(kMagic)) != 0) {
    return reader.Error("bad magic: not a KV page");
  }
  PDSERVE_ASSIGN_OR_RETURN(uint32_t version, reader.Read<uint32_t>("the version"));
  if (version != kKvPageVersion) {
    return reader.Error(
        absl::StrCat("version ", version, " unsupported; this build reads ", kKvPageVersion));
  }
  KvPageHeader header;
  PDSERVE_ASSIGN_OR_RETURN(header.calibration_hash, reader.Read<uint64_t>("the calibration hash"));
  PDSERVE_ASSIGN_OR_RETURN(header.request_id, reader.Read<uint64_t>("the request id"));
  PDSERVE_ASSIGN_OR_RETURN(header.epoch, reader.Read<uint64_t>("the epoch"));
  PDSERVE_ASSIGN_OR_RETURN(header.cache_layer, reader.Read<int32_t>("the cache layer"));
  PDSERVE_ASSIGN_OR_RETURN(header.page_index, reader.Read<int32_t>("the page index"));
  PDSERVE_ASSIGN_OR_RETURN(header.num_tokens, reader.Read<int32_t>("num_tokens"));
  PDSERVE_ASSIGN_OR_RETURN(int32_t page_size, reader.Read<int32_t>("the page size"));
  PDSERVE_ASSIGN_OR_RETURN(header.layout.k, ReadSection(reader, "K", page_size));
  PDSERVE_ASSIGN_OR_RETURN(header.layout.v, ReadSection(reader, "V", page_size));
  if (header.num_tokens >= 1 && header.num_tokens <= page_size) {  // else refused just below
    PDSERVE_RETURN_IF_ERROR(ReadSlotValues(reader, page_size, header.num_tokens, "positions",
                                           "position", header.positions));
    PDSERVE_RETURN_IF_ERROR(ReadSlotValues(reader, page_size, header.num_tokens, "score biases",
                                           "score bias", header.score_biases));
  }
  absl::Status status = ValidateHeaderFields(header);
  if (!status.ok()) return reader.Error(status.message());
  header.v_head_checksums.resize(header.layout.v.n_heads());
  for (uint64_t& checksum : header.v_head_checksums) {
    PDSERVE_ASSIGN_OR_RETURN(checksum, reader.Read<uint64_t>("the V head checksums"));
  }
  PDSERVE_ASSIGN_OR_RETURN(auto padding,
                           reader.ReadBytes(PaddingAfter(reader.offset()), "the header padding"));
  if (std::any_of(padding.begin(), padding.end(), [](uint8_t b) { return b; })) {
    return reader.Error("nonzero header padding");
  }
  return header;
}

absl::Status WithPrefix(const std::string& prefix, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

absl::Status AppendPage(std::string& out, const KvPageHeader& header, std::span<const uint8_t> k,
                        std::span<const uint8_t> v) {
  const KvLayerLayout& layout = header.layout;
  PDSERVE_RETURN_IF_ERROR(ValidateSection("K", layout.k.page_size(), layout.k.dims(),
                                          layout.k.element(), layout.k.scale_mode()));
  PDSERVE_RETURN_IF_ERROR(ValidateSection("V", layout.v.page_size(), layout.v.dims(),
                                          layout.v.element(), layout.v.scale_mode()));
  PDSERVE_RETURN_IF_ERROR(ValidateHeaderFields(header));
  PDSERVE_RETURN_IF_ERROR(CheckSize("K", layout.k, k));
  PDSERVE_RETURN_IF_ERROR(CheckSize("V", layout.v, v));
  out.reserve(static_cast<size_t>(KvPageBytes(layout)));
  AppendHeader(out, header);
  PDSERVE_RETURN_IF_ERROR(AppendSection(out, "K", layout.k, header.num_tokens, k));
  const size_t head = out.size();
  Append(out, uint64_t{0});  // the head checksum, once the V head checksums are in the header
  PDSERVE_RETURN_IF_ERROR(AppendSection(out, "V", layout.v, header.num_tokens, v));
  const std::vector<uint64_t> v_checksums =
      VHeadChecksums(layout.v, AsBytes(out).subspan(head + kChecksumBytes));
  std::memcpy(out.data() + static_cast<size_t>(KvPageVHeadChecksumsOffset(layout)),
              v_checksums.data(), v_checksums.size() * sizeof(uint64_t));
  const uint64_t head_checksum = Xxh64(AsBytes(out).first(head));
  std::memcpy(out.data() + head, &head_checksum, sizeof(head_checksum));
  Append(out, Xxh64(AsBytes(out)));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> EncodeKvPage(const KvPageHeader& header, std::span<const uint8_t> k,
                                         std::span<const uint8_t> v) {
  std::string out;
  PDSERVE_RETURN_IF_ERROR(WithPrefix("EncodeKvPage: ", AppendPage(out, header, k, v)));
  return out;
}

uint64_t KvHeadChecksum(const KvSectionLayout& layout, int head, const uint8_t* section) {
  const size_t rows = static_cast<size_t>(layout.page_size()) * layout.dim(head) *
                      static_cast<size_t>(layout.element_bytes());
  const size_t scales = static_cast<size_t>(layout.scales_per_head()) * 4;
  return Xxh64({section + layout.head_offset(head), rows},
               Xxh64({section + layout.scale_offset(head), scales}));
}

int64_t KvPageVHeadChecksumsOffset(const KvLayerLayout& layout) {
  // magic, version, calibration hash, request id, epoch, cache layer, page index, num_tokens, page
  // size
  constexpr size_t kFixed = sizeof(kMagic) + 4 + 8 + 8 + 8 + 4 * 4;
  // per section: element, scale mode, heads, then a u16 per head; then an i32 position and an f32
  // score bias per slot
  const size_t sections = 2 * 4 + 2 * static_cast<size_t>(layout.k.n_heads() + layout.v.n_heads());
  return static_cast<int64_t>(kFixed + sections + 8 * static_cast<size_t>(layout.k.page_size()));
}

int64_t KvPageKOffset(const KvLayerLayout& layout) {
  const size_t header = static_cast<size_t>(KvPageVHeadChecksumsOffset(layout)) +
                        sizeof(uint64_t) * layout.v.n_heads();
  return static_cast<int64_t>(header + PaddingAfter(header));
}

int64_t KvPageVOffset(const KvLayerLayout& layout) {
  return KvPageKOffset(layout) + layout.k.bytes() + kChecksumBytes;
}

int64_t KvPageBytes(const KvLayerLayout& layout) {
  return KvPageVOffset(layout) + layout.v.bytes() + kChecksumBytes;
}

namespace {

// A page's head as DecodeKvPage and DecodeKvPageHead read it: the header and K section (in
// `page`), the bytes they span, and the head checksum stored after them.
struct PageHead {
  KvPageView page;
  size_t bytes = 0;
  uint64_t checksum = 0;
};
absl::StatusOr<PageHead> ReadPageHead(ByteReader& reader) {
  PageHead head;
  PDSERVE_ASSIGN_OR_RETURN(head.page.header, ReadHeader(reader));
  PDSERVE_ASSIGN_OR_RETURN(head.page.k,
                           reader.ReadBytes(head.page.header.layout.k.bytes(), "the K section"));
  head.bytes = reader.offset();
  PDSERVE_ASSIGN_OR_RETURN(head.checksum, reader.Read<uint64_t>("the head checksum"));
  return head;
}

// "WHAT (request R, cache layer C, page P): ", the prefix of a decoded page's errors.
std::string PageContext(const char* what, const KvPageHeader& header) {
  return absl::StrCat(what, " (request ", header.request_id, ", cache layer ", header.cache_layer,
                      ", page ", header.page_index, "): ");
}

}  // namespace

absl::StatusOr<KvPageView> DecodeKvPage(std::span<const uint8_t> bytes) {
  ByteReader reader(bytes, "KV page");
  PDSERVE_ASSIGN_OR_RETURN(PageHead head, ReadPageHead(reader));
  KvPageView& page = head.page;
  const KvLayerLayout& layout = page.header.layout;
  PDSERVE_ASSIGN_OR_RETURN(page.v, reader.ReadBytes(layout.v.bytes(), "the V section"));
  const size_t checksummed = reader.offset();
  PDSERVE_ASSIGN_OR_RETURN(uint64_t checksum, reader.Read<uint64_t>("the checksum"));
  if (reader.remaining() != 0) {
    return reader.Error(absl::StrCat(reader.remaining(), " trailing bytes"));
  }
  const std::string context = PageContext("KV page", page.header);
  if (head.checksum != Xxh64(bytes.first(head.bytes)) ||
      checksum != Xxh64(bytes.first(checksummed))) {
    return absl::DataLossError(absl::StrCat(context, "checksum mismatch"));
  }
  if (VHeadChecksums(layout.v, page.v) != page.header.v_head_checksums) {
    return absl::DataLossError(absl::StrCat(context, "V head checksum mismatch"));
  }
  const int num_tokens = page.header.num_tokens;
  PDSERVE_RETURN_IF_ERROR(WithPrefix(context, CheckSection("K", layout.k, num_tokens, page.k)));
  PDSERVE_RETURN_IF_ERROR(WithPrefix(context, CheckSection("V", layout.v, num_tokens, page.v)));
  return std::move(head.page);
}

absl::StatusOr<KvPageHeader> DecodeKvPageHeader(std::span<const uint8_t> bytes) {
  ByteReader reader(bytes, "KV page header");
  return ReadHeader(reader);
}

absl::StatusOr<KvPageView> DecodeKvPageHead(std::span<const uint8_t> bytes) {
  ByteReader reader(bytes, "KV page head");
  PDSERVE_ASSIGN_OR_RETURN(PageHead head, ReadPageHead(reader));
  const KvPageView& page = head.page;
  if (reader.remaining() != 0) {
    return reader.Error(absl::StrCat(reader.remaining(), " bytes after the head checksum"));
  }
  const std::string context = PageContext("KV page head", page.header);
  if (head.checksum != Xxh64(bytes.first(head.bytes))) {
    return absl::DataLossError(absl::StrCat(context, "head checksum mismatch"));
  }
  PDSERVE_RETURN_IF_ERROR(
      WithPrefix(context, CheckSection("K", page.header.layout.k, page.header.num_tokens, page.k)));
  return std::move(head.page);
}

}  // namespace pdserve
