// WriteKvRow / ReadKvRow (core/kv/kv_row_codec.h) on sections laid out by KvSectionLayout:
//   - f32: the round trip is exact bit for bit (−0, subnormals, ±∞, NaN included) and a write
//     touches only its row's bytes.
//   - f16: nearest-even rounding, saturation at ±65504, NaN kept, only the row touched.
//   - FP8 per token: scale = amax/448 in the slot's scale, codes = QuantizeE4M3Reference, the
//     round trip within one e4m3 rounding (2^-4 relative, 2^-10·scale absolute near 0), the amax
//     element back to within an ulp; only the row and its scale touched; all-zero rows.
//   - FP8 per page: rows written in slot order; a later row with a larger amax raises the scale
//     (by a power of two) and re-encodes the earlier rows, which stay within one rounding of their
//     original values; a smaller one changes nothing; the scale never decreases within a page and
//     slot 0 starts afresh; heads are independent.
#include "core/kv/kv_row_codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/kv/kv_layout.h"
#include "core/tensor/float16.h"
#include "gtest/gtest.h"
#include "kernels/fp8.h"

namespace pdserve {
namespace {

KvSectionLayout Layout(int page_size, std::vector<int> dims, KvElement element,
                       KvScaleMode scales) {
  EXPECT_TRUE(KvSectionLayout::Validate(page_size, dims, element, scales).ok());
  return KvSectionLayout(page_size, std::move(dims), element, scales);
}

// Section bytes filled with a recognizable pattern, as a float-aligned buffer.
std::vector<uint8_t> Section(const KvSectionLayout& layout, uint8_t filler = 0xA5) {
  return std::vector<uint8_t>(static_cast<size_t>(layout.bytes()), filler);
}

float Scale(const KvSectionLayout& layout, const std::vector<uint8_t>& section, int head,
            int index = 0) {
  float scale;
  std::memcpy(&scale, section.data() + layout.scale_offset(head) + int64_t{index} * 4, 4);
  return scale;
}

std::vector<float> Read(const KvSectionLayout& layout, const std::vector<uint8_t>& section,
                        int head, int slot) {
  std::vector<float> row(layout.dim(head));
  ReadKvRow(layout, section.data(), head, slot, row.data());
  return row;
}

// Bytes that differ between two snapshots must all lie in [begin, end) ranges given.
void ExpectOnlyChanged(const std::vector<uint8_t>& before, const std::vector<uint8_t>& after,
                       std::vector<std::pair<int64_t, int64_t>> allowed) {
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    if (before[i] == after[i]) continue;
    bool ok = false;
    for (const auto& [begin, end] : allowed) {
      ok = ok || (static_cast<int64_t>(i) >= begin && static_cast<int64_t>(i) < end);
    }
    EXPECT_TRUE(ok) << "byte " << i << " changed outside the row and its scale";
  }
}

float AbsMax(const std::vector<float>& row) {
  float amax = 0.0f;
  for (float x : row) amax = std::max(amax, std::fabs(x));
  return amax;
}

// One e4m3 rounding of x at `scale`: half an ulp, 2^-4·|x| in the normal range, else half the
// smallest subnormal 2^-9·scale; a hair more for the fp32 division and product.
double OneRounding(float x, float scale) {
  return (std::ldexp(std::fabs(double{x}), -4) + std::ldexp(double{scale}, -10)) * (1 + 1e-6);
}

// After re-encoding at a grown scale: the first rounding, plus for values that land in the new
// scale's subnormal range a second one (the first was at most 2^-10 of a scale at most half the
// new one).
double ReencodedRounding(float x, float scale) {
  return OneRounding(x, scale) + std::ldexp(double{scale}, -11);
}

// Rows of random signs and magnitudes spread over several decades.
std::vector<float> RandomRow(std::mt19937& rng, int dim, float magnitude) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decades(-3.0f, 0.0f);
  std::vector<float> row(dim);
  for (float& x : row) x = magnitude * normal(rng) * std::pow(10.0f, decades(rng));
  return row;
}

// ---------------------------------------------------------------------------------------------
// f32

TEST(KvRowCodecF32Test, RoundTripIsExactAndTouchesOnlyTheRow) {
  const KvSectionLayout layout = Layout(5, {8, 3, 0, 17}, KvElement::kF32, KvScaleMode::kNone);
  std::vector<uint8_t> section = Section(layout);
  std::mt19937 rng(1);
  const float specials[] = {-0.0f,
                            0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::min(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::bit_cast<float>(0x7FA12345u)};  // a NaN with a payload
  std::vector<std::vector<std::vector<float>>> written(4, std::vector<std::vector<float>>(5));
  for (int slot = 0; slot < 5; ++slot) {
    for (int g = 0; g < 4; ++g) {
      std::vector<float> row = RandomRow(rng, layout.dim(g), 100.0f);
      for (size_t i = 0; i < row.size(); ++i) {
        if ((slot + g + i) % 3 == 0) row[i] = specials[(slot * 7 + g * 3 + i) % 8];
      }
      const std::vector<uint8_t> before = section;
      WriteKvRow(layout, section.data(), g, slot, row.data());
      const int64_t at = layout.row_offset(g, slot);
      ExpectOnlyChanged(before, section, {{at, at + 4 * layout.dim(g)}});
      written[g][slot] = row;
    }
  }
  for (int slot = 0; slot < 5; ++slot) {
    for (int g = 0; g < 4; ++g) {
      const std::vector<float> got = Read(layout, section, g, slot);
      ASSERT_EQ(got.size(), written[g][slot].size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(written[g][slot][i]))
            << "head " << g << " slot " << slot << " element " << i;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// f16

// Each element round trips as F32ToF16 (nearest even) of it, saturated to ±65504; NaN stays NaN;
// widths that are not a multiple of the vector (8) take the scalar tail; a write touches only its
// row.
TEST(KvRowCodecF16Test, RoundsToNearestEvenSaturatesAndTouchesOnlyTheRow) {
  const KvSectionLayout layout = Layout(3, {8, 3, 0, 21}, KvElement::kF16, KvScaleMode::kNone);
  EXPECT_EQ(layout.element_bytes(), 2);
  EXPECT_EQ(layout.head_offset(1), 3 * 8 * 2);
  std::vector<uint8_t> section = Section(layout);
  std::mt19937 rng(2);
  const float specials[] = {-0.0f,
                            1e-8f,
                            -6.1e-5f,
                            65504.0f,
                            65520.0f,
                            1e30f,
                            -1e9f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (int slot = 0; slot < 3; ++slot) {
    for (int g = 0; g < 4; ++g) {
      std::vector<float> row = RandomRow(rng, layout.dim(g), 10.0f);
      for (size_t i = 0; i < row.size(); ++i) {
        if ((slot + g + i) % 2 == 0) row[i] = specials[(slot * 5 + g * 3 + i) % 9];
      }
      const std::vector<uint8_t> before = section;
      WriteKvRow(layout, section.data(), g, slot, row.data());
      const int64_t at = layout.row_offset(g, slot);
      ExpectOnlyChanged(before, section, {{at, at + 2 * layout.dim(g)}});
      const std::vector<float> got = Read(layout, section, g, slot);
      for (size_t i = 0; i < row.size(); ++i) {
        if (std::isnan(row[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << i;
          continue;
        }
        const float saturated = std::clamp(row[i], -65504.0f, 65504.0f);
        EXPECT_EQ(got[i], F16ToF32(F32ToF16(saturated)))
            << "head " << g << " slot " << slot << " element " << i << " wrote " << row[i];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// FP8 per token

TEST(KvRowCodecPerTokenTest, ScaleCodesAndRoundTrip) {
  const KvSectionLayout layout =
      Layout(4, {64, 5, 0, 16}, KvElement::kE4M3, KvScaleMode::kPerTokenHead);
  std::vector<uint8_t> section = Section(layout);
  std::mt19937 rng(2);
  const float magnitudes[] = {1.0f, 1e-3f, 300.0f, 7.5f};
  for (int slot = 0; slot < 4; ++slot) {
    for (int g = 0; g < 4; ++g) {
      SCOPED_TRACE(testing::Message() << "head " << g << " slot " << slot);
      const std::vector<float> row = RandomRow(rng, layout.dim(g), magnitudes[(slot + g) % 4]);
      const std::vector<uint8_t> before = section;
      WriteKvRow(layout, section.data(), g, slot, row.data());
      const int64_t at = layout.row_offset(g, slot);
      const int64_t scale_at = layout.scale_offset(g) + int64_t{slot} * 4;
      ExpectOnlyChanged(before, section, {{at, at + layout.dim(g)}, {scale_at, scale_at + 4}});

      const float amax = AbsMax(row);
      const float scale = Scale(layout, section, g, slot);
      if (layout.dim(g) == 0) {
        EXPECT_EQ(scale, 1.0f);  // nothing to cover
        continue;
      }
      EXPECT_EQ(scale, amax / 448.0f);
      EXPECT_EQ(scale, kernels::E4M3ScaleFor(amax));
      std::vector<uint8_t> codes(layout.dim(g));
      kernels::QuantizeE4M3Reference(row.data(), layout.dim(g), scale, codes.data());
      EXPECT_EQ(std::memcmp(codes.data(), section.data() + at, codes.size()), 0);
      const std::vector<float> got = Read(layout, section, g, slot);
      for (int i = 0; i < layout.dim(g); ++i) {
        EXPECT_LE(std::fabs(double{got[i]} - row[i]), OneRounding(row[i], scale))
            << "element " << i << ": " << row[i] << " read back as " << got[i];
        if (std::fabs(row[i]) == amax) {
          EXPECT_NEAR(std::fabs(got[i]), amax, amax * 2.5e-7) << "the amax element";
        }
      }
    }
  }
  // Rows written earlier are untouched by later slots: re-read slot 0 of head 0 against its codes.
  std::vector<float> again(64);
  ReadKvRow(layout, section.data(), 0, 0, again.data());
  std::vector<float> direct(64);
  kernels::DequantizeE4M3Reference(section.data() + layout.row_offset(0, 0), 64,
                                   Scale(layout, section, 0, 0), direct.data());
  EXPECT_EQ(std::memcmp(again.data(), direct.data(), 64 * 4), 0);
}

TEST(KvRowCodecPerTokenTest, ZeroRowGetsScaleOneAndReadsBackZero) {
  const KvSectionLayout layout = Layout(2, {9}, KvElement::kE4M3, KvScaleMode::kPerTokenHead);
  std::vector<uint8_t> section = Section(layout);
  const std::vector<float> zeros(9, 0.0f);
  WriteKvRow(layout, section.data(), 0, 1, zeros.data());
  EXPECT_EQ(Scale(layout, section, 0, 1), 1.0f);
  for (float x : Read(layout, section, 0, 1)) EXPECT_EQ(x, 0.0f);
  // The other slot's scale and row keep the filler.
  EXPECT_EQ(section[layout.scale_offset(0)], 0xA5);
  EXPECT_EQ(section[layout.row_offset(0, 0)], 0xA5);
}

// ---------------------------------------------------------------------------------------------
// FP8 per page

// Rows in slot order with growing amax: each growth raises the scale and re-encodes every earlier
// row, which stays within one rounding (at the current scale) of its original values, but for
// the values the grown scale makes subnormal.
TEST(KvRowCodecPerPageTest, GrowingAmaxReencodesEarlierRows) {
  const int page_size = 8, dim = 32;
  const KvSectionLayout layout =
      Layout(page_size, {dim, 4}, KvElement::kE4M3, KvScaleMode::kPerPageHead);
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<uint8_t> section = Section(layout);
    std::vector<std::vector<float>> rows;
    float max_amax = 0.0f, previous_scale = 0.0f;
    int growths = 0;
    std::vector<uint8_t> slot0_codes;
    for (int slot = 0; slot < page_size; ++slot) {
      SCOPED_TRACE(testing::Message() << "trial " << trial << " slot " << slot);
      // Mostly growing, by non-power-of-two factors, sometimes shrinking.
      const float magnitude =
          std::pow(1.7f, static_cast<float>(slot)) * (slot % 3 == 2 ? 0.2f : 1.0f);
      rows.push_back(RandomRow(rng, dim, magnitude));
      const std::vector<uint8_t> before = section;
      WriteKvRow(layout, section.data(), 0, slot, rows.back().data());
      // Head 1 untouched: only head 0's scale and rows [0, slot] may change.
      ExpectOnlyChanged(before, section,
                        {{layout.scale_offset(0), layout.scale_offset(0) + 4},
                         {layout.row_offset(0, 0), layout.row_offset(0, slot + 1)}});
      max_amax = std::max(max_amax, AbsMax(rows.back()));
      const float scale = Scale(layout, section, 0);
      if (slot == 0) {
        EXPECT_EQ(scale, kernels::E4M3ScaleFor(max_amax));
        slot0_codes.assign(section.begin() + layout.row_offset(0, 0),
                           section.begin() + layout.row_offset(0, 1));
      } else {
        EXPECT_GE(scale, previous_scale) << "the scale decreased within the page";
        if (scale > previous_scale) ++growths;
        // It covers every row so far, by less than a factor 2.
        EXPECT_GE(scale * 448.0f, max_amax * (1 - 1e-6f));
        EXPECT_LT(scale, 2.0f * kernels::E4M3ScaleFor(max_amax));
      }
      previous_scale = scale;
      for (int r = 0; r <= slot; ++r) {
        const std::vector<float> got = Read(layout, section, 0, r);
        for (int i = 0; i < dim; ++i) {
          ASSERT_LE(std::fabs(double{got[i]} - rows[r][i]), ReencodedRounding(rows[r][i], scale))
              << "row " << r << " element " << i << ": " << rows[r][i] << " read back as "
              << got[i];
        }
      }
    }
    EXPECT_GE(growths, 2);
    // Slot 0 was re-encoded: its codes changed as the scale grew.
    EXPECT_NE(std::memcmp(slot0_codes.data(), section.data() + layout.row_offset(0, 0), dim), 0);
  }
}

// Re-encoding is exact: the values of an earlier row are the same after a growth, except those
// that fall into the new scale's subnormal range.
TEST(KvRowCodecPerPageTest, ReencodingKeepsValuesThatStayNormal) {
  const KvSectionLayout layout = Layout(4, {64}, KvElement::kE4M3, KvScaleMode::kPerPageHead);
  std::vector<uint8_t> section = Section(layout);
  std::mt19937 rng(4);
  const std::vector<float> first = RandomRow(rng, 64, 1.0f);
  WriteKvRow(layout, section.data(), 0, 0, first.data());
  const std::vector<float> before = Read(layout, section, 0, 0);
  const std::vector<float> big = RandomRow(rng, 64, 37.0f);
  WriteKvRow(layout, section.data(), 0, 1, big.data());
  const float scale = Scale(layout, section, 0);
  ASSERT_GT(scale, kernels::E4M3ScaleFor(AbsMax(first)));
  const std::vector<float> after = Read(layout, section, 0, 0);
  int kept = 0;
  for (int i = 0; i < 64; ++i) {
    if (std::fabs(before[i]) >= std::ldexp(scale, -6)) {
      EXPECT_EQ(after[i], before[i]) << "element " << i;
      ++kept;
    } else {
      EXPECT_LE(std::fabs(after[i] - before[i]), std::ldexp(scale, -10) * (1 + 1e-6));
    }
  }
  EXPECT_GT(kept, 16);
}

TEST(KvRowCodecPerPageTest, SmallerLaterRowChangesNothingElse) {
  const KvSectionLayout layout = Layout(4, {16}, KvElement::kE4M3, KvScaleMode::kPerPageHead);
  std::vector<uint8_t> section = Section(layout);
  std::mt19937 rng(5);
  const std::vector<float> big = RandomRow(rng, 16, 50.0f);
  WriteKvRow(layout, section.data(), 0, 0, big.data());
  const std::vector<uint8_t> before = section;
  const float scale = Scale(layout, section, 0);
  const std::vector<float> small = RandomRow(rng, 16, 0.5f);
  WriteKvRow(layout, section.data(), 0, 1, small.data());
  EXPECT_EQ(Scale(layout, section, 0), scale);
  ExpectOnlyChanged(before, section, {{layout.row_offset(0, 1), layout.row_offset(0, 2)}});
  const std::vector<float> got = Read(layout, section, 0, 1);
  for (int i = 0; i < 16; ++i) {
    EXPECT_LE(std::fabs(double{got[i]} - small[i]), OneRounding(small[i], scale));
  }
}

// Writing slot 0 starts the page afresh: the scale follows the new first row, down as well as up,
// whatever the page held before (the pool reuses pages without clearing them).
TEST(KvRowCodecPerPageTest, SlotZeroResetsTheScale) {
  const KvSectionLayout layout = Layout(4, {8, 8}, KvElement::kE4M3, KvScaleMode::kPerPageHead);
  std::vector<uint8_t> section = Section(layout);
  std::mt19937 rng(6);
  for (int slot = 0; slot < 4; ++slot) {
    const std::vector<float> row = RandomRow(rng, 8, 1000.0f);
    WriteKvRow(layout, section.data(), 0, slot, row.data());
    WriteKvRow(layout, section.data(), 1, slot, row.data());
  }
  const float big_scale = Scale(layout, section, 0);
  const float other_head = Scale(layout, section, 1);
  const std::vector<float> small = RandomRow(rng, 8, 0.01f);
  WriteKvRow(layout, section.data(), 0, 0, small.data());
  EXPECT_EQ(Scale(layout, section, 0), kernels::E4M3ScaleFor(AbsMax(small)));
  EXPECT_LT(Scale(layout, section, 0), big_scale);
  EXPECT_EQ(Scale(layout, section, 1), other_head) << "head 1's scale changed";
  const std::vector<float> got = Read(layout, section, 0, 0);
  for (int i = 0; i < 8; ++i) {
    EXPECT_LE(std::fabs(double{got[i]} - small[i]),
              OneRounding(small[i], Scale(layout, section, 0)));
  }
  // A page whose stale scale is garbage (NaN, 0) is reset by slot 0 too.
  for (float stale : {std::numeric_limits<float>::quiet_NaN(), 0.0f, 1e30f}) {
    std::memcpy(section.data() + layout.scale_offset(0), &stale, 4);
    WriteKvRow(layout, section.data(), 0, 0, small.data());
    EXPECT_EQ(Scale(layout, section, 0), kernels::E4M3ScaleFor(AbsMax(small)));
  }
}

// An all-zero first row gets scale 1; a larger later row still raises it to cover itself.
// While every earlier row is zero nothing pins the page's scale: the next row sets it to its own
// amax/448, larger or smaller than the zero row's 1.
TEST(KvRowCodecPerPageTest, ZeroRowsLeaveTheScaleFree) {
  const KvSectionLayout layout = Layout(4, {8}, KvElement::kE4M3, KvScaleMode::kPerPageHead);
  for (float magnitude : {1000.0f, 0.01f}) {
    SCOPED_TRACE(testing::Message() << "magnitude " << magnitude);
    std::vector<uint8_t> section = Section(layout);
    const std::vector<float> zeros(8, 0.0f);
    WriteKvRow(layout, section.data(), 0, 0, zeros.data());
    WriteKvRow(layout, section.data(), 0, 1, zeros.data());
    EXPECT_EQ(Scale(layout, section, 0), 1.0f);
    std::mt19937 rng(9);
    const std::vector<float> row = RandomRow(rng, 8, magnitude);
    WriteKvRow(layout, section.data(), 0, 2, row.data());
    const float scale = Scale(layout, section, 0);
    EXPECT_EQ(scale, kernels::E4M3ScaleFor(AbsMax(row)));
    for (int slot : {0, 1}) {
      for (float x : Read(layout, section, 0, slot)) EXPECT_EQ(x, 0.0f);
    }
    const std::vector<float> got = Read(layout, section, 0, 2);
    for (int i = 0; i < 8; ++i) {
      EXPECT_LE(std::fabs(double{got[i]} - row[i]), OneRounding(row[i], scale)) << i;
    }
  }
}

// Token retention's compaction: kept rows (every head, with their FP8 scales) land in order at the
// front of a shuffled page list, across page boundaries, unchanged — but for per-page FP8, whose
// rows are quantized once more under their new page's scale.
TEST(CompactKvRowsTest, MovesKeptRowsToTheFrontInOrder) {
  for (KvScaleMode scales :
       {KvScaleMode::kNone, KvScaleMode::kPerTokenHead, KvScaleMode::kPerPageHead}) {
    for (KvElement element : {KvElement::kF32, KvElement::kF16, KvElement::kE4M3}) {
      if ((element == KvElement::kE4M3) != (scales != KvScaleMode::kNone)) continue;
      const KvSectionLayout layout = Layout(4, {3, 0, 5}, element, scales);
      const std::vector<int32_t> pages = {2, 0, 3, 1};  // 16 tokens
      std::vector<std::vector<uint8_t>> pool(4, Section(layout));
      std::mt19937 rng(7);
      for (int t = 0; t < 16; ++t) {
        for (int g = 0; g < 3; ++g) {
          WriteKvRow(layout, pool[pages[t / 4]].data(), g, t % 4,
                     RandomRow(rng, layout.dim(g), 1.0f + t).data());
        }
      }
      auto read_token = [&](int t, int g) { return Read(layout, pool[pages[t / 4]], g, t % 4); };
      const std::vector<int> kept = {0, 3, 5, 6, 11, 15};
      std::vector<std::vector<float>> expected;
      for (int t : kept) {
        for (int g = 0; g < 3; ++g) expected.push_back(read_token(t, g));
      }
      CompactKvRows(layout, pages, kept, [&](int32_t page) { return pool[page].data(); });
      for (int i = 0, e = 0; i < static_cast<int>(kept.size()); ++i) {
        for (int g = 0; g < 3; ++g, ++e) {
          const std::vector<float> got = read_token(i, g);
          if (scales != KvScaleMode::kPerPageHead) {
            EXPECT_EQ(got, expected[e]) << KvElementName(element) << " row " << i;
            continue;
          }
          // One more e4m3 rounding: 2^-4 of the value (normal codes; within a row's amax / 8), or
          // a subnormal step of the new page's scale (< 1e-4 here).
          const float bound = AbsMax(expected[e]) / 8 + 1e-3f;
          for (int d = 0; d < layout.dim(g); ++d) {
            EXPECT_NEAR(got[d], expected[e][d], bound) << "per-page row " << i << " head " << g;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace pdserve
