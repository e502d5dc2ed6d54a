// Internal: the register-blocked micro-kernels of Matmul's GEMM (kernels/cpu/matmul.cc), one per
// instruction-set level. Weights are packed into panels of kGemmNr rows, k-major (panel element
// [k, j] = W[row0 + j, k0 + k] at panel[k · kGemmNr + j], zero past the last row; each level's
// PackPanel writes them by register transposes); panels hold fp32, or f16/bf16 widened in
// registers as they are read (a PanelMatrix's, packed once at load). A kernel computes an mr × nr
// tile y[i, j] (+)= Σ_{k < kc} x[i, k] · panel[k · kGemmNr + j] for i < mr ≤ kGemmMr and
// j < nr ≤ kGemmNr, one fp32 FMA per k in order, writing only j < nr.
//
// bf16 panels of the AVX-512 level may instead interleave pairs of k (the layout vdpbf16ps
// multiplies; kc even): element [k, j] at panel[(k / 2) · 2 · kGemmNr + 2j + k % 2], so that each
// 32-bit lane holds one row's weights at k and k + 1. GemmTile reads them exactly, as above;
// Bf16DotTile multiplies them by activations rounded to bf16.
#ifndef PDSERVE_KERNELS_CPU_GEMM_KERNELS_H_
#define PDSERVE_KERNELS_CPU_GEMM_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "core/base/thread_pool.h"
#include "core/tensor/dtype.h"
#include "core/tensor/tensor.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu_features.h"

namespace pdserve::kernels {

// The element types of 16-bit panels: an f16's or a bf16's bits.
enum class F16Bits : uint16_t {};
enum class BF16Bits : uint16_t {};

// Writes the kc × kGemmNr panel of columns [k0, k0 + kc) of `live` ≤ kGemmNr weight rows (row j's
// floats from src[j]): panel[k · kGemmNr + j] = src[j][k0 + k] for j < live, 0 for j ≥ live.
// Reads nothing outside those rows' columns [k0, k0 + kc).
using GemmPackFn = void (*)(const float* const* src, int live, int64_t k0, int64_t kc,
                            float* panel);

struct GemmTileArgs {
  const float* x;  // x[i, k] at x[i · ldx + k]
  int64_t ldx;
  int mr;
  const void* panel;  // kc × kGemmNr elements of panel_dtype
  DType panel_dtype;  // f32, f16 or bf16
  int64_t kc;
  float* y;  // y[i, j] at y[i · ldy + j]
  int64_t ldy;
  int nr;
  bool accumulate;     // add to y's values instead of overwriting them
  bool pairs = false;  // bf16 panels in the interleaved pairs layout (AVX-512 only)
};

// A tile of the bf16 dot-product GEMM: y[i, j] (+)= Σ_{q < kc/2} (x[i, 2q]·W[j, 2q] +
// x[i, 2q+1]·W[j, 2q+1]), x rounded to bf16, each pair's products added to the fp32 sum by one
// vdpbf16ps (bf16 products are exact in fp32). vdpbf16ps and the rounding ignore MXCSR and, as
// Intel documents them, take subnormal inputs as zero and flush subnormal results.
struct Bf16DotTileArgs {
  const uint32_t* x;  // row i's bf16 pairs at x[i · ldx + q], x[i, 2q] in the low half
  int64_t ldx;        // in pairs
  int mr;
  const uint16_t* panel;  // kc × kGemmNr bf16 in the pairs layout
  int64_t kc;             // even
  float* y;
  int64_t ldy;
  int nr;
  bool accumulate;
};

// Activation rows below which a PanelMatrix with bf16 pairs multiplies exactly (GemmTile) rather
// than by Bf16DotTile: decode steps of fewer sequences keep fp32 activations; prefill, bound by
// multiplies, takes vdpbf16ps's doubled rate. The choice is per call, so a decode step of this
// many sequences or more (or a prompt chunk this long) rounds too: a sequence's logits can depend
// on what shares its step, within bf16's rounding.
inline constexpr int64_t kBf16DotMinRows = 64;

// The int8 GEMM for quantized weights whose blocks Block32AsU8For unpacks. Weights are packed
// into panels of kInt8GemmNr rows: per 32-element block, 8 steps of 64 bytes (step s holds row
// j's codes 4s..4s+3 at bytes 4j..4j+3), then the rows' 16 scales and 16 mins as floats. x rows
// are quantized per 32 elements (ActBlock32, as for Q8_0 weights), and
// y[i, j] = Σ_b d_x·scale·(Σ u·q_x) − min·sum_x: integer products summed exactly per block, the
// block's scales applied in fp32 (gemm_int8_avx2.cc packs and quantizes).
inline constexpr int kInt8GemmNr = 16;
inline constexpr size_t kInt8PanelBlockBytes = 8 * 64 + 2 * kInt8GemmNr * sizeof(float);

// Q4_0, Q8_0, Q4_K, Q5_K and Q6_K weights as PanelMatrix keeps them for the VNNI tile (no per-call
// packing; the bytes of the file's blocks, rearranged): panels of kInt8GemmNr rows (rows past the
// matrix zero), per 32-element block the codes, then the rows' 16 f16 scales d; codes unsigned, as
// Block32AsU8 gives them. Q4_0: 4 chunks of 64 bytes, byte 4j + i of chunk c row j's qs[4c + i] —
// its low nibble code 4c + i (step c), its high nibble code 16 + 4c + i (step c + 4); value = d·q −
// 8·d. Q8_0: the 8 steps of the int8 GEMM's panels, each code flipped to unsigned (q ^ 0x80); value
// = d·u − 128·d.
inline constexpr size_t kQ4_0PanelBlockBytes = 4 * 64 + kInt8GemmNr * sizeof(uint16_t);
inline constexpr size_t kQ8_0PanelBlockBytes = 8 * 64 + kInt8GemmNr * sizeof(uint16_t);
// Q4_K: per 256-element super-block, the rows' 16 f16 d and 16 f16 dmin, then the 12 scale bytes
// as planes of 16 (byte b of row j at 64 + 16b + j), then its 8 sub-blocks' codes as Q4_0's (256
// bytes each: row j's codes l and 16 + l of sub-block k in the low and high nibble of byte
// 4j + l % 4 of chunk l / 4); sub-block k's scale d·s_k and min dmin·m_k (quant::ScalesAndMinsK4's
// 6-bit values).
inline constexpr size_t kQ4_KPanelGroupBytes =
    2 * kInt8GemmNr * sizeof(uint16_t) + 12 * kInt8GemmNr + 8 * 4 * 64;
// Q5_K: as Q4_K with a fifth chunk after each sub-block's 4, its byte 4j + i holding at bit c the
// fifth bit of row j's code 4c + i and at bit 4 + c that of code 16 + 4c + i.
inline constexpr size_t kQ5_KPanelGroupBytes =
    2 * kInt8GemmNr * sizeof(uint16_t) + 12 * kInt8GemmNr + 8 * 5 * 64;
// Q6_K: per super-block, the rows' 16 f16 d, then the 16 sub-blocks' int8 scales as planes
// (sub-block t of row j at 32 + 16t + j), then each of its 8 blocks of 32 elements as 6 chunks of
// 64 bytes: 4 of the codes' low nibbles as Q4_0's, then 2 of their top two bits — chunk u's byte 4j
// + i holds, at bits 2c and 2c + 1, those of row j's code 16u + 4c + i; sub-block t's scale d·s_t
// and min 32·d·s_t (value = d·s·(q − 32), q the 6-bit code). (In both the scales come first: read
// before the codes, they keep a super-block's reads in address order.)
inline constexpr size_t kQ6_KPanelGroupBytes =
    kInt8GemmNr * sizeof(uint16_t) + 16 * kInt8GemmNr + 8 * 6 * 64;
static_assert(kQ4_0PanelBlockBytes == kInt8GemmNr * BlockBytes(DType::kQ4_0) &&
                  kQ8_0PanelBlockBytes == kInt8GemmNr * BlockBytes(DType::kQ8_0) &&
                  kQ4_KPanelGroupBytes == kInt8GemmNr * BlockBytes(DType::kQ4_K) &&
                  kQ5_KPanelGroupBytes == kInt8GemmNr * BlockBytes(DType::kQ5_K) &&
                  kQ6_KPanelGroupBytes == kInt8GemmNr * BlockBytes(DType::kQ6_K),
              "a panel takes its 16 rows' bytes: panel p starts where row 16p does");

// Packs weight rows [begin, end) (`row_bytes` apart from `w`, `cols` columns) into
// ceil((end − begin) / kInt8GemmNr) panels of cols / 32 blocks each at `packed`; rows past `end`
// have zero codes, scales and mins.
void PackInt8Panels(Block32AsU8Fn unpack, const uint8_t* w, size_t row_bytes, int64_t cols,
                    int64_t begin, int64_t end, uint8_t* packed);

// QuantizeActivations(DType::kQ8_0, …)'s bytes, bit for bit, with AVX2.
void QuantizeActivations32(const float* x, int64_t cols, ActBlock32* out);

// QuantizeActivations32 of `rows` x rows (cols floats apart) into rows of cols / 32 blocks at
// `out`, the rows split across the pool's threads (matmul.cc).
void QuantizeActivationRows(ThreadPool& pool, const float* x, int64_t rows, int64_t cols,
                            ActBlock32* out);

// y[i, j] = Σ_c x[i, c]·W[j, c] for i < n and j < rows, W the `rows` rows packed at `packed`;
// x as n rows of cols / 32 ActBlock32, y rows `ldy` floats apart.
using Int8GemmFn = void (*)(const uint8_t* packed, int64_t rows, int64_t cols, const ActBlock32* x,
                            int64_t n, float* y, int64_t ldy);

// The int8 GEMM tile for `dtype` on this CPU and PDSERVE_SIMD level, or nullptr (formats
// Block32AsU8For does not take): AVX512-VNNI's where the CPU has it, else the AVX2 one.
Int8GemmFn Int8GemmFor(DType dtype);

namespace avx2 {
inline constexpr int kGemmMr = 6, kGemmNr = 16;  // 12 accumulators of 8 floats
void GemmTile(const GemmTileArgs& args);
void PackPanel(const float* const* src, int live, int64_t k0, int64_t kc, float* panel);

// The AVX2 tile for codes ≤ max_code (≤ 255): vpmaddubsw products summed in int16 over 8 steps
// for codes ≤ 15 (Q4_0, Q4_1, Q4_K), 4 for ≤ 31 (Q5_0, Q5_1, Q5_K) — steps × 2 × code × 127 <
// 2^15; larger codes (Q8_0) as signed bytes q = u − 128, |q| times x's codes given q's signs,
// widened every step. Tiles of 6 x rows × 8 weight rows (4 measured 6% slower); 1 or 2 x rows
// take a whole panel's 16 a tile.
Int8GemmFn Int8GemmPanelsFor(int max_code);
// The same tiles on PanelMatrix's Q4_0, Q8_0, Q4_K, Q5_K or Q6_K panels (kQ4_0PanelBlockBytes,
// kQ8_0PanelBlockBytes a block, the K-quants' sizes a super-block), their codes read as they lie
// and 8 rows' f16 scales widened at once: for all but Q6_K Int8GemmPanelsFor's sums, bit for bit,
// on PackInt8Panels of the same rows; Q6_K's units of 16 elements take ActBlock32's half_sums as
// their minimums' sums, as the VNNI tile does (and its sums equal that tile's). nullptr for other
// dtypes.
Int8GemmFn QuantPanelsGemm(DType dtype);
}  // namespace avx2

namespace avx512 {
inline constexpr int kGemmMr = 12, kGemmNr = 32;  // 24 accumulators of 16 floats
void GemmTile(const GemmTileArgs& args);
void PackPanel(const float* const* src, int live, int64_t k0, int64_t kc, float* panel);

// AVX512_BF16 (gemm_avx512_bf16.cc): the dot-product tile, mr ≤ kGemmMr, and the activations it
// reads: `rows` rows of x (`cols` floats apart, cols even) rounded to bf16 (nearest even) as pairs,
// row i's cols / 2 pairs at out[i · ldo], ldo ≥ cols / 2.
void Bf16DotTile(const Bf16DotTileArgs& args);
void RoundToBf16Pairs(const float* x, int64_t rows, int64_t cols, uint32_t* out, int64_t ldo);

// AMX (gemm_amx.cc): MultiplyChunkBf16Dot's product on tiles of kAmxMr x rows × one panel, four
// 16 × 16 fp32 accumulator tiles over 32 k a tdpbf16ps step and each K block's last kc % 32 k by
// vdpbf16ps: Bf16DotTile's sums up to the order of their fp32 additions (tdpbf16ps, too, takes
// subnormal inputs as zero and flushes subnormal results). Called only when AmxActive().
// Adds to y's values where `accumulate`.
inline constexpr int kAmxMr = 32;
// Activation rows from which a PanelMatrix's quantized products run on AMX tiles where
// AmxActive(): each range of panels dequantized to bf16 (DequantizePanelsToBf16Pairs) and x rounded
// to bf16, then AmxBf16Chunk — not the VNNI tile's int8 arithmetic, so a prompt's logits differ
// from a decode step's within bf16's rounding. Fewer rows (decode) keep the VNNI tile, which reads
// each panel once with no dequantization.
inline constexpr int64_t kAmxQuantMinRows = 64;
void AmxBf16Chunk(const uint32_t* x, int64_t ldx, int64_t n, int64_t cols, const uint16_t* chunk,
                  int64_t rows, float* y, int64_t ldy, bool accumulate = false);

// AVX512-VNNI (gemm_int8_vnni.cc): vpdpbusd, any code; tiles of 12 x rows × 16 weight rows.
void Int8GemmPanels(const uint8_t* packed, int64_t rows, int64_t cols, const ActBlock32* x,
                    int64_t n, float* y, int64_t ldy);
// The same tile on Q4_0, Q8_0, Q4_K, Q5_K or Q6_K panels (kQ4_0PanelBlockBytes,
// kQ8_0PanelBlockBytes a block; kQ4_KPanelGroupBytes, kQ5_KPanelGroupBytes, kQ6_KPanelGroupBytes a
// super-block): for all but Q6_K Int8GemmPanels's sums, bit for bit, on PackInt8Panels of the same
// rows; Q6_K's units of 16 elements take ActBlock32's half_sums as their minimums' sums. nullptr
// for other dtypes.
Int8GemmFn QuantPanelsGemm(DType dtype);
// Columns [k0, k0 + kc) of `panels` consecutive panels of those formats (of a matrix of `cols`
// columns; k0 and kc multiples of the format's group: 256 columns for K-quants, else 32), each
// weight the format's value as quant::DequantizeRow gives it (bit for bit for finite scales, as
// GCC builds it: scale·u − min in one fused rounding; an infinite scale gives NaN throughout, as
// the VNNI tile's sums do), rounded to bf16 as F32ToBF16 rounds, into ceil(panels / 2) bf16 panels
// of kGemmNr rows in the pairs layout (kc × kGemmNr elements each, back to back; an odd last one's
// second 16 rows zero) at `out`: what AmxBf16Chunk multiplies.
void DequantizePanelsToBf16Pairs(DType dtype, const uint8_t* packed, int64_t cols, int64_t k0,
                                 int64_t kc, int64_t panels, uint16_t* out);
}  // namespace avx512

// The widest panel of any level.
inline constexpr int kGemmMaxNr = avx2::kGemmNr > avx512::kGemmNr ? avx2::kGemmNr : avx512::kGemmNr;

// Weight rows per GEMM chunk, packed at a time; threads take such chunks in turn, which balances
// uneven threads. A multiple of every micro-kernel's panel width.
inline constexpr int64_t kGemmChunkRows = 128;
static_assert(kGemmChunkRows % avx2::kGemmNr == 0 && kGemmChunkRows % avx512::kGemmNr == 0,
              "a chunk's panels fill kGemmChunkRows rows exactly");
// Work items a prompt's GEMM aims to give each thread: with few, a thread that the machine slows
// (a shared VM's neighbours) holds the others up at the end (on a Zen 3 VM, 6 chunks of a 768-row
// matrix on 2 threads left the caller waiting a seventh of the time).
inline constexpr int64_t kGemmItemsPerThread = 8;
// Weight rows per range of a decode-sized product (the GEMV's, or a PanelMatrix's quantized
// panels for a few x rows) on `threads` threads: about four ranges per thread, in multiples of 16
// rows (matmul.cc).
int64_t GemvChunkRows(int64_t rows, int threads);

// Columns per K block: a block of a chunk's panels (128 × 1024 floats at most, 512 KiB) stays in
// L2 while the rows of x stream past it.
inline constexpr int64_t kGemmKc = 1024;

// The micro-kernel of one instruction set (kernels/cpu_features.h).
struct GemmKernel {
  int mr, nr;
  void (*tile)(const GemmTileArgs&);
  GemmPackFn pack;
};
GemmKernel GemmKernelFor(SimdLevel level);
GemmKernel ActiveGemmKernel();

// The layout of a packed chunk of `rows` ≤ kGemmChunkRows weight rows of `cols` columns: K block b
// (columns [b·kGemmKc, …), kc wide) holds the chunk's ceil(rows / kernel.nr) panels of
// kc × kernel.nr elements back to back, starting at element b·kGemmKc·panels·nr; rows past the
// chunk's are zeros.

// Packs weight rows [begin, end) of w (f32, f16, bf16 or quantized; end − begin ≤ kGemmChunkRows)
// into a chunk of fp32 panels at `packed`. `tmp` holds kernel.nr rows of cols floats (16-bit and
// quantized rows are widened there, a panel at a time).
void PackChunk(const GemmKernel& kernel, const Tensor& w, int64_t begin, int64_t end, float* packed,
               float* tmp);

// Calls tile(k0, kc, i0, mr, p, nr) for every tile of a product of n x rows by a chunk of `rows`
// weight rows of `cols` columns: per K block (columns [k0, k0 + kc)), every tile of mr ≤ kernel_mr
// x rows from row i0 (tiles of equal height: 16 rows go as 8 + 8, not 12 + 4) by panel p, whose
// first nr ≤ kernel_nr rows are live.
template <typename TileFn>
void ForEachGemmTile(int kernel_mr, int kernel_nr, int64_t n, int64_t cols, int64_t rows,
                     TileFn&& tile) {
  const int64_t panels = (rows + kernel_nr - 1) / kernel_nr;
  const int64_t tiles = (n + kernel_mr - 1) / kernel_mr, mr = (n + tiles - 1) / tiles;
  for (int64_t k0 = 0; k0 < cols; k0 += kGemmKc) {
    const int64_t kc = cols - k0 < kGemmKc ? cols - k0 : kGemmKc;
    for (int64_t i0 = 0; i0 < n; i0 += mr) {
      for (int64_t p = 0; p < panels; ++p) {
        tile(k0, kc, i0, static_cast<int>(n - i0 < mr ? n - i0 : mr), p,
             static_cast<int>(rows - p * kernel_nr < kernel_nr ? rows - p * kernel_nr : kernel_nr));
      }
    }
  }
}

// y[i, j] (+)= Σ_c x[i, c]·chunk[j, c] for i < n, j < rows: per K block, every (kernel.mr rows of
// x) × panel tile, K blocks after the first adding to y. x rows are `cols` floats apart, y rows
// `ldy`; the chunk's elements are `dtype` (f32, f16 or bf16), bf16 in the pairs layout if `pairs`
// (which requires the AVX-512 kernel: the AVX2 tile has no such layout).
void MultiplyChunk(const GemmKernel& kernel, const float* x, int64_t n, int64_t cols,
                   const void* chunk, DType dtype, bool pairs, int64_t rows, float* y, int64_t ldy);

// The same product with AVX-512 panels of bf16 pairs by bf16 dot products (AMX tiles where
// AmxActive(), else Bf16DotTile), x as RoundToBf16Pairs wrote its n rows, ldx pairs apart.
void MultiplyChunkBf16Dot(const uint32_t* x, int64_t ldx, int64_t n, int64_t cols,
                          const uint16_t* chunk, int64_t rows, float* y, int64_t ldy);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_GEMM_KERNELS_H_
