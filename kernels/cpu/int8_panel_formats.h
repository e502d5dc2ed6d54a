// Internal: the int8 tile's panel formats (gemm_kernels.h), shared by its VNNI and AMX units
// (gemm_int8_vnni.cc, gemm_int8_amx.cc): how a group of blocks' codes unpack into steps of 64 bytes
// and how its scales and minimums read. Include only from units compiled for AVX-512 with VNNI and
// VBMI; everything here has internal linkage, so units built with different extensions never share
// a copy.
#ifndef PDSERVE_KERNELS_CPU_INT8_PANEL_FORMATS_H_
#define PDSERVE_KERNELS_CPU_INT8_PANEL_FORMATS_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/quant_dot.h"

namespace pdserve::kernels::avx512 {
namespace {

constexpr size_t kCodesBytes = 8 * 64;

// The panel formats (gemm_kernels.h), in groups of kGroupBlocks 32-element blocks, kGroupBytes a
// group, each block in kUnits units of 8 / kUnits steps with a scale each: Steps(group, k, u, f)
// calls f(codes, s) for each step s of unit u of block k (unsigned bytes, row j's at lanes
// 4j..4j+3); a group's Scales(group) gives unit u of block k's 16 scales and minimums.
struct U8Panels {  // the int8 GEMM's, packed per call
  static constexpr int kGroupBlocks = 1, kUnits = 1;
  static constexpr size_t kGroupBytes = kInt8PanelBlockBytes;
  template <typename F>
  static void Steps(const uint8_t* group, int, int, F f) {
    for (int s = 0; s < 8; ++s) f(_mm512_loadu_si512(group + 64 * s), s);
  }
  struct Scales {
    explicit Scales(const uint8_t* group) : group(group) {}
    __m512 Scale(int, int) const { return _mm512_loadu_ps(group + kCodesBytes); }
    __m512 Min(int, int, __m512) const {
      return _mm512_loadu_ps(group + kCodesBytes + kInt8GemmNr * sizeof(float));
    }
    const uint8_t* group;
  };
};

// Prefetches every cache line of the kBytes bytes from p, kQuantPrefetchBytes ahead: PanelMatrix's
// formats are streamed from memory by decode.
template <size_t kBytes>
void PrefetchAhead(const uint8_t* p) {
  for (size_t i = 0; i < kBytes; i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kQuantPrefetchBytes + i), _MM_HINT_T0);
  }
}

// Steps of 4 chunks of 64 bytes at `codes`, byte 4j + i of chunk c holding row j's codes 4c + i
// (low nibble, step c) and 16 + 4c + i (high nibble, step c + 4).
template <typename F>
void NibbleSteps(const uint8_t* codes, F f) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m512i z = _mm512_loadu_si512(codes + 64 * c);
    f(_mm512_and_si512(z, nibble), c);
    f(_mm512_and_si512(_mm512_srli_epi16(z, 4), nibble), c + 4);
  }
}

// PanelMatrix's Q4_0 and Q8_0 formats: kCodeBytes of codes a block, then the rows' 16 f16 scales
// d, and a min of kOffset·d (value = d·(u − kOffset)).
template <size_t kCodeBytes, int kOffset>
struct F16ScalePanels {
  static constexpr int kGroupBlocks = 1, kUnits = 1;
  static constexpr size_t kGroupBytes = kCodeBytes + kInt8GemmNr * sizeof(uint16_t);
  struct Scales {
    explicit Scales(const uint8_t* group) : group(group) {}
    __m512 Scale(int, int) const {
      return _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + kCodeBytes)));
    }
    __m512 Min(int, int, __m512 scale) const {
      return _mm512_mul_ps(scale, _mm512_set1_ps(static_cast<float>(kOffset)));
    }
    const uint8_t* group;
  };
};

struct Q4_0Panels : F16ScalePanels<4 * 64, 8> {
  static_assert(kGroupBytes == kQ4_0PanelBlockBytes);
  template <typename F>
  static void Steps(const uint8_t* group, int, int, F f) {
    PrefetchAhead<kGroupBytes>(group);
    NibbleSteps(group, f);
  }
};

struct Q8_0Panels : F16ScalePanels<8 * 64, 128> {  // the codes already flipped to unsigned
  static_assert(kGroupBytes == kQ8_0PanelBlockBytes);
  template <typename F>
  static void Steps(const uint8_t* group, int, int, F f) {
    PrefetchAhead<kGroupBytes>(group);
    for (int s = 0; s < 8; ++s) f(_mm512_loadu_si512(group + 64 * s), s);
  }
};

// PanelMatrix's K-quant formats (gemm_kernels.h) put a super-block's scales before its codes and
// are not prefetched ahead: on AMD Zen 4, streaming 32000 × 4096 from memory (BM_PanelMatmul, one
// thread), Q4_K with its scales after the codes and every line prefetched 4 KiB ahead took 4.8–5.4
// ms, without the prefetch 2.7–4.4 ms, and with the scales first 2.3–2.7 ms (Q6_K 9.3, 6.5–7.0 and
// 4.7–5.7 ms; Q4_0 and Q8_0, whose blocks are smaller, the same with or without the prefetch).

// NibbleSteps's codes with a fifth bit each from the chunk after the 4 (Q5_K): byte 4j + i's bit c
// that of step c's code, its bit 4 + c that of step c + 4's.
template <typename F>
void FiveBitSteps(const uint8_t* codes, F f) {
  const __m512i nibble = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
  constexpr int kLowOrHigh = 0xEC;  // vpternlogd: (A & C) | B
  const __m512i fifth = _mm512_loadu_si512(codes + 4 * 64);
  // Step c's bit c and step c + 4's bit 4 + c, each moved to bit 4.
  const __m512i low_bits[4] = {_mm512_slli_epi16(fifth, 4), _mm512_slli_epi16(fifth, 3),
                               _mm512_slli_epi16(fifth, 2), _mm512_slli_epi16(fifth, 1)};
  const __m512i high_bits[4] = {fifth, _mm512_srli_epi16(fifth, 1), _mm512_srli_epi16(fifth, 2),
                                _mm512_srli_epi16(fifth, 3)};
  for (int c = 0; c < 4; ++c) {
    const __m512i z = _mm512_loadu_si512(codes + 64 * c);
    f(_mm512_ternarylogic_epi32(z, _mm512_and_si512(low_bits[c], bit4), nibble, kLowOrHigh), c);
    f(_mm512_ternarylogic_epi32(_mm512_srli_epi16(z, 4), _mm512_and_si512(high_bits[c], bit4),
                                nibble, kLowOrHigh),
      c + 4);
  }
}

// Q4_K and Q5_K: the rows' d and dmin and the scale bytes as planes, then 8 blocks of nibbles as
// Q4_0's (Q5_K: and a chunk of fifth bits); block k's scale d·s_k, minimum dmin·m_k.
template <bool kFifthBit>
struct K4Panels {
  static constexpr int kGroupBlocks = 8, kUnits = 1;
  static constexpr size_t kCodesAt = 2 * kInt8GemmNr * sizeof(uint16_t) + 12 * kInt8GemmNr;
  static constexpr size_t kBlockCodeBytes = (kFifthBit ? 5 : 4) * 64;
  static constexpr size_t kGroupBytes = kFifthBit ? kQ5_KPanelGroupBytes : kQ4_KPanelGroupBytes;
  static_assert(kGroupBytes == kCodesAt + kGroupBlocks * kBlockCodeBytes);
  template <typename F>
  static void Steps(const uint8_t* group, int k, int, F f) {
    if constexpr (kFifthBit) {
      FiveBitSteps(group + kCodesAt + k * kBlockCodeBytes, f);
    } else {
      NibbleSteps(group + kCodesAt + k * kBlockCodeBytes, f);
    }
  }
  // The 6-bit scales and minimums of all 16 rows, unpacked as quant::ScalesAndMinsK4 does, with
  // words u[0], u[1], u[2] the 16 rows' bytes 0-3, 4-7 and 8-11 (planes of 16 bytes).
  struct Scales {
    explicit Scales(const uint8_t* group) {
      d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group)));
      dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 32)));
      const __m512i u0 = _mm512_loadu_si512(group + 64), u1 = _mm512_loadu_si512(group + 128),
                    u2 = _mm512_loadu_si512(group + 192);
      const __m512i low6 = _mm512_set1_epi8(0x3F), low4 = _mm512_set1_epi8(0x0F),
                    top2 = _mm512_set1_epi8(0x30);  // bits 6-7 shifted right by 2
      constexpr int kOrMasked = 0xF8;               // vpternlogd: A | (B & C)
      _mm512_storeu_si512(scales, _mm512_and_si512(u0, low6));
      _mm512_storeu_si512(scales + 64,
                          _mm512_ternarylogic_epi32(_mm512_and_si512(u2, low4),
                                                    _mm512_srli_epi16(u0, 2), top2, kOrMasked));
      _mm512_storeu_si512(mins, _mm512_and_si512(u1, low6));
      _mm512_storeu_si512(
          mins + 64, _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(u2, 4), low4),
                                               _mm512_srli_epi16(u1, 2), top2, kOrMasked));
    }
    __m512 Scale(int k, int) const { return _mm512_mul_ps(d, Widen(scales + 16 * k)); }
    __m512 Min(int k, int, __m512) const { return _mm512_mul_ps(dmin, Widen(mins + 16 * k)); }
    static __m512 Widen(const uint8_t* bytes) {
      return _mm512_cvtepi32_ps(
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes))));
    }
    __m512 d, dmin;
    alignas(64) uint8_t scales[8 * kInt8GemmNr], mins[8 * kInt8GemmNr];  // block k's at 16k
  };
};

// Q6_K: the rows' d and the 16 sub-blocks' int8 scales as planes, then 8 blocks, each its codes'
// low nibbles as Q4_0's and their top two bits in two chunks (one a unit of 16 elements); unit u of
// block k (sub-block 2k + u) has scale d·s and minimum 32·d·s (value = d·s·(q − 32)).
struct Q6_KPanels {
  static constexpr int kGroupBlocks = 8, kUnits = 2;
  static constexpr size_t kCodesAt = kInt8GemmNr * sizeof(uint16_t) + 16 * kInt8GemmNr;
  static constexpr size_t kBlockCodeBytes = 6 * 64;
  static constexpr size_t kGroupBytes = kQ6_KPanelGroupBytes;
  static_assert(kGroupBytes == kCodesAt + kGroupBlocks * kBlockCodeBytes);
  // Unit u's steps 4u + c: the nibbles of chunk c (low for u = 0, high for u = 1), with bits
  // 2c, 2c + 1 of the unit's top-bits chunk as bits 4, 5.
  template <typename F>
  static void Steps(const uint8_t* group, int k, int u, F f) {
    const uint8_t* codes = group + kCodesAt + k * kBlockCodeBytes;
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    constexpr int kLowOrHigh = 0xEC;  // vpternlogd: (A & C) | B
    const __m512i top = _mm512_loadu_si512(codes + 4 * 64 + 64 * u);
    const __m512i tops[4] = {_mm512_slli_epi16(top, 4), _mm512_slli_epi16(top, 2), top,
                             _mm512_srli_epi16(top, 2)};
    for (int c = 0; c < 4; ++c) {
      __m512i z = _mm512_loadu_si512(codes + 64 * c);
      if (u == 1) z = _mm512_srli_epi16(z, 4);
      f(_mm512_ternarylogic_epi32(z, _mm512_and_si512(tops[c], bits45), low4, kLowOrHigh),
        4 * u + c);
    }
  }
  struct Scales {
    explicit Scales(const uint8_t* group)
        : d(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group)))),
          scales(group + kInt8GemmNr * sizeof(uint16_t)) {}
    __m512 Scale(int k, int u) const {
      const __m128i s =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + 16 * (2 * k + u)));
      return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s)));
    }
    __m512 Min(int, int, __m512 scale) const { return _mm512_mul_ps(scale, _mm512_set1_ps(32.0f)); }
    __m512 d;
    const uint8_t* scales;  // sub-block t's at 16t
  };
};

// The activations' minimum sums for a unit of `units` in a block: the block's, or its half's.
template <int kUnits>
float UnitSum(const ActBlock32& a, int u) {
  if constexpr (kUnits == 1) {
    return a.sum;
  } else {
    return a.half_sums[u];
  }
}

}  // namespace
}  // namespace pdserve::kernels::avx512

#endif  // PDSERVE_KERNELS_CPU_INT8_PANEL_FORMATS_H_
