// The int8 GEMM's packing and activation quantizer, and its AVX2 tiles (gemm_kernels.h): a tile of
// up to 6 x rows × 8 weight rows sums a block's vpmaddubsw products in int16 (codes ≤ 15 keep
// 8 steps below 2^15, codes ≤ 31 4), widens them with vpmaddwd and applies the block's scales in
// fp32; codes up to 255 (Q8_0) take the signed tile, whose int16 pairs hold one step.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/tensor/float16.h"
#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu_features.h"

namespace pdserve::kernels {
namespace {

using quant::kQK;

constexpr size_t kCodesBytes = 8 * 64;
constexpr int kTileMr = 6, kHalfNr = 8;

// Lane j of the result: the int32 at base[j · 8 + s] (row j's codes 4s..4s+3).
__m256i Step(const uint8_t* rows, int s) {
  const __m256i index =
      _mm256_add_epi32(_mm256_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56), _mm256_set1_epi32(s));
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(rows), index, 4);
}

// A block's integer sums dot[i] (x row i's block at x[i · blocks]) scaled into sum[i]: the
// half panel's scales and mins lie 512 and 576 bytes into the block at `half`. Unsigned codes'
// sums Σ u·q_x give d_x·scale·Σ − min·sum_x; with kSignedCodes, sums Σ (u − 128)·q_x give
// d_x·scale·Σ + (128·scale − min)·sum_x.
template <int MR, bool kSignedCodes>
[[gnu::always_inline]] inline void AddBlock(const uint8_t* half, const __m256i (&dot)[MR],
                                            const ActBlock32* x, int64_t blocks,
                                            __m256 (&sum)[MR]) {
  const __m256 scale = _mm256_loadu_ps(reinterpret_cast<const float*>(half + kCodesBytes));
  const __m256 min = _mm256_loadu_ps(
      reinterpret_cast<const float*>(half + kCodesBytes + kInt8GemmNr * sizeof(float)));
  // The factor of sum_x: −min exactly (a sign flip), or 128·scale − min in one rounding.
  const __m256 constant = kSignedCodes ? _mm256_fmsub_ps(_mm256_set1_ps(128.0f), scale, min)
                                       : _mm256_xor_ps(min, _mm256_set1_ps(-0.0f));
  for (int i = 0; i < MR; ++i) {
    const ActBlock32& a = x[i * blocks];
    const __m256 block = _mm256_cvtepi32_ps(dot[i]);
    sum[i] = _mm256_fmadd_ps(block, _mm256_mul_ps(scale, _mm256_set1_ps(a.d)), sum[i]);
    sum[i] = _mm256_fmadd_ps(constant, _mm256_set1_ps(a.sum), sum[i]);
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

// One tile: x rows [0, MR) against weight rows [0, nr ≤ 8) of a half panel whose block b's codes
// step s lies at half + b·kInt8PanelBlockBytes + 64·s and its scales and mins 512 and 576 bytes on.
// The int16 products are widened to int32 every kSteps steps (8 for codes ≤ 15, 4 for ≤ 31).
template <int MR, int kSteps>
void Tile(const uint8_t* half, int64_t blocks, const ActBlock32* x, float* y, int64_t ldy, int nr) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 sum[MR];
  for (int i = 0; i < MR; ++i) sum[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b, half += kInt8PanelBlockBytes) {
    __m256i dot[MR];
    for (int i = 0; i < MR; ++i) dot[i] = _mm256_setzero_si256();
    for (int s0 = 0; s0 < 8; s0 += kSteps) {
      __m256i dot16[MR];
      for (int i = 0; i < MR; ++i) dot16[i] = _mm256_setzero_si256();
      for (int s = s0; s < s0 + kSteps; ++s) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(half + 64 * s));
        for (int i = 0; i < MR; ++i) {
          int32_t codes;
          std::memcpy(&codes, x[i * blocks + b].qs + 4 * s, sizeof(codes));
          dot16[i] = _mm256_add_epi16(dot16[i], _mm256_maddubs_epi16(w, _mm256_set1_epi32(codes)));
        }
      }
      for (int i = 0; i < MR; ++i)
        dot[i] = _mm256_add_epi32(dot[i], _mm256_madd_epi16(dot16[i], ones));
    }
    AddBlock<MR, false>(half, dot, x + b, blocks, sum);
  }
  StoreRows(sum, y, ldy, nr);
}

// Tile's product for codes up to 255 (Q8_0's, flipped to unsigned): with q = u − 128 (a signed
// byte) and value = scale·u − min = scale·q + (128·scale − min), each step multiplies |q|
// (unsigned, ≤ 128) by x's codes given q's signs (|q_x| ≤ 127, so negating them never
// overflows): a pair of products is at most 2 · 128 · 127 < 2^15, widened to int32 every step.
// The sums Σ q·q_x are exact. (Splitting u into nibbles summed in int16 over the block, as Tile
// sums codes ≤ 15, ran 0.77× as fast on a Xeon: twice the accumulators spill.)
template <int MR>
void SignedTile(const uint8_t* half, int64_t blocks, const ActBlock32* x, float* y, int64_t ldy,
                int nr) {
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 sum[MR];
  for (int i = 0; i < MR; ++i) sum[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b, half += kInt8PanelBlockBytes) {
    __m256i dot[MR];
    for (int i = 0; i < MR; ++i) dot[i] = _mm256_setzero_si256();
    for (int s = 0; s < 8; ++s) {
      const __m256i q = _mm256_xor_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(half + 64 * s)), flip);
      const __m256i magnitude = _mm256_abs_epi8(q);
      for (int i = 0; i < MR; ++i) {
        int32_t codes;
        std::memcpy(&codes, x[i * blocks + b].qs + 4 * s, sizeof(codes));
        const __m256i signed_x = _mm256_sign_epi8(_mm256_set1_epi32(codes), q);
        dot[i] = _mm256_add_epi32(
            dot[i], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, signed_x), ones));
      }
    }
    AddBlock<MR, true>(half, dot, x + b, blocks, sum);
  }
  StoreRows(sum, y, ldy, nr);
}

using TileFn = void (*)(const uint8_t*, int64_t, const ActBlock32*, float*, int64_t, int);

// kSteps 0: SignedTile; else Tile<·, kSteps>.
template <int kSteps, int... M>
constexpr std::array<TileFn, sizeof...(M)> Tiles(std::integer_sequence<int, M...>) {
  if constexpr (kSteps == 0) {
    return {SignedTile<M + 1>...};
  } else {
    return {Tile<M + 1, kSteps>...};
  }
}

// Tiles<kSteps>[mr − 1]: the tile for mr x rows.
template <int kSteps>
constexpr auto kTiles = Tiles<kSteps>(std::make_integer_sequence<int, kTileMr>());

template <int kSteps>
void Int8GemmPanelsAvx2(const uint8_t* packed, int64_t rows, int64_t cols, const ActBlock32* x,
                        int64_t n, float* y, int64_t ldy) {
  const int64_t blocks = cols / kQK, panels = (rows + kInt8GemmNr - 1) / kInt8GemmNr;
  for (int64_t i0 = 0; i0 < n; i0 += kTileMr) {
    const TileFn tile = kTiles<kSteps>[std::min<int64_t>(kTileMr, n - i0) - 1];
    for (int64_t p = 0; p < panels; ++p) {
      for (int h = 0; h < 2; ++h) {
        const int64_t first = p * kInt8GemmNr + kHalfNr * h;
        if (first >= rows) break;
        tile(packed + p * blocks * kInt8PanelBlockBytes + 32 * h, blocks, x + i0 * blocks,
             y + i0 * ldy + first, ldy, static_cast<int>(std::min<int64_t>(kHalfNr, rows - first)));
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
  if (max_code <= 15) return Int8GemmPanelsAvx2<8>;
  if (max_code <= 31) return Int8GemmPanelsAvx2<4>;
  return Int8GemmPanelsAvx2<0>;
}

}  // namespace avx2
}  // namespace pdserve::kernels
