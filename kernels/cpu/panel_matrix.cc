#include "kernels/panel_matrix.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/tensor/float16.h"
#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/float16_rows.h"
#include "kernels/matmul.h"

namespace pdserve::kernels {
namespace {

// `n` floats that are `dtype` (f16 or bf16) values, widened from it, back into its bytes.
void NarrowExact(const float* x, int64_t n, DType dtype, uint8_t* out) {
  auto* halves = reinterpret_cast<uint16_t*>(out);
  if (dtype == DType::kF16) {
    FloatsToF16(x, n, halves);
  } else {
    for (int64_t i = 0; i < n; ++i) halves[i] = F32ToBF16(x[i]);
  }
}

// A chunk's `panels` fp32 panels of `nr` rows (PackChunk's layout, `cols` columns) as bf16 panels
// in the pairs layout (gemm_kernels.h); cols even.
void NarrowToBf16Pairs(const float* packed, int64_t panels, int64_t cols, int nr, uint8_t* out) {
  auto* halves = reinterpret_cast<uint16_t*>(out);
  for (int64_t k0 = 0; k0 < cols; k0 += kGemmKc) {
    const int64_t kc = std::min(kGemmKc, cols - k0);
    for (int64_t p = 0; p < panels; ++p) {
      const int64_t base = (k0 * panels + p * kc) * nr;
      for (int64_t k = 0; k < kc; ++k) {
        for (int j = 0; j < nr; ++j) {
          halves[base + (k / 2) * 2 * nr + 2 * j + k % 2] = F32ToBF16(packed[base + k * nr + j]);
        }
      }
    }
  }
}

// Pairs (floats: a pair of bf16 takes a float's bytes) a row of x rounded to bf16 takes in the
// workspace, padded by a cache line: a multiple of 4 KiB apart (2048 columns) a tile's 12 rows
// would share one L1 set.
int64_t PairsRowFloats(int64_t cols) { return cols / 2 + 16; }

// Rows [i0, i0 + rows) of x (cols floats apart) rounded to bf16 pairs, ldp apart, on the pool.
void RoundRowsToPairs(ThreadPool& pool, const float* x, int64_t i0, int64_t rows, int64_t cols,
                      uint32_t* pairs, int64_t ldp) {
  pool.ParallelFor(rows, 16, [&](int64_t begin, int64_t end, int) {
    avx512::RoundToBf16Pairs(x + (i0 + begin) * cols, end - begin, cols, pairs + begin * ldp, ldp);
  });
}

// Matmul's product on chunks of bf16 pairs by the dot-product tile: x rounded to bf16 pairs into
// `workspace`, in slabs of as many rows as it holds, then every chunk of each slab. False, doing
// nothing, when the workspace holds fewer rows than a tile's.
bool Bf16DotMatmul(ThreadPool& pool, const float* x, int64_t n, int64_t cols, int64_t rows,
                   const uint8_t* chunks, size_t chunk_bytes, float* y, int64_t ldy,
                   std::span<float> workspace) {
  const int64_t ldp = PairsRowFloats(cols);
  const int64_t slab = std::min<int64_t>(n, workspace.size() / ldp);
  if (slab < avx512::kGemmMr) return false;
  auto* pairs = reinterpret_cast<uint32_t*>(workspace.data());
  for (int64_t i0 = 0; i0 < n; i0 += slab) {
    const int64_t rows_x = std::min(slab, n - i0);
    RoundRowsToPairs(pool, x, i0, rows_x, cols, pairs, ldp);
    pool.ParallelForDynamic(rows, kGemmChunkRows, [&](int64_t begin, int64_t end, int) {
      const auto* chunk =
          reinterpret_cast<const uint16_t*>(chunks + begin / kGemmChunkRows * chunk_bytes);
      MultiplyChunkBf16Dot(pairs, ldp, rows_x, cols, chunk, end - begin, y + i0 * ldy + begin, ldy);
    });
  }
  return true;
}

// x rows per item at least: below, a chunk's weights would be read for too few tiles.
constexpr int64_t kGemmMinSliceTiles = 8;

// x rows per item of a GEMM over `chunks` weight chunks: all n where the chunks alone give every
// thread kGemmItemsPerThread items, else n split into as many slices (whole tiles of mr rows,
// kGemmMinSliceTiles at least) as make up the difference.
int64_t SliceRows(int64_t n, int64_t chunks, int threads, int mr) {
  const int64_t wanted = (kGemmItemsPerThread * threads + chunks - 1) / chunks;
  const int64_t slices =
      std::clamp<int64_t>(wanted, 1, std::max<int64_t>(1, n / (kGemmMinSliceTiles * mr)));
  return std::max<int64_t>(mr, (n / slices + mr - 1) / mr * mr);
}

// Source bytes per slice of a quantized matrix's packing, after which a releasing pack advises its
// pages out.
constexpr size_t kReleaseSliceBytes = size_t{2} << 20;

// Row j's block `block` into its panel's group of blocks at `out` (gemm_kernels.h's layouts).
void PackBlock(const quant::BlockQ4_0& block, int j, uint8_t* out) {
  for (int c = 0; c < 4; ++c) std::memcpy(out + 64 * c + 4 * j, block.qs + 4 * c, 4);
  std::memcpy(out + 4 * 64 + 2 * j, &block.d, sizeof(uint16_t));
}
void PackBlock(const quant::BlockQ8_0& block, int j, uint8_t* out) {
  for (int s = 0; s < 8; ++s) {
    for (int i = 0; i < 4; ++i) {
      out[64 * s + 4 * j + i] = static_cast<uint8_t>(block.qs[4 * s + i]) ^ 0x80;
    }
  }
  std::memcpy(out + 8 * 64 + 2 * j, &block.d, sizeof(uint16_t));
}
// K-quants: the header of scales (gemm_kernels.h), then the blocks' codes; bytes of the 16 rows'
// f16 scales and of the scale planes before the codes.
constexpr int kHalvesBytes = kInt8GemmNr * sizeof(uint16_t);
constexpr int kK4CodesAt = 2 * kHalvesBytes + quant::kScaleBytesK * kInt8GemmNr;
constexpr int kQ6_KCodesAt = kHalvesBytes + 16 * kInt8GemmNr;

// Q4_K's and Q5_K's (kFifthBit): the same header, then per sub-block 4 chunks of nibbles (and a
// fifth of the codes' fifth bits).
template <bool kFifthBit, typename Block>
void PackK4Block(const Block& block, int j, uint8_t* out) {
  std::memcpy(out + 2 * j, &block.d, sizeof(uint16_t));
  std::memcpy(out + kHalvesBytes + 2 * j, &block.dmin, sizeof(uint16_t));
  for (int b = 0; b < quant::kScaleBytesK; ++b)
    out[2 * kHalvesBytes + 16 * b + j] = block.scales[b];
  constexpr int kSubBlockBytes = (kFifthBit ? 5 : 4) * 64;
  for (int sub = 0; sub < 8; ++sub) {  // as Q4_0's nibbles
    const uint8_t* qs = block.qs + (sub / 2) * 32;
    const int shift = (sub & 1) * 4;
    uint8_t* codes = out + kK4CodesAt + kSubBlockBytes * sub + 4 * j;
    for (int l = 0; l < 16; ++l) {
      const int low = (qs[l] >> shift) & 0xF, high = (qs[16 + l] >> shift) & 0xF;
      codes[64 * (l / 4) + l % 4] = static_cast<uint8_t>(low | high << 4);
      if constexpr (kFifthBit) {
        const int fifth_low = (block.qh[l] >> sub) & 1, fifth_high = (block.qh[16 + l] >> sub) & 1;
        codes[4 * 64 + l % 4] |=
            static_cast<uint8_t>(fifth_low << (l / 4) | fifth_high << (4 + l / 4));
      }
    }
  }
}
void PackBlock(const quant::BlockQ4_K& block, int j, uint8_t* out) {
  PackK4Block<false>(block, j, out);
}
void PackBlock(const quant::BlockQ5_K& block, int j, uint8_t* out) {
  PackK4Block<true>(block, j, out);
}

void PackBlock(const quant::BlockQ6_K& block, int j, uint8_t* out) {
  std::memcpy(out + 2 * j, &block.d, sizeof(uint16_t));
  for (int t = 0; t < 16; ++t) {
    out[kHalvesBytes + 16 * t + j] = static_cast<uint8_t>(block.scales[t]);
  }
  uint8_t q[quant::kQK_K];  // the 6-bit codes in element order
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      int signed_codes[4];
      quant::Q6KSignedCodes(block.ql + 64 * half, block.qh + 32 * half, l, signed_codes);
      for (int m = 0; m < 4; ++m)
        q[128 * half + 32 * m + l] = static_cast<uint8_t>(signed_codes[m] + 32);
    }
  }
  for (int k = 0; k < 8; ++k) {
    const uint8_t* e = q + 32 * k;
    uint8_t* codes = out + kQ6_KCodesAt + 6 * 64 * k + 4 * j;
    for (int l = 0; l < 16; ++l) {  // chunk l / 4, byte l % 4 of row j's four
      const int c = l / 4, i = l % 4;
      codes[64 * c + i] = static_cast<uint8_t>((e[l] & 0xF) | (e[16 + l] & 0xF) << 4);
      codes[4 * 64 + i] |= static_cast<uint8_t>((e[l] >> 4) << (2 * c));
      codes[5 * 64 + i] |= static_cast<uint8_t>((e[16 + l] >> 4) << (2 * c));
    }
  }
}

// Rows [0, rows) of `w` (Block's rows, row_bytes apart, `blocks` Blocks each) as panels
// (gemm_kernels.h) at `out`; the last panel's rows past `rows` zero.
template <typename Block>
void PackPanels(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t blocks, uint8_t* out) {
  constexpr size_t group_bytes = kInt8GemmNr * sizeof(Block);  // gemm_kernels.h's static_assert
  for (int64_t r0 = 0; r0 < rows; r0 += kInt8GemmNr) {
    const int live = static_cast<int>(std::min<int64_t>(kInt8GemmNr, rows - r0));
    for (int64_t b = 0; b < blocks; ++b, out += group_bytes) {
      std::memset(out, 0, group_bytes);
      for (int j = 0; j < live; ++j) {
        PackBlock(reinterpret_cast<const Block*>(w + (r0 + j) * row_bytes)[b], j, out);
      }
    }
  }
}

// Rows of the parts of a quantized stack, each part's rounded up to whole panels: the space in
// which the product's ranges fall on panel boundaries.
int64_t PanelRows(const PanelMatrix& part) {
  return (part.rows() + kInt8GemmNr - 1) / kInt8GemmNr * kInt8GemmNr;
}

// A view of rows [begin, end) of w.
Tensor RowsView(const Tensor& w, int64_t begin, int64_t end) {
  Tensor rows;
  rows.dtype = w.dtype;
  rows.shape = {end - begin, w.cols()};
  rows.data = static_cast<const uint8_t*>(w.data) + begin * RowBytes(w.dtype, w.cols());
  return rows;
}

// Calls fn(begin, end, thread) over [0, n) in ranges of `chunk`: on the pool's threads, or on this
// one (thread 0) without a pool.
void ForRanges(ThreadPool* pool, int64_t n, int64_t chunk, const ThreadPool::RangeFn& fn) {
  if (pool != nullptr) {
    pool->ParallelForDynamic(n, chunk, fn);
  } else if (n > 0) {
    fn(0, n, 0);
  }
}

// Quantized rows `w` as panels at `out`, in slices of whole panels of about kReleaseSliceBytes of
// the source each (the pool's threads taking slices in turn); with `release_source`, each slice's
// whole source pages are released once it is packed (a page a slice edge cuts stays resident).
void PackQuantized(const Tensor& w, bool release_source, ThreadPool* pool, uint8_t* out) {
  const auto* rows = static_cast<const uint8_t*>(w.data);
  const size_t row_bytes = RowBytes(w.dtype, w.cols());  // a panel takes its rows' bytes
  const int64_t blocks = w.cols() / BlockElements(w.dtype);
  const int64_t slice =
      std::max<int64_t>(kInt8GemmNr, kReleaseSliceBytes / row_bytes / kInt8GemmNr * kInt8GemmNr);
  const int64_t slices = (w.rows() + slice - 1) / slice;
  ForRanges(pool, slices, 1, [&](int64_t first, int64_t last, int) {
    for (int64_t s = first; s < last; ++s) {
      const int64_t r0 = s * slice, live = std::min(slice, w.rows() - r0);
      const uint8_t* from = rows + r0 * row_bytes;
      uint8_t* to = out + r0 * row_bytes;
      switch (w.dtype) {
        case DType::kQ4_0:
          PackPanels<quant::BlockQ4_0>(from, row_bytes, live, blocks, to);
          break;
        case DType::kQ8_0:
          PackPanels<quant::BlockQ8_0>(from, row_bytes, live, blocks, to);
          break;
        case DType::kQ4_K:
          PackPanels<quant::BlockQ4_K>(from, row_bytes, live, blocks, to);
          break;
        case DType::kQ5_K:
          PackPanels<quant::BlockQ5_K>(from, row_bytes, live, blocks, to);
          break;
        default:
          PackPanels<quant::BlockQ6_K>(from, row_bytes, live, blocks, to);
      }
      if (release_source) ReleaseResidentPages(RowsView(w, r0, r0 + live));
    }
  });
}

// Float rows `w` as the chunks of `kernel`'s panels at `out` (`chunk_bytes` apart), bf16 ones in
// the pairs layout with `bf16_pairs`; chunks on the pool's threads in turn, each releasing its
// rows' whole source pages once packed with `release_source`.
void PackFloat(const Tensor& w, const GemmKernel& kernel, bool bf16_pairs, bool release_source,
               ThreadPool* pool, size_t chunk_bytes, uint8_t* out) {
  const int64_t rows = w.rows(), cols = w.cols();
  const int64_t chunks = (rows + kGemmChunkRows - 1) / kGemmChunkRows;
  // f32 chunks are packed in place; 16-bit ones as floats here, then narrowed back.
  const bool in_place = w.dtype == DType::kF32;
  const int threads = pool != nullptr ? pool->size() : 1;
  std::vector<std::vector<float>> packed(threads), widened(threads);
  ForRanges(pool, chunks, 1, [&](int64_t first, int64_t last, int thread) {
    std::vector<float>& chunk = packed[thread];
    std::vector<float>& panel_rows = widened[thread];  // PackChunk's rows of one panel
    chunk.resize(in_place ? 0 : kGemmChunkRows * cols);
    panel_rows.resize(kernel.nr * cols);
    for (int64_t c = first; c < last; ++c) {
      const int64_t begin = c * kGemmChunkRows, end = std::min(rows, begin + kGemmChunkRows);
      uint8_t* to = out + c * chunk_bytes;
      PackChunk(kernel, w, begin, end, in_place ? reinterpret_cast<float*>(to) : chunk.data(),
                panel_rows.data());
      const int64_t panels = (end - begin + kernel.nr - 1) / kernel.nr;
      if (bf16_pairs) {
        NarrowToBf16Pairs(chunk.data(), panels, cols, kernel.nr, to);
      } else if (!in_place) {
        NarrowExact(chunk.data(), panels * kernel.nr * cols, w.dtype, to);
      }
      if (release_source) ReleaseResidentPages(RowsView(w, begin, end));
    }
  });
}

}  // namespace

// The products of quantized stacks (Matmul on a span of parts): where each part's panels lie.
struct PanelParts {
  // Calls f(part, panels, from, to, first_row) for each part's rows [from, to) among the padded
  // rows [begin, end) of the stack (each part's rows rounded up to whole panels), `panels` where
  // the part's row `from` starts (panel p starts where row 16p does) and `first_row` the part's
  // first output column.
  template <typename F>
  static void ForEachRange(std::span<const PanelMatrix> parts, int64_t begin, int64_t end, F f) {
    int64_t first_padded = 0, first_row = 0;  // of the part at hand
    for (const PanelMatrix& part : parts) {
      const int64_t from = std::max(begin, first_padded) - first_padded;
      const int64_t to = std::min(end - first_padded, part.rows_);
      if (from < to) {
        const auto* panels = static_cast<const uint8_t*>(part.storage_.data);
        f(part, panels + from * RowBytes(part.dtype(), part.cols_), from, to, first_row);
      }
      first_padded += PanelRows(part);
      first_row += part.rows_;
    }
  }

  static int64_t PaddedRows(std::span<const PanelMatrix> parts) {
    int64_t rows = 0;
    for (const PanelMatrix& part : parts) rows += PanelRows(part);
    return rows;
  }

  // The product on AMX tiles: x rounded to bf16 pairs into the workspace, slab by slab, then per
  // range of a GEMM chunk's rows and K block, the range's panels dequantized to bf16 into its
  // thread's share of the workspace and multiplied by AmxBf16Chunk. False, doing nothing, when
  // the workspace holds the threads' shares and fewer x rows than a tile's.
  static bool AmxMatmul(ThreadPool& pool, const float* x, int64_t n,
                        std::span<const PanelMatrix> parts, float* y, int64_t ldy,
                        std::span<float> workspace) {
    const int64_t cols = parts.front().cols_;
    const int64_t ldp = PairsRowFloats(cols);
    const size_t share = kGemmChunkRows * std::min(cols, kGemmKc) / 2;  // a K block in bf16
    const size_t shares = static_cast<size_t>(pool.size()) * share;
    if (workspace.size() < shares) return false;
    const int64_t room = std::min<int64_t>(n, (workspace.size() - shares) / ldp);
    if (room < avx512::kAmxMr) return false;
    // Slabs of equal rows: every slab dequantizes the whole stack again, so none of a few rows.
    const int64_t slabs = (n + room - 1) / room, slab = (n + slabs - 1) / slabs;
    auto* pairs = reinterpret_cast<uint32_t*>(workspace.data() + shares);
    const int64_t padded_rows = PaddedRows(parts);
    for (int64_t i0 = 0; i0 < n; i0 += slab) {
      const int64_t rows_x = std::min(slab, n - i0);
      RoundRowsToPairs(pool, x, i0, rows_x, cols, pairs, ldp);
      pool.ParallelForDynamic(
          padded_rows, kGemmChunkRows, [&](int64_t begin, int64_t end, int thread) {
            auto* dequantized = reinterpret_cast<uint16_t*>(workspace.data() + thread * share);
            ForEachRange(parts, begin, end,
                         [&](const PanelMatrix& part, const uint8_t* panels, int64_t from,
                             int64_t to, int64_t first_row) {
                           const int64_t panels16 = (to - from + kInt8GemmNr - 1) / kInt8GemmNr;
                           for (int64_t k0 = 0; k0 < cols; k0 += kGemmKc) {
                             const int64_t kc = std::min(kGemmKc, cols - k0);
                             avx512::DequantizePanelsToBf16Pairs(part.dtype(), panels, cols, k0, kc,
                                                                 panels16, dequantized);
                             avx512::AmxBf16Chunk(pairs + k0 / 2, ldp, rows_x, kc, dequantized,
                                                  to - from, y + i0 * ldy + first_row + from, ldy,
                                                  k0 > 0);
                           }
                         });
          });
    }
    return true;
  }
};

namespace {

// The int8 tile that multiplies quantized panels packed for `level`: AVX512-VNNI's at the AVX-512
// level on a CPU with it, else AVX2's (both Q4_0, Q8_0 and the K-quants); nullptr where neither
// takes `dtype`.
Int8GemmFn QuantPanelsGemmFor(DType dtype, SimdLevel level) {
  if (level == SimdLevel::kAvx512 && GetCpuFeatures().avx512_vnni) {
    return avx512::QuantPanelsGemm(dtype);
  }
  return avx2::QuantPanelsGemm(dtype);
}

}  // namespace

// x quantized per 32 into the workspace once for every part (all take the same activations), in
// slabs of as many rows as it holds, then ranges of whole panels by the level's int8 tiles — ranges
// of a few panels for decode batches, so that both threads stream, of a GEMM chunk's rows for
// prefill — over all parts' panels (packed for one level) in one parallel pass. On CPUs with AMX,
// kAmxQuantMinRows or more rows take PanelParts::AmxMatmul instead.
void Matmul(ThreadPool& pool, const float* x, int64_t n, std::span<const PanelMatrix> parts,
            float* y, int64_t ldy, std::span<float> workspace) {
  const SimdLevel level = parts.front().level_;
  if (n >= avx512::kAmxQuantMinRows && level == SimdLevel::kAvx512 && AmxActive() &&
      PanelParts::AmxMatmul(pool, x, n, parts, y, ldy, workspace)) {
    return;
  }
  const int64_t cols = parts.front().cols_;
  const int64_t blocks = cols / quant::kQK;
  const size_t act_row_bytes = blocks * sizeof(ActBlock32);
  const int64_t slab = std::min<int64_t>(n, workspace.size_bytes() / act_row_bytes);
  if (slab == 0) {
    std::fprintf(stderr, "pdserve: Matmul on %s panels: a workspace of %zu bytes < %zu\n",
                 DTypeName(parts.front().dtype()), workspace.size_bytes(), act_row_bytes);
    std::abort();
  }
  const int64_t padded_rows = PanelParts::PaddedRows(parts);
  auto* acts = reinterpret_cast<ActBlock32*>(workspace.data());
  const int64_t chunk =
      n <= kGemvMaxBatch ? GemvChunkRows(padded_rows, pool.size()) : kGemmChunkRows;
  static_assert(kGemmChunkRows % kInt8GemmNr == 0, "ranges of whole panels");
  for (int64_t i0 = 0; i0 < n; i0 += slab) {
    const int64_t rows_x = std::min(slab, n - i0);
    QuantizeActivationRows(pool, x + i0 * cols, rows_x, cols, acts);
    pool.ParallelForDynamic(padded_rows, chunk, [&](int64_t begin, int64_t end, int) {
      PanelParts::ForEachRange(parts, begin, end,
                               [&](const PanelMatrix& part, const uint8_t* panels, int64_t from,
                                   int64_t to, int64_t first_row) {
                                 QuantPanelsGemmFor(part.dtype(), level)(
                                     panels, to - from, cols, acts, rows_x,
                                     y + i0 * ldy + first_row + from, ldy);
                               });
    });
  }
}

bool PanelMatrix::Takes(DType dtype, SimdLevel level) {
  return !IsQuantized(dtype) || QuantPanelsGemmFor(dtype, level) != nullptr;
}

PanelMatrix::PanelMatrix(const Tensor& w, SimdLevel level, bool bf16_dot, bool release_source,
                         ThreadPool* pool)
    : rows_(w.rows()),
      cols_(w.cols()),
      level_(level),
      bf16_pairs_(bf16_dot && GetCpuFeatures().avx512_bf16 && level == SimdLevel::kAvx512 &&
                  w.dtype == DType::kBF16 && w.cols() % 2 == 0) {
  if (IsQuantized(w.dtype)) {
    const int64_t panels = (rows_ + kInt8GemmNr - 1) / kInt8GemmNr;
    auto [storage, bytes] = NewTensor(w.dtype, {panels * kInt8GemmNr, cols_});
    PackQuantized(w, release_source, pool, bytes);
    storage_ = std::move(storage);
    return;
  }
  const int64_t chunks = (rows_ + kGemmChunkRows - 1) / kGemmChunkRows;
  auto [storage, bytes] = NewTensor(w.dtype, {chunks * kGemmChunkRows * cols_});
  PackFloat(w, GemmKernelFor(level_), bf16_pairs_, release_source, pool,
            kGemmChunkRows * cols_ * DTypeSize(w.dtype), bytes);
  storage_ = std::move(storage);
}

void Matmul(ThreadPool& pool, const float* x, int64_t n, const PanelMatrix& w, float* y,
            int64_t ldy, std::span<float> workspace) {
  const auto* bytes = static_cast<const uint8_t*>(w.storage_.data);
  if (IsQuantized(w.dtype())) {
    Matmul(pool, x, n, std::span<const PanelMatrix>(&w, 1), y, ldy, workspace);
    return;
  }
  const size_t chunk_bytes = kGemmChunkRows * w.cols_ * DTypeSize(w.dtype());
  if (w.bf16_pairs_ && n >= kBf16DotMinRows &&
      Bf16DotMatmul(pool, x, n, w.cols_, w.rows_, bytes, chunk_bytes, y, ldy, workspace)) {
    return;
  }
  const GemmKernel kernel = GemmKernelFor(w.level_);
  const int64_t chunks = (w.rows_ + kGemmChunkRows - 1) / kGemmChunkRows;
  const int64_t slice = SliceRows(n, chunks, pool.size(), kernel.mr);
  const int64_t slices = (n + slice - 1) / slice;
  // Item c · slices + s: chunk c by x rows [s · slice, …), the slices of a chunk in turn.
  pool.ParallelForDynamic(chunks * slices, 1, [&](int64_t item, int64_t, int) {
    const int64_t c = item / slices, i0 = item % slices * slice;
    const int64_t begin = c * kGemmChunkRows, end = std::min(w.rows_, begin + kGemmChunkRows);
    MultiplyChunk(kernel, x + i0 * w.cols_, std::min(slice, n - i0), w.cols_,
                  bytes + c * chunk_bytes, w.dtype(), w.bf16_pairs_, end - begin,
                  y + i0 * ldy + begin, ldy);
  });
}

}  // namespace pdserve::kernels
