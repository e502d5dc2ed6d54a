// The int8 GEMM for quantized weights (gemm_kernels.h), AVX512-VNNI: a 12 × 16 tile of y keeps
// 12 int32 accumulators for the current 32-element block (or 16-element unit: Q6_K) (8 vpdpbusd
// each, the x codes broadcast from memory) and 12 fp32 ones that take each block's sums times its
// scales. One tile serves every panel format — the prefill's, packed per call, and PanelMatrix's
// Q4_0, Q8_0 and K-quant panels, which every batch from one decode row up reads — so those with
// 32-element scales give the per-call GEMM's sums bit for bit. Compiled with AVX-512, VNNI and
// VBMI; called only when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/quant_prefetch.h"

namespace pdserve::kernels::avx512 {
namespace {

using quant::kQK;

constexpr size_t kCodesBytes = 8 * 64;
constexpr int kTileMr = 12;  // x rows per tile

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
// d, and a min of kOffset·d (value = d·(u − kOffset)); their Steps prefetch ahead, as decode
// streams them from memory.
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

// PanelMatrix's K-quant formats (gemm_kernels.h) put a super-block's scales before its codes: on
// AMD Zen 4, streaming 32000 × 4096 from memory (BM_PanelMatmul, one thread), Q4_K with its scales
// after the codes and every line prefetched 4 KiB ahead took 4.8–5.4 ms, without the prefetch
// 2.7–4.4 ms, and with the scales first 2.3–2.7 ms (Q6_K 9.3, 6.5–7.0 and 4.7–5.7 ms; Q4_0 and
// Q8_0, whose blocks are smaller, the same with or without the prefetch). Each block's Steps
// prefetch that block's share of its super-block's bytes ahead, spread as the AVX2 tile does: on
// the Xeon with AMX (bench_ab against no prefetch, Q4_K_M) 110M decode 1.55× / 1.22× at 1 / 2
// threads, 1B decode 0.99× / 1.02× (it streams from memory), prefill 1.06–1.32× (the AMX path
// dequantizes through Steps); not yet measured on Zen 4 in this form.

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
    PrefetchBlockShare<kGroupBytes, kGroupBlocks>(group, k);
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
    if (u == 0) PrefetchBlockShare<kGroupBytes, kGroupBlocks>(group, k);
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

// One tile: rows [0, MR) of x against one panel; columns j < nr of y written.
template <typename Format, int MR>
void Tile(const uint8_t* panel, int64_t blocks, const ActBlock32* x, float* y, int64_t ldy,
          int nr) {
  __m512 sum[MR];
  for (int i = 0; i < MR; ++i) sum[i] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < blocks; b0 += Format::kGroupBlocks, panel += Format::kGroupBytes) {
    const typename Format::Scales scales(panel);
    for (int k = 0; k < Format::kGroupBlocks; ++k) {
      const int64_t b = b0 + k;
      for (int u = 0; u < Format::kUnits; ++u) {
        __m512i dot[MR];
        for (int i = 0; i < MR; ++i) dot[i] = _mm512_setzero_si512();
        Format::Steps(panel, k, u, [&](__m512i w, int s) {
          for (int i = 0; i < MR; ++i) {
            int32_t codes;
            std::memcpy(&codes, x[i * blocks + b].qs + 4 * s, sizeof(codes));
            dot[i] = _mm512_dpbusd_epi32(dot[i], w, _mm512_set1_epi32(codes));
          }
        });
        const __m512 scale = scales.Scale(k, u);
        const __m512 min = scales.Min(k, u, scale);
        for (int i = 0; i < MR; ++i) {
          const ActBlock32& a = x[i * blocks + b];
          sum[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i]),
                                   _mm512_mul_ps(scale, _mm512_set1_ps(a.d)), sum[i]);
          sum[i] = _mm512_fnmadd_ps(min, _mm512_set1_ps(a.UnitSum<Format::kUnits>(u)), sum[i]);
        }
      }
    }
  }
  const __mmask16 live = static_cast<__mmask16>((1u << nr) - 1);
  for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(y + i * ldy, live, sum[i]);
}

using TileFn = void (*)(const uint8_t*, int64_t, const ActBlock32*, float*, int64_t, int);

template <typename Format, int... M>
constexpr std::array<TileFn, sizeof...(M)> Tiles(std::integer_sequence<int, M...>) {
  return {Tile<Format, M + 1>...};
}

// Every tile of 12 x rows against every panel; kTiles[mr − 1]: the tile for mr x rows.
template <typename Format>
void GemmPanels(const uint8_t* packed, int64_t rows, int64_t cols, const ActBlock32* x, int64_t n,
                float* y, int64_t ldy) {
  static constexpr auto kTiles = Tiles<Format>(std::make_integer_sequence<int, kTileMr>());
  const int64_t blocks = cols / kQK, panels = (rows + kInt8GemmNr - 1) / kInt8GemmNr;
  for (int64_t i0 = 0; i0 < n; i0 += kTileMr) {
    const TileFn tile = kTiles[std::min<int64_t>(kTileMr, n - i0) - 1];
    for (int64_t p = 0; p < panels; ++p) {
      tile(packed + p * (blocks / Format::kGroupBlocks) * Format::kGroupBytes, blocks,
           x + i0 * blocks, y + i0 * ldy + p * kInt8GemmNr, ldy,
           static_cast<int>(std::min<int64_t>(kInt8GemmNr, rows - p * kInt8GemmNr)));
    }
  }
}

// F32ToBF16 of each lane (nearest even; NaN made quiet), in the lanes' high halves.
__m512i RoundedToBf16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x00400000));
}

// The pairs (even k, odd k) of 16 rows' bf16 values.
__m512i Bf16Pairs(__m512 even, __m512 odd) {
  return _mm512_or_si512(_mm512_srli_epi32(RoundedToBf16(even), 16),
                         _mm512_and_si512(RoundedToBf16(odd), _mm512_set1_epi32(-65536)));
}

// DequantizePanelsToBf16Pairs for one format: per panel, group and unit, each step's 4 k of the
// 16 rows widened to fp32 (scale·u − min: the format's value, exactly as DequantizeRow computes
// it), rounded and paired into its lines.
template <typename Format>
void DequantizeToPairs(const uint8_t* packed, int64_t cols, int64_t k0, int64_t kc, int64_t panels,
                       uint16_t* out) {
  constexpr int64_t kGroupK = Format::kGroupBlocks * kQK;
  constexpr int kLine = 2 * kGemmNr;  // uint16 of a pair of k across a bf16 panel's rows
  const int64_t panel_bytes = cols / kGroupK * static_cast<int64_t>(Format::kGroupBytes);
  const __m512i byte = _mm512_set1_epi32(0xFF);
  for (int64_t p = 0; p < panels; ++p) {
    uint16_t* to = out + (p / 2) * kc * kGemmNr + (p % 2) * 2 * kInt8GemmNr;
    const uint8_t* group = packed + p * panel_bytes + k0 / kGroupK * Format::kGroupBytes;
    for (int64_t g0 = 0; g0 < kc; g0 += kGroupK, group += Format::kGroupBytes) {
      const typename Format::Scales scales(group);
      for (int k = 0; k < Format::kGroupBlocks; ++k) {
        for (int u = 0; u < Format::kUnits; ++u) {
          const __m512 scale = scales.Scale(k, u);
          const __m512 min = scales.Min(k, u, scale);
          Format::Steps(group, k, u, [&](__m512i w, int s) {
            __m512 v[4];
            for (int i = 0; i < 4; ++i) {
              const __m512i codes = _mm512_and_si512(_mm512_srli_epi32(w, 8 * i), byte);
              v[i] = _mm512_fmsub_ps(scale, _mm512_cvtepi32_ps(codes), min);
            }
            const int64_t q = (g0 + k * kQK + 4 * s) / 2;  // the pair of the step's first k
            _mm512_storeu_si512(to + q * kLine, Bf16Pairs(v[0], v[1]));
            _mm512_storeu_si512(to + (q + 1) * kLine, Bf16Pairs(v[2], v[3]));
          });
        }
      }
    }
  }
  if (panels % 2 == 1) {  // the last bf16 panel's rows past the matrix's
    uint16_t* to = out + (panels / 2) * kc * kGemmNr + 2 * kInt8GemmNr;
    for (int64_t q = 0; q < kc / 2; ++q)
      _mm512_storeu_si512(to + q * kLine, _mm512_setzero_si512());
  }
}

}  // namespace

void DequantizePanelsToBf16Pairs(DType dtype, const uint8_t* packed, int64_t cols, int64_t k0,
                                 int64_t kc, int64_t panels, uint16_t* out) {
  switch (dtype) {
    case DType::kQ4_0:
      return DequantizeToPairs<Q4_0Panels>(packed, cols, k0, kc, panels, out);
    case DType::kQ8_0:
      return DequantizeToPairs<Q8_0Panels>(packed, cols, k0, kc, panels, out);
    case DType::kQ4_K:
      return DequantizeToPairs<K4Panels<false>>(packed, cols, k0, kc, panels, out);
    case DType::kQ5_K:
      return DequantizeToPairs<K4Panels<true>>(packed, cols, k0, kc, panels, out);
    case DType::kQ6_K:
      return DequantizeToPairs<Q6_KPanels>(packed, cols, k0, kc, panels, out);
    default:
      std::abort();
  }
}

void Int8GemmPanels(const uint8_t* packed, int64_t rows, int64_t cols, const ActBlock32* x,
                    int64_t n, float* y, int64_t ldy) {
  GemmPanels<U8Panels>(packed, rows, cols, x, n, y, ldy);
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

}  // namespace pdserve::kernels::avx512
