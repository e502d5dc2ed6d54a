#include "kernels/matmul.h"

#include <algorithm>
#include <array>
#include <vector>

#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/gemv_kernels.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu_features.h"

namespace pdserve::kernels {
namespace {

static_assert(kGemvMaxBatch == 4, "gemv_dispatch.inc handles batches of 1 to 4");

// Activation rows from which the GEMM beats BatchGemvRange, for 16-bit and f32 weights: the batched
// GEMV sweeps every x row over each block of weight rows in register tiles, without the GEMM's
// packing. For quantized weights each GEMV kernel says
// (QuantGemvKernel::gemm_from_rows).
constexpr int64_t kGemmMinRowsFloat = 64;
// The int8 GEMM quantizes x in slabs of at least this many rows.
constexpr int64_t kInt8GemmMinSlab = 8;
// GEMV chunks: about this many per thread, in multiples of 16 rows.
constexpr int64_t kGemvChunksPerThread = 4;
// Weight rows per block of the batched and the quantized GEMV: every x row passes over a block
// before the next starts, so W is read from memory once per call (16 rows are ≤ 128 KiB even for
// f32 at 2048 columns).
constexpr int64_t kGemvRowBlock = 16;
// Columns per slice of the batched GEMV: a block's slice (24 KiB as fp32) and a tile's x rows fit
// L1 together.
constexpr int64_t kBatchGemvKc = 384;

// In every function below, y's rows are `ldy` floats apart (≥ w.rows(): W may be one part of a
// row-stacked matrix).

// Rows [begin, end) for n ≤ kGemvMaxBatch x rows, streaming each weight row once.
void GemvRange(const float* x, int64_t n, const Tensor& w, float* y, int64_t ldy, int64_t begin,
               int64_t end) {
  const GemvArgs args{x, static_cast<int>(n), w.cols(), w.data, w.dtype, w.cols(), y, ldy};
  if (ActiveSimdLevel() == SimdLevel::kAvx512) {
    avx512::GemvRows(args, begin, end);
  } else {
    avx2::GemvRows(args, begin, end);
  }
}

// Rows [begin, end) for n > kGemvMaxBatch x rows, by blocks of kGemvRowBlock weight rows: column
// slice by column slice of at most kBatchGemvKc, the batched GEMV kernel sweeps every x row's slice
// over the block's slice (16-bit weights widened in registers) while both are in L1, slices after
// the first adding to y.
void BatchGemvRange(const float* x, int64_t n, const Tensor& w, float* y, int64_t ldy,
                    int64_t begin, int64_t end) {
  const int64_t cols = w.cols();
  const int64_t kc = (cols / ((cols + kBatchGemvKc - 1) / kBatchGemvKc) + 15) / 16 * 16;
  const int64_t slices = (cols + kc - 1) / kc;
  const size_t elem_bytes = DTypeSize(w.dtype), row_bytes = cols * elem_bytes;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  for (int64_t r = begin; r < end; r += kGemvRowBlock) {
    const int64_t rows = std::min(end, r + kGemvRowBlock) - r;
    // The next block's weights come into L2 while this one computes, a share per slice.
    const int64_t next_rows = std::clamp<int64_t>(end - r - rows, 0, kGemvRowBlock);
    const int64_t share = (next_rows * row_bytes + slices - 1) / slices;
    for (int64_t k0 = 0, s = 0; k0 < cols; k0 += kc, ++s) {
      const int64_t width = std::min(kc, cols - k0);
      const BatchGemvArgs args{.x = x + k0,
                               .ldx = cols,
                               .n = n,
                               .w = bytes + r * row_bytes + k0 * elem_bytes,
                               .w_dtype = w.dtype,
                               .ldw = cols,
                               .rows = rows,
                               .cols = width,
                               .y = y + r,
                               .ldy = ldy,
                               .accumulate = k0 > 0,
                               .prefetch = bytes + (r + rows) * row_bytes + s * share,
                               .prefetch_bytes = next_rows > 0 ? share : 0};
      ActiveBatchGemvRows(args);
    }
  }
}

constexpr size_t kMaxGemvParts = 8;

// Decode-sized batches of quantized weights, row-stacked `parts` (≤ kMaxGemvParts) of one column
// count: each x row quantized once per activation layout into `workspace`, then each part's
// BestQuantGemv kernel over blocks of kGemvRowBlock weight rows with every x row, while the block
// is in cache; all parts' rows in one parallel pass.
void QuantizedGemv(ThreadPool& pool, const float* x, int64_t n, std::span<const Tensor> parts,
                   float* y, int64_t ldy, std::span<float> workspace) {
  struct Part {
    DType dtype;
    const uint8_t* data;
    size_t row_bytes;
    QuantGemvKernel kernel;
    const uint8_t* acts;
    size_t act_bytes;
    int64_t first_row, end_row;
  };
  const int64_t cols = parts.front().cols();
  std::array<Part, kMaxGemvParts> table;
  size_t used = 0;
  int64_t rows = 0;
  auto* free_acts = reinterpret_cast<uint8_t*>(workspace.data());
  for (const Tensor& w : parts) {
    const QuantGemvKernel kernel = BestQuantGemv(w.dtype, cols);
    Part p{w.dtype,
           static_cast<const uint8_t*>(w.data),
           RowBytes(w.dtype, cols),
           kernel,
           nullptr,
           kernel.activation_bytes(w.dtype, cols),
           rows,
           rows + w.rows()};
    for (size_t i = 0; i < used && p.acts == nullptr; ++i) {
      if (table[i].kernel.quantize == kernel.quantize &&
          BlockElements(table[i].dtype) == BlockElements(w.dtype)) {
        p.acts = table[i].acts;  // the same activation bytes
      }
    }
    if (p.acts == nullptr) {
      for (int64_t b = 0; b < n; ++b) {
        kernel.quantize(w.dtype, x + b * cols, cols, free_acts + b * p.act_bytes);
      }
      p.acts = free_acts;
      free_acts += n * p.act_bytes;
    }
    table[used++] = p;
    rows = p.end_row;
  }
  const int64_t chunk = GemvChunkRows(rows, pool.size());
  pool.ParallelForDynamic(rows, chunk, [&](int64_t begin, int64_t end, int) {
    size_t i = 0;
    for (int64_t r = begin; r < end;) {
      while (r >= table[i].end_row) ++i;
      const Part& p = table[i];
      const int64_t block_end = std::min({end, p.end_row, r + kGemvRowBlock});
      const uint8_t* w = p.data + (r - p.first_row) * p.row_bytes;
      p.kernel.rows(p.dtype, w, p.row_bytes, block_end - r, p.acts, p.act_bytes,
                    static_cast<int>(n), cols, y + r, ldy);
      r = block_end;
    }
  });
}

// Whether QuantizedGemv takes n x rows of `parts`: all quantized, fewer rows than every part's
// kernel hands to the GEMM, and their activations fit the workspace.
bool TakesQuantizedGemv(std::span<const Tensor> parts, int64_t n, size_t workspace_bytes) {
  if (parts.size() > kMaxGemvParts) return false;
  size_t bytes = 0;
  for (const Tensor& w : parts) {
    if (!IsQuantized(w.dtype)) return false;
    const QuantGemvKernel kernel = BestQuantGemv(w.dtype, w.cols());
    if (n >= kernel.gemm_from_rows) return false;
    bytes += n * kernel.activation_bytes(w.dtype, w.cols());
  }
  return bytes <= workspace_bytes;
}

// Weight row r as floats: W's own row when f32, else widened or dequantized into `tmp` (cols).
const float* RowFloats(const Tensor& w, int64_t r, float* tmp) {
  const int64_t cols = w.cols();
  if (w.dtype == DType::kF32) return w.as<float>() + r * cols;
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  if (IsQuantized(w.dtype)) {
    if (!avx2::DequantizeRow(w.dtype, bytes + r * RowBytes(w.dtype, cols), cols, tmp)) {
      RowAsFloat(w, r, tmp);
    }
  } else {
    avx2::WidenRow(bytes + r * cols * DTypeSize(w.dtype), w.dtype, cols, tmp);
  }
  return tmp;
}

// Rows [begin, end) of y (at most kGemmChunkRows): the chunk's weights packed into `workspace`,
// then multiplied.
void GemmChunk(const GemmKernel& kernel, const float* x, int64_t n, const Tensor& w, float* y,
               int64_t ldy, int64_t begin, int64_t end, float* workspace) {
  const int64_t cols = w.cols(), panels = (end - begin + kernel.nr - 1) / kernel.nr;
  float* packed = workspace;  // then the widened rows of one panel
  PackChunk(kernel, w, begin, end, packed, packed + panels * kernel.nr * cols);
  MultiplyChunk(kernel, x, n, cols, packed, DType::kF32, false, end - begin, y + begin, ldy);
}

// Weight rows per range of Int8Gemm: kGemmChunkRows, halved (down to 32) until `rows` give every
// thread kGemmItemsPerThread ranges.
int64_t Int8GemmRangeRows(int64_t rows, int threads) {
  int64_t range = kGemmChunkRows;
  while (range > 2 * kInt8GemmNr && (rows + range - 1) / range < kGemmItemsPerThread * threads) {
    range /= 2;
  }
  return range;
}

// Prefill on quantized weights with int8 products where Int8GemmFor has a tile: x quantized once
// per 32 into the workspace, then ranges of at most kGemmChunkRows weight rows packed by each
// thread and multiplied. x goes in slabs of as many rows as the workspace holds beside the threads'
// panels. False, doing nothing, where the path does not apply.
bool Int8Gemm(ThreadPool& pool, const float* x, int64_t n, const Tensor& w, float* y, int64_t ldy,
              std::span<float> workspace) {
  const Int8GemmFn gemm = Int8GemmFor(w.dtype);
  if (gemm == nullptr) return false;
  const Block32AsU8Fn unpack = Block32AsU8For(w.dtype);
  const int64_t cols = w.cols(), blocks = cols / quant::kQK;
  const size_t panel_bytes = (kGemmChunkRows / kInt8GemmNr) * blocks * kInt8PanelBlockBytes;
  const size_t act_row_bytes = blocks * sizeof(ActBlock32);
  auto* bytes = reinterpret_cast<uint8_t*>(workspace.data());
  const size_t panels_total = pool.size() * panel_bytes;
  if (workspace.size_bytes() < panels_total + kInt8GemmMinSlab * act_row_bytes) return false;
  const int64_t slab =
      std::min<int64_t>(n, (workspace.size_bytes() - panels_total) / act_row_bytes);
  auto* acts = reinterpret_cast<ActBlock32*>(bytes + panels_total);
  const auto* data = static_cast<const uint8_t*>(w.data);
  const size_t row_bytes = RowBytes(w.dtype, cols);
  for (int64_t i0 = 0; i0 < n; i0 += slab) {
    const int64_t rows_x = std::min(slab, n - i0);
    QuantizeActivationRows(pool, x + i0 * cols, rows_x, cols, acts);
    const int64_t range = Int8GemmRangeRows(w.rows(), pool.size());
    pool.ParallelForDynamic(w.rows(), range, [&](int64_t begin, int64_t end, int thread) {
      uint8_t* panels = bytes + thread * panel_bytes;
      PackInt8Panels(unpack, data, row_bytes, cols, begin, end, panels);
      gemm(panels, end - begin, cols, acts, rows_x, y + i0 * ldy + begin, ldy);
    });
  }
  return true;
}

}  // namespace

void PackChunk(const GemmKernel& kernel, const Tensor& w, int64_t begin, int64_t end, float* packed,
               float* tmp) {
  const int nr = kernel.nr;
  const int64_t cols = w.cols(), rows = end - begin, panels = (rows + nr - 1) / nr;
  const float* src[kGemmMaxNr];
  for (int64_t p = 0; p < panels; ++p) {
    const int live = static_cast<int>(std::min<int64_t>(nr, rows - p * nr));
    for (int j = 0; j < live; ++j) src[j] = RowFloats(w, begin + p * nr + j, tmp + j * cols);
    for (int64_t k0 = 0; k0 < cols; k0 += kGemmKc) {
      const int64_t kc = std::min(kGemmKc, cols - k0);
      kernel.pack(src, live, k0, kc, packed + k0 * panels * nr + p * kc * nr);
    }
  }
}

void MultiplyChunk(const GemmKernel& kernel, const float* x, int64_t n, int64_t cols,
                   const void* chunk, DType dtype, bool pairs, int64_t rows, float* y,
                   int64_t ldy) {
  const int64_t panels = (rows + kernel.nr - 1) / kernel.nr;
  const auto* bytes = static_cast<const uint8_t*>(chunk);
  const size_t elem_bytes = DTypeSize(dtype);
  ForEachGemmTile(kernel.mr, kernel.nr, n, cols, rows,
                  [&](int64_t k0, int64_t kc, int64_t i0, int mr, int64_t p, int nr) {
                    kernel.tile({.x = x + i0 * cols + k0,
                                 .ldx = cols,
                                 .mr = mr,
                                 .panel = bytes + (k0 * panels + p * kc) * kernel.nr * elem_bytes,
                                 .panel_dtype = dtype,
                                 .kc = kc,
                                 .y = y + i0 * ldy + p * kernel.nr,
                                 .ldy = ldy,
                                 .nr = nr,
                                 .accumulate = k0 > 0,
                                 .pairs = pairs});
                  });
}

void MultiplyChunkBf16Dot(const uint32_t* x, int64_t ldx, int64_t n, int64_t cols,
                          const uint16_t* chunk, int64_t rows, float* y, int64_t ldy) {
  if (AmxActive()) {
    avx512::AmxBf16Chunk(x, ldx, n, cols, chunk, rows, y, ldy);
    return;
  }
  constexpr int kNr = avx512::kGemmNr;
  const int64_t panels = (rows + kNr - 1) / kNr;
  ForEachGemmTile(avx512::kGemmMr, kNr, n, cols, rows,
                  [&](int64_t k0, int64_t kc, int64_t i0, int mr, int64_t p, int nr) {
                    avx512::Bf16DotTile({.x = x + i0 * ldx + k0 / 2,
                                         .ldx = ldx,
                                         .mr = mr,
                                         .panel = chunk + (k0 * panels + p * kc) * kNr,
                                         .kc = kc,
                                         .y = y + i0 * ldy + p * kNr,
                                         .ldy = ldy,
                                         .nr = nr,
                                         .accumulate = k0 > 0});
                  });
}

void ActiveBatchGemvRows(const BatchGemvArgs& args) {
  if (ActiveSimdLevel() == SimdLevel::kAvx512) {
    avx512::BatchGemvRows(args);
  } else {
    avx2::BatchGemvRows(args);
  }
}

GemmKernel GemmKernelFor(SimdLevel level) {
  if (level == SimdLevel::kAvx512) {
    return {avx512::kGemmMr, avx512::kGemmNr, &avx512::GemmTile, &avx512::PackPanel};
  }
  return {avx2::kGemmMr, avx2::kGemmNr, &avx2::GemmTile, &avx2::PackPanel};
}

GemmKernel ActiveGemmKernel() { return GemmKernelFor(ActiveSimdLevel()); }

void QuantizeActivationRows(ThreadPool& pool, const float* x, int64_t rows, int64_t cols,
                            ActBlock32* out) {
  const int64_t blocks = cols / quant::kQK;
  pool.ParallelFor(rows, 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      QuantizeActivations32(x + i * cols, cols, out + i * blocks);
    }
  });
}

int64_t GemvChunkRows(int64_t rows, int threads) {
  return std::max<int64_t>(16, rows / (threads * kGemvChunksPerThread) / 16 * 16);
}

size_t MatmulWorkspaceFloats(int num_threads, int64_t max_cols) {
  // Per thread: a chunk's panels, then one panel's rows widened; and a K block of a chunk's rows
  // in bf16, a thread's share of a quantized prompt's product on AMX tiles (panel_matrix.cc), so
  // that the rest holds a 512-token prompt's rows of x in bf16 at two threads.
  return static_cast<size_t>(num_threads) *
         ((kGemmChunkRows + kGemmMaxNr) * max_cols +
          kGemmChunkRows * std::min<int64_t>(max_cols, kGemmKc) / 2);
}

namespace {

void MatmulInto(ThreadPool& pool, const float* x, int64_t n, const Tensor& w, float* y, int64_t ldy,
                std::span<float> workspace) {
  if (TakesQuantizedGemv(std::span<const Tensor>(&w, 1), n, workspace.size_bytes())) {
    QuantizedGemv(pool, x, n, std::span<const Tensor>(&w, 1), y, ldy, workspace);
    return;
  }
  if (n < kGemmMinRowsFloat && !IsQuantized(w.dtype)) {
    const int64_t chunk = GemvChunkRows(w.rows(), pool.size());
    pool.ParallelForDynamic(w.rows(), chunk, [&](int64_t begin, int64_t end, int) {
      if (n <= kGemvMaxBatch) {
        GemvRange(x, n, w, y, ldy, begin, end);
      } else {
        BatchGemvRange(x, n, w, y, ldy, begin, end);
      }
    });
    return;
  }
  if (IsQuantized(w.dtype) && Int8Gemm(pool, x, n, w, y, ldy, workspace)) return;
  const GemmKernel kernel = ActiveGemmKernel();
  const size_t per_thread = (kGemmChunkRows + kGemmMaxNr) * w.cols();
  pool.ParallelForDynamic(w.rows(), kGemmChunkRows, [&](int64_t begin, int64_t end, int thread) {
    GemmChunk(kernel, x, n, w, y, ldy, begin, end, workspace.data() + thread * per_thread);
  });
}

}  // namespace

void Matmul(ThreadPool& pool, const float* x, int64_t n, const Tensor& w, float* y,
            std::span<float> workspace) {
  MatmulInto(pool, x, n, w, y, w.rows(), workspace);
}

void Matmul(ThreadPool& pool, const float* x, int64_t n, std::span<const Tensor> parts, float* y,
            std::span<float> workspace) {
  int64_t rows = 0;
  for (const Tensor& part : parts) rows += part.rows();
  if (TakesQuantizedGemv(parts, n, workspace.size_bytes())) {
    QuantizedGemv(pool, x, n, parts, y, rows, workspace);
    return;
  }
  int64_t offset = 0;
  for (const Tensor& part : parts) {
    MatmulInto(pool, x, n, part, y + offset, rows, workspace);
    offset += part.rows();
  }
}

void MatmulReference(const float* x, int64_t n, const Tensor& w, float* y) {
  const int64_t rows = w.rows(), cols = w.cols();
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    RowAsFloat(w, r, row.data());
    for (int64_t b = 0; b < n; ++b) {
      float sum = 0.0f;
      for (int64_t c = 0; c < cols; ++c) sum += row[c] * x[b * cols + c];
      y[b * rows + r] = sum;
    }
  }
}

}  // namespace pdserve::kernels
