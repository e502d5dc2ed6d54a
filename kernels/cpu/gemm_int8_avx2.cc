// The int8 GEMM's packing and activation quantizer, and its AVX2 tiles (gemm_kernels.h) on the
// panels it packs per call and on PanelMatrix's Q4_0, Q8_0 and K-quant panels: a tile of up to 6 x
// rows × 8 weight rows (of 1–2 x rows × a whole panel's 16, so that decode reads each weight line
// once) sums a block's vpmaddubsw products in int16 (codes ≤ 15 keep 8 steps below 2^15, codes ≤ 31
// 4, codes ≤ 63 2), widens them with vpmaddwd and applies the block's (or 16-element unit's) scales
// in fp32, 8 weight rows' at once; codes up to 255 (Q8_0) take the signed form, whose int16 pairs
// hold one step.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/tensor/float16.h"
#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/quant_prefetch.h"
#include "kernels/cpu_features.h"

namespace pdserve::kernels {
namespace {

using quant::kQK;

constexpr size_t kCodesBytes = 8 * 64;
constexpr int kTileMr = 6, kHalfNr = 8;
// x rows up to which a tile spans a whole panel (both halves, each weight line read once: decode),
// beyond which tiles of kTileMr rows take a half panel each.
constexpr int kWideTileMr = 2;

// Lane j of the result: the int32 at base[j · 8 + s] (row j's codes 4s..4s+3).
__m256i Step(const uint8_t* rows, int s) {
  const __m256i index =
      _mm256_add_epi32(_mm256_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56), _mm256_set1_epi32(s));
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(rows), index, 4);
}

// x row i's codes 4s..4s+3 of block b in every lane.
[[gnu::always_inline]] inline __m256i XCodes(const ActBlock32* x, int64_t blocks, int i, int64_t b,
                                             int s) {
  int32_t codes;
  std::memcpy(&codes, x[i * blocks + b].qs + 4 * s, sizeof(codes));
  return _mm256_set1_epi32(codes);
}

// Half h (8 of 16) of the f16 values at `at`, as floats.
[[gnu::always_inline]] inline __m256 HalfF16s(const uint8_t* at, int h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at) + h));
}

// Widens int16 sums into dot (pairs of them, exact in int32).
template <int MR>
[[gnu::always_inline]] inline void Widen(const __m256i (&dot16)[MR], __m256i (&dot)[MR]) {
  for (int i = 0; i < MR; ++i) {
    dot[i] = _mm256_add_epi32(dot[i], _mm256_madd_epi16(dot16[i], _mm256_set1_epi16(1)));
  }
}

// Adds to dot16[i] step s's products, `codes` (unsigned, row j's at lanes 4j..4j+3) times x row
// i's codes 4s..4s+3 of block b.
template <int MR>
[[gnu::always_inline]] inline void AddStep(__m256i codes, const ActBlock32* x, int64_t blocks,
                                           int64_t b, int s, __m256i (&dot16)[MR]) {
  for (int i = 0; i < MR; ++i) {
    dot16[i] = _mm256_add_epi16(dot16[i], _mm256_maddubs_epi16(codes, XCodes(x, blocks, i, b, s)));
  }
}

// The panel formats' codes, `block` the block's first byte and `h` the half panel (rows 8h..8h+7,
// bytes 32h..32h+31 of each 64-byte step or chunk): Dot adds to dot[i] the block's integer sums
// with x row i, lane j row 8h + j's. (The formats below wrap them: BlockCodes for one block a
// group.)
//
// Unsigned codes ≤ 15 (≤ 31) in 8 steps of 64 bytes: vpmaddubsw products summed in int16 over
// kSteps steps (8 for codes ≤ 15, 4 for ≤ 31: kSteps × 2 × code × 127 < 2^15).
template <int kSteps>
struct UnsignedSteps {
  static constexpr bool kSigned = false;
  template <int MR>
  [[gnu::always_inline]] static void Dot(const uint8_t* block, int h, const ActBlock32* x,
                                         int64_t blocks, int64_t b, __m256i (&dot)[MR]) {
    for (int s0 = 0; s0 < 8; s0 += kSteps) {
      __m256i dot16[MR];
      for (int i = 0; i < MR; ++i) dot16[i] = _mm256_setzero_si256();
      for (int s = s0; s < s0 + kSteps; ++s) {
        AddStep(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64 * s + 32 * h)), x,
                blocks, b, s, dot16);
      }
      Widen(dot16, dot);
    }
  }
};

// Codes up to 255 (Q8_0's, flipped to unsigned) in 8 steps of 64 bytes: with q = u − 128 (a signed
// byte), each step multiplies |q| (unsigned, ≤ 128) by x's codes given q's signs (|q_x| ≤ 127, so
// negating them never overflows): a pair of products is at most 2 · 128 · 127 < 2^15, widened to
// int32 every step; the sums are Σ q·q_x, exact. (Splitting u into nibbles summed in int16 over
// the block ran 0.77× as fast on a Xeon: twice the accumulators spill.)
struct SignedSteps {
  static constexpr bool kSigned = true;
  template <int MR>
  [[gnu::always_inline]] static void Dot(const uint8_t* block, int h, const ActBlock32* x,
                                         int64_t blocks, int64_t b, __m256i (&dot)[MR]) {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
    for (int s = 0; s < 8; ++s) {
      const __m256i q = _mm256_xor_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64 * s + 32 * h)), flip);
      const __m256i magnitude = _mm256_abs_epi8(q);
      for (int i = 0; i < MR; ++i) {
        const __m256i signed_x = _mm256_sign_epi8(XCodes(x, blocks, i, b, s), q);
        dot[i] = _mm256_add_epi32(
            dot[i],
            _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_x), _mm256_set1_epi16(1)));
      }
    }
  }
};

// PanelMatrix's Q4_0 codes: 4 chunks of 64 bytes whose low nibbles are steps 0-3 and high nibbles
// steps 4-7, summed in int16 over the block (8 products of codes ≤ 15, as UnsignedSteps<8>).
struct NibbleChunks {
  static constexpr bool kSigned = false;
  template <int MR>
  [[gnu::always_inline]] static void Dot(const uint8_t* block, int h, const ActBlock32* x,
                                         int64_t blocks, int64_t b, __m256i (&dot)[MR]) {
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    __m256i dot16[MR];
    for (int i = 0; i < MR; ++i) dot16[i] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i z =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64 * c + 32 * h));
      AddStep(_mm256_and_si256(z, nibble), x, blocks, b, c, dot16);
      AddStep(_mm256_and_si256(_mm256_srli_epi16(z, 4), nibble), x, blocks, b, c + 4, dot16);
    }
    Widen(dot16, dot);
  }
};

// The panel formats (gemm_kernels.h), in groups of kGroupBlocks 32-element blocks, kGroupBytes a
// group, each block in kUnits units of 8 / kUnits steps with a scale each: Dot<MR>(group, k, u, h,
// …) adds unit u of block k's sums for half h; a group's Scales(group) gives unit u of block k's
// 8 scales and minimums of half h; kSigned: Dot sums (u − 128)·q_x; kPrefetch: decode's tiles
// prefetch ahead (they stream the panels from memory).
//
// A format of one block a group, of one unit, with Codes's sums.
template <typename Codes>
struct BlockCodes {
  static constexpr int kGroupBlocks = 1, kUnits = 1;
  static constexpr bool kSigned = Codes::kSigned;
  template <int MR>
  [[gnu::always_inline]] static void Dot(const uint8_t* group, int, int, int h, const ActBlock32* x,
                                         int64_t blocks, int64_t b, __m256i (&dot)[MR]) {
    Codes::template Dot<MR>(group, h, x, blocks, b, dot);
  }
};

// The int8 GEMM's, packed per call: floats after the codes.
template <typename Codes>
struct U8Panels : BlockCodes<Codes> {
  static constexpr size_t kGroupBytes = kInt8PanelBlockBytes;
  static constexpr bool kPrefetch = false;  // packed by the caller, in cache
  struct Scales {
    explicit Scales(const uint8_t* group)
        : floats(reinterpret_cast<const float*>(group + kCodesBytes)) {}
    __m256 Scale(int, int, int h) const { return _mm256_loadu_ps(floats + kHalfNr * h); }
    __m256 Min(int, int, int h, __m256) const {
      return _mm256_loadu_ps(floats + kInt8GemmNr + kHalfNr * h);
    }
    const float* floats;
  };
};

// PanelMatrix's Q4_0 and Q8_0: kCodeBytes of codes, then the rows' f16 scales d; min kOffset·d.
template <typename Codes, size_t kCodeBytes, int kOffset>
struct F16ScalePanels : BlockCodes<Codes> {
  static constexpr size_t kGroupBytes = kCodeBytes + kInt8GemmNr * sizeof(uint16_t);
  static constexpr bool kPrefetch = true;
  struct Scales {
    explicit Scales(const uint8_t* group) : d(group + kCodeBytes) {}
    __m256 Scale(int, int, int h) const { return HalfF16s(d, h); }
    __m256 Min(int, int, int, __m256 scale) const {
      return _mm256_mul_ps(scale, _mm256_set1_ps(static_cast<float>(kOffset)));
    }
    const uint8_t* d;
  };
};
using Q4_0Panels = F16ScalePanels<NibbleChunks, 4 * 64, 8>;
using Q8_0Panels = F16ScalePanels<SignedSteps, 8 * 64, 128>;
static_assert(Q4_0Panels::kGroupBytes == kQ4_0PanelBlockBytes &&
              Q8_0Panels::kGroupBytes == kQ8_0PanelBlockBytes);

// PanelMatrix's K-quant formats (gemm_kernels.h): a super-block's scales first, then its codes.
// Decode's tiles prefetch them as Q4_0's, an eighth of a super-block ahead of each block (Xeon,
// PDSERVE_SIMD=avx2, 2 threads, bench_ab against no prefetch: 1B Q4_K_M decode 1.34× → 1.53× the
// per-row kernels'; a super-block's lines prefetched at once, 1.13×; 110M at 1 thread 0.70×
// without, 1.38× so).

// Q5_K's codes: NibbleChunks's with a fifth chunk whose byte 4j + i holds at bit c the fifth bit
// of step c's code and at bit 4 + c that of step c + 4's; codes ≤ 31, so int16 sums of 4 steps
// (2 chunks).
struct FiveBitChunks {
  template <int MR>
  [[gnu::always_inline]] static void Dot(const uint8_t* block, int h, const ActBlock32* x,
                                         int64_t blocks, int64_t b, __m256i (&dot)[MR]) {
    const __m256i nibble = _mm256_set1_epi8(0x0F), bit4 = _mm256_set1_epi8(0x10);
    const __m256i fifth =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 4 * 64 + 32 * h));
    for (int c0 = 0; c0 < 4; c0 += 2) {
      __m256i dot16[MR];
      for (int i = 0; i < MR; ++i) dot16[i] = _mm256_setzero_si256();
      for (int c = c0; c < c0 + 2; ++c) {
        const __m256i z =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64 * c + 32 * h));
        // Step c's fifth bit (bit c) and step c + 4's (bit 4 + c), each moved to bit 4.
        const __m128i low_shift = _mm_cvtsi32_si128(4 - c), high_shift = _mm_cvtsi32_si128(c);
        const __m256i low =
            _mm256_or_si256(_mm256_and_si256(z, nibble),
                            _mm256_and_si256(_mm256_sll_epi16(fifth, low_shift), bit4));
        const __m256i high =
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(z, 4), nibble),
                            _mm256_and_si256(_mm256_srl_epi16(fifth, high_shift), bit4));
        AddStep(low, x, blocks, b, c, dot16);
        AddStep(high, x, blocks, b, c + 4, dot16);
      }
      Widen(dot16, dot);
    }
  }
};

// Q4_K and Q5_K: the rows' d and dmin and the scale bytes as planes, then 8 blocks of nibbles as
// Q4_0's (Q5_K: and a chunk of fifth bits); block k's scale d·s_k, minimum dmin·m_k.
template <bool kFifthBit>
struct K4Panels {
  static constexpr int kGroupBlocks = 8, kUnits = 1;
  static constexpr bool kSigned = false, kPrefetch = true;
  static constexpr size_t kCodesAt = 2 * kInt8GemmNr * sizeof(uint16_t) + 12 * kInt8GemmNr;
  static constexpr size_t kBlockCodeBytes = (kFifthBit ? 5 : 4) * 64;
  static constexpr size_t kGroupBytes = kFifthBit ? kQ5_KPanelGroupBytes : kQ4_KPanelGroupBytes;
  static_assert(kGroupBytes == kCodesAt + kGroupBlocks * kBlockCodeBytes);
  template <int MR>
  [[gnu::always_inline]] static void Dot(const uint8_t* group, int k, int, int h,
                                         const ActBlock32* x, int64_t blocks, int64_t b,
                                         __m256i (&dot)[MR]) {
    const uint8_t* codes = group + kCodesAt + k * kBlockCodeBytes;
    if constexpr (kFifthBit) {
      FiveBitChunks::Dot<MR>(codes, h, x, blocks, b, dot);
    } else {
      NibbleChunks::Dot<MR>(codes, h, x, blocks, b, dot);
    }
  }
  // The 6-bit scales and minimums of all 16 rows, unpacked as quant::ScalesAndMinsK4 does from the
  // planes (byte b of row j at 64 + 16b + j): blocks 0-3 from planes 0-3 and 4-7, blocks 4-7 with
  // planes 8-11's nibbles and the top two bits of planes 0-7.
  struct Scales {
    explicit Scales(const uint8_t* group) : group(group) {
      auto plane_pair = [group](int b) {  // planes b and b + 1
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 64 + 16 * b));
      };
      const __m256i low6 = _mm256_set1_epi8(0x3F), low4 = _mm256_set1_epi8(0x0F),
                    top2 = _mm256_set1_epi8(0x30);  // bits 6-7 shifted right by 2
      for (int b = 0; b < 4; b += 2) {
        const __m256i s = plane_pair(b), m = plane_pair(4 + b), high = plane_pair(8 + b);
        Store(scales + 16 * b, _mm256_and_si256(s, low6));
        Store(mins + 16 * b, _mm256_and_si256(m, low6));
        Store(scales + 16 * (4 + b),
              _mm256_or_si256(_mm256_and_si256(high, low4),
                              _mm256_and_si256(_mm256_srli_epi16(s, 2), top2)));
        Store(mins + 16 * (4 + b),
              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(high, 4), low4),
                              _mm256_and_si256(_mm256_srli_epi16(m, 2), top2)));
      }
    }
    __m256 Scale(int k, int, int h) const {
      return _mm256_mul_ps(HalfF16s(group, h), Widen8(scales + 16 * k + kHalfNr * h));
    }
    __m256 Min(int k, int, int h, __m256) const {
      return _mm256_mul_ps(HalfF16s(group + 32, h), Widen8(mins + 16 * k + kHalfNr * h));
    }
    static void Store(uint8_t* to, __m256i v) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(to), v);
    }
    // 8 unsigned bytes as floats.
    static __m256 Widen8(const uint8_t* bytes) {
      return _mm256_cvtepi32_ps(
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes))));
    }
    const uint8_t* group;
    alignas(32) uint8_t scales[8 * kInt8GemmNr], mins[8 * kInt8GemmNr];  // block k's at 16k
  };
};

// Q6_K: the rows' d and the 16 sub-blocks' int8 scales as planes, then 8 blocks, each its codes'
// low nibbles as Q4_0's and their top two bits in two chunks; unit u of block k (sub-block 2k + u,
// 16 elements) has scale d·s and minimum 32·d·s (value = d·s·(q − 32)). Codes ≤ 63: int16 sums of
// 2 steps.
struct Q6_KPanels {
  static constexpr int kGroupBlocks = 8, kUnits = 2;
  static constexpr bool kSigned = false, kPrefetch = true;
  static constexpr size_t kCodesAt = kInt8GemmNr * sizeof(uint16_t) + 16 * kInt8GemmNr;
  static constexpr size_t kBlockCodeBytes = 6 * 64;
  static constexpr size_t kGroupBytes = kQ6_KPanelGroupBytes;
  static_assert(kGroupBytes == kCodesAt + kGroupBlocks * kBlockCodeBytes);
  // Unit u's steps 4u + c: the nibbles of chunk c (low for u = 0, high for u = 1), with bits
  // 2c, 2c + 1 of the unit's top-bits chunk as bits 4, 5.
  template <int MR>
  [[gnu::always_inline]] static void Dot(const uint8_t* group, int k, int u, int h,
                                         const ActBlock32* x, int64_t blocks, int64_t b,
                                         __m256i (&dot)[MR]) {
    const uint8_t* codes = group + kCodesAt + k * kBlockCodeBytes + 32 * h;
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30);
    const __m256i top =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 4 * 64 + 64 * u));
    const __m256i tops[4] = {_mm256_slli_epi16(top, 4), _mm256_slli_epi16(top, 2), top,
                             _mm256_srli_epi16(top, 2)};
    for (int c0 = 0; c0 < 4; c0 += 2) {
      __m256i dot16[MR];
      for (int i = 0; i < MR; ++i) dot16[i] = _mm256_setzero_si256();
      for (int c = c0; c < c0 + 2; ++c) {
        __m256i z = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * c));
        if (u == 1) z = _mm256_srli_epi16(z, 4);
        AddStep(_mm256_or_si256(_mm256_and_si256(z, low4), _mm256_and_si256(tops[c], bits45)), x,
                blocks, b, 4 * u + c, dot16);
      }
      Widen(dot16, dot);
    }
  }
  struct Scales {
    explicit Scales(const uint8_t* group)
        : d(group), scales(group + kInt8GemmNr * sizeof(uint16_t)) {}
    __m256 Scale(int k, int u, int h) const {
      const __m128i s = _mm_loadl_epi64(
          reinterpret_cast<const __m128i*>(scales + 16 * (2 * k + u) + kHalfNr * h));
      return _mm256_mul_ps(HalfF16s(d, h), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s)));
    }
    __m256 Min(int, int, int, __m256 scale) const {
      return _mm256_mul_ps(scale, _mm256_set1_ps(32.0f));
    }
    const uint8_t* d;
    const uint8_t* scales;  // sub-block t's at 16t
  };
};

// A unit's integer sums dot[i] (x row i's block at x[i · blocks]) scaled into sum[i]: unsigned
// codes' sums Σ u·q_x give d_x·scale·Σ − min·sum_x; signed ones, Σ (u − 128)·q_x, give
// d_x·scale·Σ + (128·scale − min)·sum_x (sum_x the unit's, ActBlock32::UnitSum).
template <int MR, bool kSignedCodes, int kUnits>
[[gnu::always_inline]] inline void AddUnit(__m256 scale, __m256 min, const __m256i (&dot)[MR],
                                           const ActBlock32* x, int64_t blocks, int u,
                                           __m256 (&sum)[MR]) {
  // The factor of sum_x: −min exactly (a sign flip), or 128·scale − min in one rounding.
  const __m256 constant = kSignedCodes ? _mm256_fmsub_ps(_mm256_set1_ps(128.0f), scale, min)
                                       : _mm256_xor_ps(min, _mm256_set1_ps(-0.0f));
  for (int i = 0; i < MR; ++i) {
    const ActBlock32& a = x[i * blocks];
    const __m256 block = _mm256_cvtepi32_ps(dot[i]);
    sum[i] = _mm256_fmadd_ps(block, _mm256_mul_ps(scale, _mm256_set1_ps(a.d)), sum[i]);
    sum[i] = _mm256_fmadd_ps(constant, _mm256_set1_ps(a.UnitSum<kUnits>(u)), sum[i]);
  }
}

// sum[i]'s first nr lanes to y's row i (rows ldy apart); plain stores for nr = 8, as vmaskmovps
// stores are microcoded on AMD cores.
template <int MR>
[[gnu::always_inline]] inline void StoreRows(const __m256 (&sum)[MR], float* y, int64_t ldy,
                                             int nr) {
  if (nr == kHalfNr) {
    for (int i = 0; i < MR; ++i) _mm256_storeu_ps(y + i * ldy, sum[i]);
    return;
  }
  const __m256i live =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (int i = 0; i < MR; ++i) _mm256_maskstore_ps(y + i * ldy, live, sum[i]);
}

// One tile: x rows [0, MR) against NH half panels from half h0 of the panel at `panel` (groups of
// Format::kGroupBytes); row j < nr of those halves' rows to column j of y.
template <typename Format, int MR, int NH>
void Tile(const uint8_t* panel, int64_t blocks, const ActBlock32* x, float* y, int64_t ldy, int h0,
          int nr) {
  __m256 sum[NH][MR];
  for (auto& half : sum) {
    for (__m256& s : half) s = _mm256_setzero_ps();
  }
  for (int64_t b0 = 0; b0 < blocks; b0 += Format::kGroupBlocks, panel += Format::kGroupBytes) {
    const typename Format::Scales scales(panel);
    for (int k = 0; k < Format::kGroupBlocks; ++k) {
      // Decode's wide tiles stream the panels from memory, a block's share of its group's lines at
      // a time; larger batches read each block for 6 x rows, where the prefetches cost more than
      // they bring.
      if constexpr (Format::kPrefetch && NH == 2) {
        PrefetchBlockShare<Format::kGroupBytes, Format::kGroupBlocks>(panel, k);
      }
      for (int u = 0; u < Format::kUnits; ++u) {
        for (int h = 0; h < NH; ++h) {
          __m256i dot[MR];
          for (int i = 0; i < MR; ++i) dot[i] = _mm256_setzero_si256();
          Format::template Dot<MR>(panel, k, u, h0 + h, x, blocks, b0 + k, dot);
          const __m256 scale = scales.Scale(k, u, h0 + h);
          AddUnit<MR, Format::kSigned, Format::kUnits>(scale, scales.Min(k, u, h0 + h, scale), dot,
                                                       x + b0 + k, blocks, u, sum[h]);
        }
      }
    }
  }
  for (int h = 0; h < NH && kHalfNr * h < nr; ++h) {
    StoreRows(sum[h], y + kHalfNr * h, ldy, std::min(kHalfNr, nr - kHalfNr * h));
  }
}

using TileFn = void (*)(const uint8_t*, int64_t, const ActBlock32*, float*, int64_t, int, int);

template <typename Format, int NH, int... M>
constexpr std::array<TileFn, sizeof...(M)> Tiles(std::integer_sequence<int, M...>) {
  return {Tile<Format, M + 1, NH>...};
}

// Every tile of the product: for n ≤ kWideTileMr one tile of all n rows per whole panel, else
// tiles of kTileMr rows per half panel.
template <typename Format>
void GemmPanels(const uint8_t* packed, int64_t rows, int64_t cols, const ActBlock32* x, int64_t n,
                float* y, int64_t ldy) {
  static constexpr auto kWide = Tiles<Format, 2>(std::make_integer_sequence<int, kWideTileMr>());
  static constexpr auto kHalf = Tiles<Format, 1>(std::make_integer_sequence<int, kTileMr>());
  const int64_t blocks = cols / kQK, panels = (rows + kInt8GemmNr - 1) / kInt8GemmNr;
  const size_t panel_bytes = blocks / Format::kGroupBlocks * Format::kGroupBytes;
  if (n <= kWideTileMr) {
    for (int64_t p = 0; p < panels; ++p) {
      kWide[n - 1](packed + p * panel_bytes, blocks, x, y + p * kInt8GemmNr, ldy, 0,
                   static_cast<int>(std::min<int64_t>(kInt8GemmNr, rows - p * kInt8GemmNr)));
    }
    return;
  }
  for (int64_t i0 = 0; i0 < n; i0 += kTileMr) {
    const TileFn tile = kHalf[std::min<int64_t>(kTileMr, n - i0) - 1];
    for (int64_t p = 0; p < panels; ++p) {
      for (int h = 0; h < 2; ++h) {
        const int64_t first = p * kInt8GemmNr + kHalfNr * h;
        if (first >= rows) break;
        tile(packed + p * panel_bytes, blocks, x + i0 * blocks, y + i0 * ldy + first, ldy, h,
             static_cast<int>(std::min<int64_t>(kHalfNr, rows - first)));
      }
    }
  }
}

}  // namespace

void PackInt8Panels(Block32AsU8Fn unpack, const uint8_t* w, size_t row_bytes, int64_t cols,
                    int64_t begin, int64_t end, uint8_t* packed) {
  const int64_t blocks = cols / kQK;
  for (int64_t r0 = begin; r0 < end; r0 += kInt8GemmNr) {
    const int live = static_cast<int>(std::min<int64_t>(kInt8GemmNr, end - r0));
    for (int64_t b = 0; b < blocks; ++b, packed += kInt8PanelBlockBytes) {
      alignas(32) uint8_t codes[kInt8GemmNr][kQK] = {};
      float scales[kInt8GemmNr] = {}, mins[kInt8GemmNr] = {};
      for (int j = 0; j < live; ++j) {
        unpack(w + (r0 + j) * row_bytes, b, codes[j], &scales[j], &mins[j]);
      }
      for (int s = 0; s < 8; ++s) {
        for (int h = 0; h < 2; ++h) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed + 64 * s + 32 * h),
                              Step(codes[kHalfNr * h], s));
        }
      }
      std::memcpy(packed + kCodesBytes, scales, sizeof(scales));
      std::memcpy(packed + kCodesBytes + sizeof(scales), mins, sizeof(mins));
    }
  }
}

void QuantizeActivations32(const float* x, int64_t cols, ActBlock32* out) {
  const __m256 lowest = _mm256_set1_ps(-127.0f), highest = _mm256_set1_ps(127.0f);
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t b = 0; b < cols / kQK; ++b, x += kQK) {
    __m256 v[4];
    // vmaxps returns its second operand when either is NaN: NaNs are skipped, as std::max does.
    __m256 lanes = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      lanes = _mm256_max_ps(_mm256_and_ps(v[k], magnitude), lanes);
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(lanes), _mm256_extractf128_ps(lanes, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    ActBlock32& a = out[b];
    if (amax == 0.0f) {
      a = ActBlock32{};
      continue;
    }
    const __m256 inverse = _mm256_set1_ps(127.0f / amax);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      // Clamped first (a NaN product becomes -127, ±inf ±127, as the scalar code maps them), then
      // rounded half to even.
      q[k] = _mm256_cvtps_epi32(
          _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[k], inverse), lowest), highest));
    }
    // packs interleave 128-bit lanes; the permutation restores element order.
    const __m256i bytes = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])),
        _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.qs), bytes);
    // The halves' sums: lanes 0 and 1 of t.
    const __m256i low = _mm256_add_epi32(q[0], q[1]), high = _mm256_add_epi32(q[2], q[3]);
    __m128i t = _mm_hadd_epi32(
        _mm_add_epi32(_mm256_castsi256_si128(low), _mm256_extracti128_si256(low, 1)),
        _mm_add_epi32(_mm256_castsi256_si128(high), _mm256_extracti128_si256(high, 1)));
    t = _mm_hadd_epi32(t, t);
    const int low_sum = _mm_cvtsi128_si32(t), high_sum = _mm_extract_epi32(t, 1);
    a.d = F16ToF32(F32ToF16(amax / 127.0f));
    a.sum = a.d * static_cast<float>(low_sum + high_sum);
    a.half_sums[0] = a.d * static_cast<float>(low_sum);
    a.half_sums[1] = a.d * static_cast<float>(high_sum);
  }
}

Int8GemmFn Int8GemmFor(DType dtype) {
  if (Block32AsU8For(dtype) == nullptr) return nullptr;
  if (ActiveSimdLevel() == SimdLevel::kAvx512 && GetCpuFeatures().avx512_vnni) {
    return avx512::Int8GemmPanels;
  }
  return avx2::Int8GemmPanelsFor(Block32AsU8MaxCode(dtype));
}

namespace avx2 {

Int8GemmFn Int8GemmPanelsFor(int max_code) {
  // A step's pair of products is at most 2 · max_code · 127; kSteps of them must stay < 2^15.
  if (max_code <= 15) return GemmPanels<U8Panels<UnsignedSteps<8>>>;
  if (max_code <= 31) return GemmPanels<U8Panels<UnsignedSteps<4>>>;
  return GemmPanels<U8Panels<SignedSteps>>;
}

Int8GemmFn QuantPanelsGemm(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0:
      return GemmPanels<Q4_0Panels>;
    case DType::kQ8_0:
      return GemmPanels<Q8_0Panels>;
    case DType::kQ4_K:
      return GemmPanels<K4Panels<false>>;
    case DType::kQ5_K:
      return GemmPanels<K4Panels<true>>;
    case DType::kQ6_K:
      return GemmPanels<Q6_KPanels>;
    default:
      return nullptr;
  }
}

}  // namespace avx2
}  // namespace pdserve::kernels
