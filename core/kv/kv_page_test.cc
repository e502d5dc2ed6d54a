// KV pages: round trips for f32 and e4m3 (per-token and per-page scales), ragged and zero head
// widths, partial pages; canonical zeros beyond num_tokens; every single-byte corruption and every
// truncation of a small page rejected; version, magic, trailing bytes, header ranges and content
// rules (scales, finite elements) enforced by both encoder and decoder.
#include "core/kv/kv_page.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/hash.h"
#include "core/tensor/float16.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Byte offsets of fixed header fields (kv_page.h).
constexpr size_t kVersionOffset = 4;
constexpr size_t kCacheLayerOffset = 32;
constexpr size_t kPageIndexOffset = 36;
constexpr size_t kNumTokensOffset = 40;
constexpr size_t kPageSizeOffset = 44;
constexpr size_t kKElementOffset = 48;
constexpr size_t kKFirstDimOffset = 52;

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

template <typename T>
void Poke(std::string& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}

// Rewrites the trailing checksum so that only the deliberate change is wrong.
// Makes both checksums of `page` (of `layout`) match its bytes again.
void Reseal(std::string& page, const KvLayerLayout& layout) {
  const size_t head = static_cast<size_t>(KvPageVOffset(layout)) - sizeof(uint64_t);
  Poke(page, head, Xxh64(AsBytes(page).first(head)));
  const size_t body = page.size() - sizeof(uint64_t);
  Poke(page, body, Xxh64(AsBytes(page).first(body)));
}

KvSectionLayout Section(int page_size, std::vector<int> dims, KvElement element,
                        KvScaleMode scales) {
  EXPECT_TRUE(KvSectionLayout::Validate(page_size, dims, element, scales).ok());
  return KvSectionLayout(page_size, std::move(dims), element, scales);
}

// Section bytes with random valid content in slots [0, num_tokens) and `filler` elsewhere.
std::vector<uint8_t> SectionBytes(const KvSectionLayout& layout, int num_tokens, uint32_t seed,
                                  uint8_t filler = 0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.01f, 2.0f);
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::vector<uint8_t> bytes(static_cast<size_t>(layout.bytes()), filler);
  const int used_scales =
      layout.scale_mode() == KvScaleMode::kPerTokenHead ? num_tokens : layout.scales_per_head();
  for (int g = 0; g < layout.n_heads(); ++g) {
    for (int s = 0; s < used_scales; ++s) {
      const float x = scale(rng);
      std::memcpy(&bytes[layout.scale_offset(g) + int64_t{4} * s], &x, 4);
    }
    for (int slot = 0; slot < num_tokens; ++slot) {
      uint8_t* row = &bytes[layout.row_offset(g, slot)];
      for (int i = 0; i < layout.dim(g); ++i) {
        if (layout.element() == KvElement::kF32) {
          const float x = value(rng);
          std::memcpy(row + int64_t{4} * i, &x, 4);
        } else if (layout.element() == KvElement::kF16) {
          const uint16_t h = F32ToF16(value(rng));
          std::memcpy(row + int64_t{2} * i, &h, 2);
        } else {
          row[i] = static_cast<uint8_t>(rng() % 0x7F) | static_cast<uint8_t>(rng() & 0x80);
        }
      }
    }
  }
  return bytes;
}

struct Page {
  KvPageHeader header;
  std::vector<uint8_t> k;
  std::vector<uint8_t> v;
};

Page MakePage(KvSectionLayout k, KvSectionLayout v, int num_tokens, uint8_t filler = 0) {
  Page page;
  page.header.calibration_hash = 0x0123456789ABCDEFULL;
  page.header.request_id = 42;
  page.header.epoch = 7;
  page.header.cache_layer = 3;
  page.header.page_index = 9;
  page.header.num_tokens = num_tokens;
  page.header.layout = {std::move(k), std::move(v)};
  page.k = SectionBytes(page.header.layout.k, num_tokens, 1, filler);
  page.v = SectionBytes(page.header.layout.v, num_tokens, 2, filler);
  return page;
}

std::string Encode(const Page& page) {
  absl::StatusOr<std::string> bytes = EncodeKvPage(page.header, page.k, page.v);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

// A small e4m3 page: per-token K with a zero-width head, per-page V, half the slots valid.
Page SmallPage() {
  return MakePage(Section(4, {3, 0, 2}, KvElement::kE4M3, KvScaleMode::kPerTokenHead),
                  Section(4, {1, 2}, KvElement::kE4M3, KvScaleMode::kPerPageHead), 2);
}

void ExpectRoundTrip(const Page& page) {
  const std::string bytes = Encode(page);
  absl::StatusOr<KvPageView> view = DecodeKvPage(AsBytes(bytes));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->header.calibration_hash, page.header.calibration_hash);
  EXPECT_EQ(view->header.request_id, page.header.request_id);
  EXPECT_EQ(view->header.epoch, page.header.epoch);
  EXPECT_EQ(view->header.cache_layer, page.header.cache_layer);
  EXPECT_EQ(view->header.page_index, page.header.page_index);
  EXPECT_EQ(view->header.num_tokens, page.header.num_tokens);
  EXPECT_EQ(view->header.layout, page.header.layout);
  std::vector<int32_t> positions = page.header.positions;  // empty: the default ones
  if (positions.empty()) {
    for (int s = 0; s < page.header.num_tokens; ++s) {
      positions.push_back(page.header.page_index * page.header.layout.k.page_size() + s);
    }
  }
  EXPECT_EQ(view->header.positions, positions);
  std::vector<float> biases = page.header.score_biases;  // empty: all 0
  if (biases.empty()) biases.assign(page.header.num_tokens, 0.0f);
  EXPECT_EQ(view->header.score_biases, biases);
  EXPECT_EQ(std::vector<uint8_t>(view->k.begin(), view->k.end()), page.k);
  EXPECT_EQ(std::vector<uint8_t>(view->v.begin(), view->v.end()), page.v);
  EXPECT_EQ((view->k.data() - AsBytes(bytes).data()) % 8, 0);
  EXPECT_EQ(view->v.data(), view->k.data() + view->k.size() + sizeof(uint64_t));  // head checksum
  EXPECT_EQ(static_cast<int64_t>(bytes.size()), KvPageBytes(page.header.layout));
}

// The section offsets a receiver computes from the layout alone are where the encoder put them,
// for head counts that need header padding and those that do not.
TEST(KvPageTest, SectionOffsetsMatchTheEncoding) {
  const std::vector<Page> pages = {
      SmallPage(),
      MakePage(Section(16, {64, 64, 64, 64}, KvElement::kF32, KvScaleMode::kNone),
               Section(16, {64, 64, 64, 64}, KvElement::kF32, KvScaleMode::kNone), 5),
      MakePage(Section(8, {7}, KvElement::kE4M3, KvScaleMode::kPerTokenHead),
               Section(8, {5, 5}, KvElement::kF32, KvScaleMode::kNone), 8)};
  for (const Page& page : pages) {
    const std::string bytes = Encode(page);
    absl::StatusOr<KvPageView> view = DecodeKvPage(AsBytes(bytes));
    ASSERT_TRUE(view.ok()) << view.status();
    const uint8_t* start = AsBytes(bytes).data();
    EXPECT_EQ(KvPageKOffset(page.header.layout), view->k.data() - start);
    EXPECT_EQ(KvPageVOffset(page.header.layout), view->v.data() - start);
    EXPECT_EQ(KvPageKOffset(page.header.layout) % 8, 0);
  }
}

TEST(KvPageTest, RoundTripF32FullWidth) {
  ExpectRoundTrip(MakePage(Section(16, {64, 64, 64, 64}, KvElement::kF32, KvScaleMode::kNone),
                           Section(16, {64, 64, 64, 64}, KvElement::kF32, KvScaleMode::kNone), 16));
}

TEST(KvPageTest, RoundTripE4M3PerTokenRaggedWithEmptyHead) {
  ExpectRoundTrip(
      MakePage(Section(16, {32, 17, 5, 0}, KvElement::kE4M3, KvScaleMode::kPerTokenHead),
               Section(16, {24, 0, 9, 3}, KvElement::kE4M3, KvScaleMode::kPerTokenHead), 7));
}

TEST(KvPageTest, RoundTripE4M3PerPage) {
  ExpectRoundTrip(MakePage(Section(8, {13, 64}, KvElement::kE4M3, KvScaleMode::kPerPageHead),
                           Section(8, {7, 1}, KvElement::kE4M3, KvScaleMode::kPerPageHead), 8));
}

TEST(KvPageTest, RoundTripF16RaggedAndMixedWithE4M3) {
  ExpectRoundTrip(MakePage(Section(16, {64, 7, 0}, KvElement::kF16, KvScaleMode::kNone),
                           Section(16, {5, 64}, KvElement::kF16, KvScaleMode::kNone), 11));
  ExpectRoundTrip(MakePage(Section(8, {9, 3}, KvElement::kF16, KvScaleMode::kNone),
                           Section(8, {9, 3}, KvElement::kE4M3, KvScaleMode::kPerPageHead), 8));
}

// f16 Inf and NaN elements are refused by both ends; scales with f16 are not a layout.
TEST(KvPageTest, NonFiniteF16ElementRejected) {
  EXPECT_FALSE(KvSectionLayout::Validate(4, {2}, KvElement::kF16, KvScaleMode::kPerPageHead).ok());
  for (uint16_t bad : {uint16_t{0x7C00}, uint16_t{0xFC00}, uint16_t{0x7E00}}) {
    Page page = MakePage(Section(4, {2, 3}, KvElement::kF16, KvScaleMode::kNone),
                         Section(4, {2, 3}, KvElement::kF16, KvScaleMode::kNone), 3);
    std::memcpy(&page.k[page.header.layout.k.row_offset(1, 2) + 4], &bad, 2);
    EXPECT_TRUE(absl::IsInvalidArgument(EncodeKvPage(page.header, page.k, page.v).status()))
        << std::hex << bad;
  }
}

TEST(KvPageTest, RoundTripMixedSectionsOneToken) {
  ExpectRoundTrip(MakePage(Section(32, {16, 0}, KvElement::kE4M3, KvScaleMode::kPerPageHead),
                           Section(32, {16, 0}, KvElement::kF32, KvScaleMode::kNone), 1));
}

TEST(KvPageTest, EncoderZeroesUnusedSlots) {
  for (uint8_t filler : {0xABu, 0xFFu}) {  // 0xFF.. is a NaN as a float and as an e4m3 code
    const Page dirty = MakePage(Section(4, {3, 5}, KvElement::kE4M3, KvScaleMode::kPerTokenHead),
                                Section(4, {3, 2}, KvElement::kF32, KvScaleMode::kNone), 3, filler);
    Page clean = dirty;
    clean.k = SectionBytes(clean.header.layout.k, 3, 1);
    clean.v = SectionBytes(clean.header.layout.v, 3, 2);
    ASSERT_NE(clean.k, dirty.k);
    EXPECT_EQ(Encode(dirty), Encode(clean));
  }
}

TEST(KvPageTest, EverySingleByteCorruptionRejected) {
  const std::string good = Encode(SmallPage());
  ASSERT_TRUE(DecodeKvPage(AsBytes(good)).ok());
  ASSERT_LT(good.size(), 256u);  // small enough to try every byte
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t flip : {0x01, 0x80, 0xFF}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ flip);
      const absl::Status status = DecodeKvPage(AsBytes(bad)).status();
      EXPECT_TRUE(absl::IsInvalidArgument(status) || absl::IsDataLoss(status))
          << "byte " << i << " ^ " << int{flip} << ": " << status;
    }
  }
}

TEST(KvPageTest, EveryTruncationRejected) {
  const std::string good = Encode(SmallPage());
  for (size_t length = 0; length < good.size(); ++length) {
    const absl::Status status = DecodeKvPage(AsBytes(good).first(length)).status();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << length << ": " << status;
  }
}

TEST(KvPageTest, TrailingBytesRejected) {
  const std::string good = Encode(SmallPage());
  for (size_t extra : {1, 8}) {
    std::string longer = good + std::string(extra, '\0');
    const absl::Status status = DecodeKvPage(AsBytes(longer)).status();
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  }
}

TEST(KvPageTest, WrongVersionAndMagicRejected) {
  std::string page = Encode(SmallPage());
  Poke<uint32_t>(page, kVersionOffset, kKvPageVersion + 1);
  Reseal(page, SmallPage().header.layout);
  absl::Status status = DecodeKvPage(AsBytes(page)).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_NE(status.message().find(absl::StrCat("version ", kKvPageVersion + 1, " unsupported")),
            absl::string_view::npos)
      << status;

  page = Encode(SmallPage());
  page[0] = 'X';
  Reseal(page, SmallPage().header.layout);
  status = DecodeKvPage(AsBytes(page)).status();
  EXPECT_NE(status.message().find("magic"), absl::string_view::npos) << status;
}

// Token retention's positions: any strictly increasing run survives the round trip; the encoder
// refuses others, the decoder refuses them and nonzero positions beyond the valid slots.
TEST(KvPageTest, PositionsRoundTripAndTheirRules) {
  Page page = SmallPage();  // page size 4, 2 valid slots; K with 3 heads, V with 2
  page.header.positions = {7, 1000};
  ExpectRoundTrip(page);
  for (const std::vector<int32_t>& bad :
       std::vector<std::vector<int32_t>>{{5, 5}, {6, 2}, {-1, 3}, {1}, {1, 2, 3}}) {
    page.header.positions = bad;
    EXPECT_TRUE(absl::IsInvalidArgument(EncodeKvPage(page.header, page.k, page.v).status()));
  }
  page.header.positions = {7, 1000};
  const size_t positions_offset = kKElementOffset + (4 + 2 * 3) + (4 + 2 * 2);
  std::string bytes = Encode(page);
  Poke<int32_t>(bytes, positions_offset + 4, 7);  // not after slot 0's
  Reseal(bytes, SmallPage().header.layout);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeKvPage(AsBytes(bytes)).status()));
  bytes = Encode(page);
  Poke<int32_t>(bytes, positions_offset + 8, 1001);  // slot 2 carries nothing
  Reseal(bytes, SmallPage().header.layout);
  const absl::Status status = DecodeKvPage(AsBytes(bytes)).status();
  EXPECT_NE(status.message().find("nonzero position"), absl::string_view::npos) << status;
}

// Token retention's score biases: finite values ≥ 0 survive the round trip; the encoder refuses
// others, the decoder refuses them and nonzero biases beyond the valid slots.
TEST(KvPageTest, ScoreBiasesRoundTripAndTheirRules) {
  Page page = SmallPage();  // page size 4, 2 valid slots; K with 3 heads, V with 2
  page.header.score_biases = {0.0f, 1.2345f};
  ExpectRoundTrip(page);
  for (const std::vector<float>& bad : std::vector<std::vector<float>>{
           {-0.5f, 1.0f}, {std::nanf(""), 0.0f}, {0.0f, INFINITY}, {1.0f}, {1.0f, 2.0f, 3.0f}}) {
    page.header.score_biases = bad;
    EXPECT_TRUE(absl::IsInvalidArgument(EncodeKvPage(page.header, page.k, page.v).status()));
  }
  page.header.score_biases = {0.0f, 1.2345f};
  const size_t biases_offset = kKElementOffset + (4 + 2 * 3) + (4 + 2 * 2) + 4 * 4;
  std::string bytes = Encode(page);
  Poke<float>(bytes, biases_offset + 4, -1.0f);
  Reseal(bytes, SmallPage().header.layout);
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeKvPage(AsBytes(bytes)).status()));
  bytes = Encode(page);
  Poke<float>(bytes, biases_offset + 8, 0.5f);  // slot 2 carries nothing
  Reseal(bytes, SmallPage().header.layout);
  const absl::Status status = DecodeKvPage(AsBytes(bytes)).status();
  EXPECT_NE(status.message().find("nonzero score bias"), absl::string_view::npos) << status;
}

TEST(KvPageTest, ChecksumMismatchIsDataLoss) {
  std::string page = Encode(SmallPage());
  page[page.size() - 20] ^= 0x10;  // an element byte of V
  const absl::Status status = DecodeKvPage(AsBytes(page)).status();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_NE(status.message().find("request 42"), absl::string_view::npos) << status;
}

// The head (header, K and the head checksum) verifies alone, so a receiver that leaves V in the
// store still refuses a torn K; damage to V shows only in the whole page's checksum.
TEST(KvPageTest, TheHeadChecksumCoversTheHeaderAndK) {
  const Page page = SmallPage();
  const std::string good = Encode(page);
  const size_t head = static_cast<size_t>(KvPageVOffset(page.header.layout));
  ASSERT_TRUE(DecodeKvPageHead(AsBytes(good).first(head)).ok());
  std::string torn_k = good;
  torn_k[static_cast<size_t>(KvPageKOffset(page.header.layout))] ^= 0x02;
  absl::Status status = DecodeKvPageHead(AsBytes(torn_k).first(head)).status();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_TRUE(absl::IsDataLoss(DecodeKvPage(AsBytes(torn_k)).status()));
  std::string torn_header = good;
  torn_header[kCacheLayerOffset] ^= 0x01;
  EXPECT_TRUE(absl::IsDataLoss(DecodeKvPageHead(AsBytes(torn_header).first(head)).status()));
  std::string torn_v = good;
  torn_v[good.size() - 20] ^= 0x10;
  EXPECT_TRUE(DecodeKvPageHead(AsBytes(torn_v).first(head)).ok());
  EXPECT_TRUE(absl::IsDataLoss(DecodeKvPage(AsBytes(torn_v)).status()));
  // A fixed trailing checksum does not hide a torn head either.
  Poke(torn_k, good.size() - sizeof(uint64_t),
       Xxh64(AsBytes(torn_k).first(good.size() - sizeof(uint64_t))));
  EXPECT_TRUE(absl::IsDataLoss(DecodeKvPage(AsBytes(torn_k)).status()));
}

// Each V head's checksum sits in the header (covered by the head checksum), so a value tier that
// fetches one head alone can verify it: it equals KvHeadChecksum over the head's scales and rows,
// and a page whose V changed under resealed page checksums is still refused.
TEST(KvPageTest, VHeadChecksumsVerifyEachHeadAlone) {
  const Page page = SmallPage();
  const std::string good = Encode(page);
  const KvLayerLayout& layout = page.header.layout;
  const size_t head = static_cast<size_t>(KvPageVOffset(layout));
  absl::StatusOr<KvPageView> view = DecodeKvPageHead(AsBytes(good).first(head));
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ(view->header.v_head_checksums.size(), 2u);
  const auto* v = reinterpret_cast<const uint8_t*>(good.data()) + head;
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(view->header.v_head_checksums[g], KvHeadChecksum(layout.v, g, v)) << "head " << g;
  }
  EXPECT_NE(view->header.v_head_checksums[0], view->header.v_head_checksums[1]);
  // One V row byte of head 1 and one scale byte of head 0 changed, both page checksums resealed:
  // only the changed head's checksum disagrees, and the whole-page decoder refuses the page.
  for (const int64_t offset : {layout.v.row_offset(1, 0), layout.v.scale_offset(0)}) {
    std::string torn = good;
    torn[head + static_cast<size_t>(offset)] ^= 0x01;
    Reseal(torn, layout);
    const auto* torn_v = reinterpret_cast<const uint8_t*>(torn.data()) + head;
    const int changed = offset == layout.v.scale_offset(0) ? 0 : 1;
    EXPECT_NE(KvHeadChecksum(layout.v, changed, torn_v), view->header.v_head_checksums[changed]);
    EXPECT_EQ(KvHeadChecksum(layout.v, 1 - changed, torn_v),
              view->header.v_head_checksums[1 - changed]);
    absl::Status status = DecodeKvPage(AsBytes(torn)).status();
    EXPECT_TRUE(absl::IsDataLoss(status)) << status;
    EXPECT_NE(status.message().find("V head checksum"), std::string::npos) << status;
  }
  // The header's checksums are ignored on input: the encoder computes them.
  Page claimed = page;
  claimed.header.v_head_checksums = {1, 2};
  EXPECT_EQ(Encode(claimed), good);
}

TEST(KvPageTest, HeaderFieldsOutOfRangeRejected) {
  struct Patch {
    size_t offset;
    int32_t value;
    int bytes;  // 1, 2 or 4
  };
  const Patch patches[] = {
      {kNumTokensOffset, 0, 4},    {kNumTokensOffset, 5, 4},   {kPageSizeOffset, 0, 4},
      {kPageSizeOffset, 70000, 4}, {kKElementOffset, 7, 1},    {kKElementOffset + 1, 0, 1},
      {kKFirstDimOffset, 4097, 2}, {kCacheLayerOffset, -1, 4}, {kPageIndexOffset, -5, 4},
  };
  for (const Patch& patch : patches) {
    std::string page = Encode(SmallPage());
    if (patch.bytes == 1) Poke(page, patch.offset, static_cast<uint8_t>(patch.value));
    if (patch.bytes == 2) Poke(page, patch.offset, static_cast<uint16_t>(patch.value));
    if (patch.bytes == 4) Poke(page, patch.offset, patch.value);
    Reseal(page, SmallPage().header.layout);
    const absl::Status status = DecodeKvPage(AsBytes(page)).status();
    EXPECT_TRUE(absl::IsInvalidArgument(status))
        << "offset " << patch.offset << " = " << patch.value << ": " << status;
  }
}

// Decodes `page` with the float at section byte `offset` of K replaced, checksum fixed.
absl::Status DecodeWithKFloat(const Page& page, int64_t offset, float value) {
  std::string bytes = Encode(page);
  const size_t k_start = static_cast<size_t>(KvPageKOffset(page.header.layout));
  Poke(bytes, k_start + offset, value);
  Reseal(bytes, page.header.layout);
  return DecodeKvPage(AsBytes(bytes)).status();
}

TEST(KvPageTest, ContentRulesEnforcedByDecoderAndEncoder) {
  const Page e4m3 = SmallPage();
  const Page f32 = MakePage(Section(4, {2, 3}, KvElement::kF32, KvScaleMode::kNone),
                            Section(4, {2, 3}, KvElement::kF32, KvScaleMode::kNone), 2);
  const KvSectionLayout& k = e4m3.header.layout.k;
  struct Case {
    const Page* page;
    int64_t offset;  // into the K section
    float value;
  };
  const Case cases[] = {
      {&e4m3, k.scale_offset(1) + 4, 0.0f},  // head 1, slot 1 scale
      {&e4m3, k.scale_offset(0), -1.0f},
      {&e4m3, k.scale_offset(2), kNaN},
      {&e4m3, k.scale_offset(2) + 4, std::numeric_limits<float>::infinity()},
      {&f32, f32.header.layout.k.row_offset(1, 1), kNaN},
      {&f32, f32.header.layout.k.row_offset(0, 0), -std::numeric_limits<float>::infinity()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "offset " << c.offset << " = " << c.value);
    EXPECT_TRUE(absl::IsInvalidArgument(DecodeWithKFloat(*c.page, c.offset, c.value)));
    Page bad = *c.page;
    std::memcpy(&bad.k[c.offset], &c.value, 4);
    EXPECT_TRUE(absl::IsInvalidArgument(EncodeKvPage(bad.header, bad.k, bad.v).status()));
  }
  // A scale of an unused slot and a row of an unused slot must be zero on the wire.
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeWithKFloat(e4m3, k.scale_offset(0) + 12, 1.0f)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(DecodeWithKFloat(f32, f32.header.layout.k.row_offset(1, 3), 1.0f)));
}

TEST(KvPageTest, NaNE4M3CodeRejected) {
  Page page = SmallPage();
  page.k[page.header.layout.k.row_offset(2, 1)] = 0xFF;
  EXPECT_TRUE(absl::IsInvalidArgument(EncodeKvPage(page.header, page.k, page.v).status()));
}

TEST(KvPageTest, EncoderRejectsBadHeaders) {
  const Page good = SmallPage();
  auto rejects = [](const Page& page) {
    return absl::IsInvalidArgument(EncodeKvPage(page.header, page.k, page.v).status());
  };
  Page bad = good;
  bad.header.num_tokens = 0;
  EXPECT_TRUE(rejects(bad));
  bad.header.num_tokens = 5;
  EXPECT_TRUE(rejects(bad));
  bad = good;
  bad.header.cache_layer = -1;
  EXPECT_TRUE(rejects(bad));
  bad = good;
  bad.header.layout.v = Section(8, {1, 2}, KvElement::kE4M3, KvScaleMode::kPerPageHead);
  bad.v.resize(static_cast<size_t>(bad.header.layout.v.bytes()));
  EXPECT_TRUE(rejects(bad));
  bad = good;
  bad.k.pop_back();
  EXPECT_TRUE(rejects(bad));
  bad = good;
  bad.header.layout.k = KvSectionLayout();
  EXPECT_TRUE(rejects(bad));
}

}  // namespace
}  // namespace pdserve
