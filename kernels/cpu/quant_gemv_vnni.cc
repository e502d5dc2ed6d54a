// AVX512-VNNI/VBMI GEMV kernels for decode over quantized weight rows (quant_dot.h's
// QuantGemvKernel). Each weight group is loaded as it lies in the file and its codes gathered into
// one 512-bit register with a byte permutation (vpermt2b) — no per-block loads or shuffles — and
// its f16 scales spread over the lanes they scale with a word permutation. The activations are
// quantized with the standard codes and scales but stored in the order the unpacked codes land in,
// so that each 64 codes meet their activations in one vpdpbusd (u8 × s8, summed four at a time into
// int32 lanes) or, for the K-quants, one vpmaddubsw and one vpdpwssd that applies the sub-block
// scales in the integer domain. Integer sums are exact, so a kernel differs from the scalar
// reference only in the order fp32 adds the scaled block sums. Each kernel splits a group's
// unpacking (Unpack) from its product with one activation row (Multiply), so a group is unpacked
// once for up to 4 activation rows, one weight row at a time. Compiled with AVX-512, VNNI and
// VBMI; called only when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/quant_dot.h"

namespace pdserve::kernels::avx512 {
namespace {

using namespace quant;  // NOLINT: the block formats

float F16(uint16_t h) { return _cvtsh_ss(h); }

// The 512-bit constant whose byte (or word) i is table[i].
template <typename T, size_t N>
__m512i Table(const T (&table)[N]) {
  static_assert(sizeof(T) * N == 64);
  return _mm512_loadu_si512(table);
}

// Prefetches every cache line of the kBytes bytes from p, kQuantPrefetchBytes ahead.
template <size_t kBytes>
void PrefetchAhead(const uint8_t* p) {
  for (size_t i = 0; i < kBytes; i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kQuantPrefetchBytes + i), _MM_HINT_T0);
  }
  _mm_prefetch(reinterpret_cast<const char*>(p + kQuantPrefetchBytes + kBytes - 1), _MM_HINT_T0);
}

// y[b·ldy] for one weight row × NB activation rows (act_bytes apart): each weight group is
// unpacked once (Kernel::Unpack) and multiplied into every activation row (Kernel::Multiply).
template <typename Kernel, int NB>
void Row(const Kernel& kernel, const uint8_t* w, const uint8_t* act, size_t act_bytes, int64_t cols,
         float* y, int64_t ldy) {
  __m512 sum[NB];
  for (int b = 0; b < NB; ++b) sum[b] = _mm512_setzero_ps();
  for (int64_t g = 0; g < cols / Kernel::kGroup; ++g) {
    const typename Kernel::Weights weights = kernel.Unpack(w, g);
    for (int b = 0; b < NB; ++b) sum[b] = kernel.Multiply(weights, act + b * act_bytes, g, sum[b]);
  }
  for (int b = 0; b < NB; ++b) y[b * ldy] = _mm512_reduce_add_ps(sum[b]);
}

constexpr int64_t kGemmFromRows = 56;  // QuantGemvKernel::gemm_from_rows

// One weight row a pass against activation rows in fours (then the rest). Two rows a pass — two
// streams a row apart — ran at 40% of one row's speed on AMD Zen 4 (Q8_0 32000 × 768 at 1 thread:
// 8.7 against 19–23 GB/s; Q4_0 1.2–1.5×), as the float GEMV had on Zen 5.
template <typename Kernel, int NB>
void RowsFor(const Kernel& kernel, const uint8_t* w, size_t row_bytes, int64_t n_rows,
             const uint8_t* act, size_t act_bytes, int64_t cols, float* y, int64_t ldy) {
  for (int64_t r = 0; r < n_rows; ++r) {
    Row<Kernel, NB>(kernel, w + r * row_bytes, act, act_bytes, cols, y + r, ldy);
  }
}

template <typename Kernel>
void Rows(DType, const uint8_t* w, size_t row_bytes, int64_t n_rows, const void* act,
          size_t act_bytes, int nb, int64_t cols, float* y, int64_t ldy) {
  static const Kernel kernel;  // its constant tables
  const auto* a = static_cast<const uint8_t*>(act);
  for (int b = 0; b < nb; b += 4, a += 4 * act_bytes, y += 4 * ldy) {
    switch (std::min(4, nb - b)) {
      case 1:
        RowsFor<Kernel, 1>(kernel, w, row_bytes, n_rows, a, act_bytes, cols, y, ldy);
        break;
      case 2:
        RowsFor<Kernel, 2>(kernel, w, row_bytes, n_rows, a, act_bytes, cols, y, ldy);
        break;
      case 3:
        RowsFor<Kernel, 3>(kernel, w, row_bytes, n_rows, a, act_bytes, cols, y, ldy);
        break;
      default:
        RowsFor<Kernel, 4>(kernel, w, row_bytes, n_rows, a, act_bytes, cols, y, ldy);
    }
  }
}

// --- Q4_0: groups of 4 blocks (128 elements, 72 bytes). Lane 4k + m of the int32 sums is block
// k's codes 4m..4m+3 (low nibbles) and 16+4m..16+4m+3 (high nibbles).

struct ActQ4_0 {
  int8_t low[64];      // block k's codes 0-15 at 16k..16k+15
  int8_t high[64];     // block k's codes 16-31 at 16k..16k+15
  int32_t offset[16];  // lane 4k+m: −8 × the sum of the 8 codes that lane multiplies
  float d[16];         // lane 4k+m: block k's scale
};
constexpr int64_t kQ4_0Group = 4 * kQK;
constexpr size_t kQ4_0GroupBytes = 4 * sizeof(BlockQ4_0);  // 72

size_t ActivationBytesQ4_0(DType, int64_t cols) { return cols / kQ4_0Group * sizeof(ActQ4_0); }

void QuantizeQ4_0(DType, const float* x, int64_t cols, void* out) {
  auto* a = static_cast<ActQ4_0*>(out);
  for (int64_t g = 0; g < cols / kQ4_0Group; ++g) {
    for (int k = 0; k < 4; ++k, x += kQK) {
      int8_t q[kQK];
      const float d = QuantizeActivationBlock(x, kQK, q);
      std::memcpy(a[g].low + 16 * k, q, 16);
      std::memcpy(a[g].high + 16 * k, q + 16, 16);
      for (int m = 0; m < 4; ++m) {
        int sum = 0;
        for (int j = 0; j < 4; ++j) sum += q[4 * m + j] + q[16 + 4 * m + j];
        a[g].offset[4 * k + m] = -8 * sum;
        a[g].d[4 * k + m] = d;
      }
    }
  }
}

struct KernelQ4_0 {
  // Byte 16k + j of the codes: group byte 18k + 2 + j (block k's qs[j]); 64-71 come from the
  // second table, which holds the group's last 8 bytes.
  const __m512i qs_index = [] {
    uint8_t t[64];
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 16; ++j) t[16 * k + j] = static_cast<uint8_t>(18 * k + 2 + j);
    return Table(t);
  }();
  // Word 4k + m: block k's d (word 9k of the group).
  const __m512i d_index = [] {
    uint16_t t[32] = {};
    for (int i = 0; i < 16; ++i) t[i] = static_cast<uint16_t>(9 * (i / 4));
    return Table(t);
  }();

  static constexpr int64_t kGroup = kQ4_0Group;
  struct Weights {
    __m512i low, high;
    __m512 d;
  };

  Weights Unpack(const uint8_t* row, int64_t g) const {
    const uint8_t* group = row + g * kQ4_0GroupBytes;
    PrefetchAhead<kQ4_0GroupBytes>(group);
    const __m512i head = _mm512_loadu_si512(group);
    const __m512i tail =
        _mm512_zextsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(group + 64)));
    const __m512i qs = _mm512_permutex2var_epi8(head, qs_index, tail);
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    return {_mm512_and_si512(qs, nibble), _mm512_and_si512(_mm512_srli_epi16(qs, 4), nibble),
            _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(d_index, head)))};
  }

  __m512 Multiply(const Weights& w, const uint8_t* act, int64_t g, __m512 sum) const {
    const ActQ4_0& a = reinterpret_cast<const ActQ4_0*>(act)[g];
    __m512i dot =
        _mm512_dpbusd_epi32(_mm512_loadu_si512(a.offset), w.low, _mm512_loadu_si512(a.low));
    dot = _mm512_dpbusd_epi32(dot, w.high, _mm512_loadu_si512(a.high));
    return _mm512_fmadd_ps(_mm512_mul_ps(w.d, _mm512_loadu_ps(a.d)), _mm512_cvtepi32_ps(dot), sum);
  }
};

// --- Q8_0: groups of 2 blocks (64 elements, 68 bytes). Lanes 0-7 are block 0's, 8-15 block 1's.

struct ActQ8_0 {
  int8_t qs[64];
  float d[16];  // lanes 0-7: block 0's scale; 8-15: block 1's
};
constexpr int64_t kQ8_0Group = 2 * kQK;
constexpr size_t kQ8_0GroupBytes = 2 * sizeof(BlockQ8_0);  // 68

size_t ActivationBytesQ8_0(DType, int64_t cols) { return cols / kQ8_0Group * sizeof(ActQ8_0); }

void QuantizeQ8_0(DType, const float* x, int64_t cols, void* out) {
  auto* a = static_cast<ActQ8_0*>(out);
  for (int64_t g = 0; g < cols / kQ8_0Group; ++g) {
    for (int k = 0; k < 2; ++k, x += kQK) {
      const float d = QuantizeActivationBlock(x, kQK, a[g].qs + kQK * k);
      for (int i = 0; i < 8; ++i) a[g].d[8 * k + i] = d;
    }
  }
}

struct KernelQ8_0 {
  // Code p: block 0's qs at group bytes 2-33, block 1's at 36-67 (64-67 from the second table).
  const __m512i qs_index = [] {
    uint8_t t[64];
    for (int p = 0; p < 64; ++p) t[p] = static_cast<uint8_t>(p < 32 ? 2 + p : 4 + p);
    return Table(t);
  }();
  const __m512i d_index = [] {  // words 0-7: block 0's d (word 0); 8-15: block 1's (word 17)
    uint16_t t[32] = {};
    for (int i = 0; i < 16; ++i) t[i] = i < 8 ? 0 : 17;
    return Table(t);
  }();

  static constexpr int64_t kGroup = kQ8_0Group;
  struct Weights {
    __m512i magnitude;  // |codes|
    __mmask64 negative;
    __m512 d;
  };

  Weights Unpack(const uint8_t* row, int64_t g) const {
    const uint8_t* group = row + g * kQ8_0GroupBytes;
    PrefetchAhead<kQ8_0GroupBytes>(group);
    uint32_t last;
    std::memcpy(&last, group + 64, sizeof(last));
    const __m512i head = _mm512_loadu_si512(group);
    const __m512i qs = _mm512_permutex2var_epi8(
        head, qs_index, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(last))));
    return {_mm512_abs_epi8(qs), _mm512_movepi8_mask(qs),
            _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(d_index, head)))};
  }

  // |w| × (a with w's sign): vpdpbusd multiplies unsigned by signed bytes.
  __m512 Multiply(const Weights& w, const uint8_t* act, int64_t g, __m512 sum) const {
    const ActQ8_0& a = reinterpret_cast<const ActQ8_0*>(act)[g];
    const __m512i qa = _mm512_loadu_si512(a.qs);
    const __m512i signed_a = _mm512_mask_sub_epi8(qa, w.negative, _mm512_setzero_si512(), qa);
    const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.magnitude, signed_a);
    return _mm512_fmadd_ps(_mm512_mul_ps(w.d, _mm512_loadu_ps(a.d)), _mm512_cvtepi32_ps(dot), sum);
  }
};

// --- Q4_K: one super-block (256 elements, 144 bytes) a step. Its codes as two registers of 64
// bytes: the low nibbles of the first are sub-blocks 0 and 2, its high nibbles 1 and 3; the second
// register's 4, 6 and 5, 7. A chunk's byte products (vpmaddubsw, int16 pairs) are scaled by their
// sub-block's 6-bit scale and summed into int32 lanes by vpdpwssd.

struct ActQ4_K {
  int8_t qs[256];   // sub-blocks in the order 0, 2, 1, 3, 4, 6, 5, 7
  int16_t sums[8];  // Σ codes of sub-block j (natural order), for the minimums
  float d;
  float pad[3];
};
constexpr int kQ4KChunkOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};

size_t ActivationBytesQ4_K(DType, int64_t cols) { return cols / kQK_K * sizeof(ActQ4_K); }

void QuantizeQ4_K(DType, const float* x, int64_t cols, void* out) {
  auto* a = static_cast<ActQ4_K*>(out);
  for (int64_t b = 0; b < cols / kQK_K; ++b, x += kQK_K) {
    int8_t q[kQK_K];
    a[b].d = QuantizeActivationBlock(x, kQK_K, q);
    for (int i = 0; i < 8; ++i) {
      const int sub = kQ4KChunkOrder[i];
      std::memcpy(a[b].qs + 32 * i, q + 32 * sub, 32);
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += q[32 * sub + j];
      a[b].sums[sub] = static_cast<int16_t>(sum);
    }
    std::memset(a[b].pad, 0, sizeof(a[b].pad));
  }
}

// Q4_K/Q5_K's 12 scale bytes as 8 scales (bytes 0-7) and 8 minimums (bytes 8-15), 6 bits each.
__m128i ScalesAndMinsK4Vector(const uint8_t* packed) {
  const std::array<uint32_t, 4> words = ScalesAndMinsK4(packed);
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(words.data()));
}

struct KernelQ4_K {
  // Chunk c's scale words: words 0-15 its first sub-block's scale, 16-31 its second's.
  __m512i scale_index[4];
  KernelQ4_K() {
    for (int c = 0; c < 4; ++c) {
      uint16_t t[32];
      for (int i = 0; i < 32; ++i) t[i] = static_cast<uint16_t>(kQ4KChunkOrder[2 * c + i / 16]);
      scale_index[c] = Table(t);
    }
  }

  static constexpr int64_t kGroup = kQK_K;
  struct Weights {
    __m512i codes[4], scales[4];
    __m128i mins;  // 8 words
    float d, dmin;
  };

  Weights Unpack(const uint8_t* row, int64_t b) const {
    const auto* x = reinterpret_cast<const BlockQ4_K*>(row) + b;
    PrefetchAhead<sizeof(BlockQ4_K)>(reinterpret_cast<const uint8_t*>(x));
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    const __m128i packed = ScalesAndMinsK4Vector(x->scales);
    const __m512i scales = _mm512_zextsi256_si512(_mm256_cvtepu8_epi16(packed));
    Weights w;
    for (int h = 0; h < 2; ++h) {
      const __m512i z = _mm512_loadu_si512(x->qs + 64 * h);
      w.codes[2 * h] = _mm512_and_si512(z, nibble);
      w.codes[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(z, 4), nibble);
    }
    for (int c = 0; c < 4; ++c) w.scales[c] = _mm512_permutexvar_epi16(scale_index[c], scales);
    w.mins = _mm_cvtepu8_epi16(_mm_srli_si128(packed, 8));
    w.d = F16(x->d);
    w.dmin = F16(x->dmin);
    return w;
  }

  // The minimums' 4 partial sums go into lanes 0-3 (the final reduction adds every lane).
  __m512 Multiply(const Weights& w, const uint8_t* act, int64_t b, __m512 sum) const {
    const ActQ4_K& a = reinterpret_cast<const ActQ4_K*>(act)[b];
    __m512i dot = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      dot = _mm512_dpwssd_epi32(
          dot, _mm512_maddubs_epi16(w.codes[c], _mm512_loadu_si512(a.qs + 64 * c)), w.scales[c]);
    }
    sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(a.d * w.d), sum);
    const __m128i min_dot =
        _mm_madd_epi16(w.mins, _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.sums)));
    return _mm512_fnmadd_ps(_mm512_zextps128_ps512(_mm_cvtepi32_ps(min_dot)),
                            _mm512_set1_ps(a.d * w.dmin), sum);
  }
};

// --- Q6_K: one super-block (256 elements, 210 bytes) a step, on the standard ActBlockK (its codes
// in natural order). A 128-element half's codes are two registers: ql's low nibbles with qh's bits
// 0-1 (elements 0-31) and 2-3 (32-63), and ql's high nibbles with qh's bits 4-5 and 6-7
// (64-127). Codes are unsigned (0-63); the −32 is applied through the activations' sums per 16.

struct KernelQ6_K {
  // Chunk q's scale words: 8 words each of scales 4q .. 4q+3 (16 elements per scale).
  __m512i scale_index[4];
  KernelQ6_K() {
    for (int q = 0; q < 4; ++q) {
      uint16_t t[32];
      for (int i = 0; i < 32; ++i) t[i] = static_cast<uint16_t>(4 * q + i / 8);
      scale_index[q] = Table(t);
    }
  }

  static constexpr int64_t kGroup = kQK_K;
  struct Weights {
    __m512i codes[4], scales[4];
    __m512i offset_scales;  // −32 × each group's scale, words 0-15
    float d;
  };

  // A half's codes: ql's low nibbles with qh's bits 0-1 (elements 0-31) and 2-3 (32-63), then
  // ql's high nibbles with qh's bits 4-5 and 6-7 (64-127).
  Weights Unpack(const uint8_t* row, int64_t b) const {
    const auto* x = reinterpret_cast<const BlockQ6_K*>(row) + b;
    PrefetchAhead<sizeof(BlockQ6_K)>(reinterpret_cast<const uint8_t*>(x));
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    constexpr int kLowOrHigh = 0xEC;  // vpternlogd: (A & C) | B
    const __m256i sc =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x->scales)));
    const __m512i scales = _mm512_zextsi256_si512(sc);
    Weights w;
    for (int half = 0; half < 2; ++half) {
      const __m512i ql = _mm512_loadu_si512(x->ql + 64 * half);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qh + 32 * half));
      const __m512i qh2 =  // bytes 0-31: qh; 32-63: qh >> 2
          _mm512_inserti64x4(_mm512_zextsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      w.codes[2 * half] = _mm512_ternarylogic_epi32(
          ql, _mm512_and_si512(_mm512_slli_epi16(qh2, 4), bits45), low4, kLowOrHigh);
      w.codes[2 * half + 1] = _mm512_ternarylogic_epi32(
          _mm512_srli_epi16(ql, 4), _mm512_and_si512(qh2, bits45), low4, kLowOrHigh);
    }
    for (int q = 0; q < 4; ++q) w.scales[q] = _mm512_permutexvar_epi16(scale_index[q], scales);
    w.offset_scales =
        _mm512_zextsi256_si512(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc, 5)));
    w.d = F16(x->d);
    return w;
  }

  // Codes are unsigned (0-63); the −32 enters as −32 · Σ_g scale_g · (Σ codes of group g).
  __m512 Multiply(const Weights& w, const uint8_t* act, int64_t b, __m512 sum) const {
    const ActBlockK& a = reinterpret_cast<const ActBlockK*>(act)[b];
    __m512i dot = _mm512_dpwssd_epi32(
        _mm512_setzero_si512(),
        _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsums))),
        w.offset_scales);
    for (int q = 0; q < 4; ++q) {
      dot = _mm512_dpwssd_epi32(
          dot, _mm512_maddubs_epi16(w.codes[q], _mm512_loadu_si512(a.qs + 64 * q)), w.scales[q]);
    }
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(a.d * w.d), sum);
  }
};

}  // namespace

QuantGemvKernel VnniQuantGemv(DType dtype, int64_t cols) {
  switch (dtype) {
    case DType::kQ4_0:
      if (cols % kQ4_0Group == 0)
        return {ActivationBytesQ4_0, QuantizeQ4_0, Rows<KernelQ4_0>, kGemmFromRows};
      break;
    case DType::kQ8_0:
      if (cols % kQ8_0Group == 0)
        return {ActivationBytesQ8_0, QuantizeQ8_0, Rows<KernelQ8_0>, kGemmFromRows};
      break;
    case DType::kQ4_K:
      return {ActivationBytesQ4_K, QuantizeQ4_K, Rows<KernelQ4_K>, kGemmFromRows};
    case DType::kQ6_K:
      return {QuantizedActivationBytes, QuantizeActivations, Rows<KernelQ6_K>, kGemmFromRows};
    default:
      break;
  }
  return {nullptr, nullptr, nullptr, 0};
}

}  // namespace pdserve::kernels::avx512
