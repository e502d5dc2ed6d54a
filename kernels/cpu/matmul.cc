#include "kernels/matmul.h"

#include <algorithm>
#include <array>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/gemv_kernels.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu_features.h"

namespace pdserve::kernels {
namespace {

static_assert(kGemvMaxBatch == 4, "gemv_dispatch.inc handles batches of 1 to 4");

// Activation rows from which SGEMM beats repeated GEMV passes over the weights.
constexpr int64_t kGemmMinRows = 8;
// Weight rows per SGEMM call (and widened to fp32 at a time for 16-bit weights); threads take
// such chunks in turn, which balances uneven threads.
constexpr int64_t kGemmChunkRows = 128;
// GEMV chunks: about this many per thread, in multiples of 16 rows.
constexpr int64_t kGemvChunksPerThread = 4;

// In every function below, y's rows are `ldy` floats apart (≥ w.rows(): W may be one part of a
// row-stacked matrix).
void GemvRange(const float* x, int64_t n, const Tensor& w, float* y, int64_t ldy, int64_t begin,
               int64_t end) {
  const bool avx512 = ActiveSimdLevel() == SimdLevel::kAvx512;
  for (int64_t b = 0; b < n; b += kGemvMaxBatch) {
    GemvArgs args{x + b * w.cols(), static_cast<int>(std::min<int64_t>(kGemvMaxBatch, n - b)),
                  w.cols(),         w.data,
                  w.dtype,          w.cols(),
                  y + b * ldy,      ldy};
    if (avx512) {
      avx512::GemvRows(args, begin, end);
    } else {
      avx2::GemvRows(args, begin, end);
    }
  }
}

constexpr size_t kMaxGemvParts = 8;

// Decode-sized batches of quantized weights, row-stacked `parts` (≤ kMaxGemvParts) of one column
// count: each x row quantized once per activation format into `workspace`, then one
// integer dot product per (weight row, x row), all parts' rows in one parallel pass.
void QuantizedGemv(ThreadPool& pool, const float* x, int64_t n, std::span<const Tensor> parts,
                   float* y, int64_t ldy, std::span<float> workspace) {
  struct Part {
    const uint8_t* data;
    size_t row_bytes;
    QuantDotFn dot;
    const uint8_t* acts;
    size_t act_bytes;
    int64_t first_row;
  };
  const int64_t cols = parts.front().cols();
  std::array<Part, kMaxGemvParts> table;
  size_t used = 0;
  int64_t rows = 0;
  auto* free_acts = reinterpret_cast<uint8_t*>(workspace.data());
  for (const Tensor& w : parts) {
    Part p{static_cast<const uint8_t*>(w.data),
           RowBytes(w.dtype, cols),
           BestQuantDot(w.dtype),
           nullptr,
           QuantizedActivationBytes(w.dtype, cols),
           rows};
    for (size_t i = 0; i < used && p.acts == nullptr; ++i) {
      if (parts[i].dtype == w.dtype) p.acts = table[i].acts;  // same activation blocks
    }
    if (p.acts == nullptr) {
      for (int64_t b = 0; b < n; ++b) {
        QuantizeActivations(w.dtype, x + b * cols, cols, free_acts + b * p.act_bytes);
      }
      p.acts = free_acts;
      free_acts += n * p.act_bytes;
    }
    table[used++] = p;
    rows += w.rows();
  }
  const int64_t chunk =
      std::max<int64_t>(16, rows / (pool.size() * kGemvChunksPerThread) / 16 * 16);
  pool.ParallelForDynamic(rows, chunk, [&](int64_t begin, int64_t end, int) {
    size_t i = 0;
    for (int64_t r = begin; r < end; ++r) {
      while (i + 1 < used && r >= table[i + 1].first_row) ++i;
      const Part& p = table[i];
      const uint8_t* row = p.data + (r - p.first_row) * p.row_bytes;
      for (int64_t b = 0; b < n; ++b) y[b * ldy + r] = p.dot(row, p.acts + b * p.act_bytes, cols);
    }
  });
}

bool AllQuantized(std::span<const Tensor> parts) {
  return std::all_of(parts.begin(), parts.end(),
                     [](const Tensor& t) { return IsQuantized(t.dtype); });
}

// y[:, rows] = x · W[rows]ᵀ for `rows` consecutive fp32 weight rows starting at `w`.
void SgemmRows(const float* x, int64_t n, const float* w, int64_t rows, int64_t cols, float* y,
               int64_t ldy) {
  Sgemm({.m = n,
         .n = rows,
         .k = cols,
         .a = x,
         .lda = cols,
         .b = w,
         .ldb = cols,
         .b_transposed = true,
         .c = y,
         .ldc = ldy});
}

// Rows [begin, end) of y; at most kGemmChunkRows rows.
void GemmChunk(const float* x, int64_t n, const Tensor& w, float* y, int64_t ldy, int64_t begin,
               int64_t end, float* widened) {
  const int64_t cols = w.cols();
  if (w.dtype == DType::kF32) {
    SgemmRows(x, n, w.as<float>() + begin * cols, end - begin, cols, y + begin, ldy);
    return;
  }
  const auto* bytes = static_cast<const uint8_t*>(w.data);
  for (int64_t r = begin; r < end; ++r) {
    if (IsQuantized(w.dtype)) {
      float* dst = widened + (r - begin) * cols;
      if (!avx2::DequantizeRow(w.dtype, bytes + r * RowBytes(w.dtype, cols), cols, dst)) {
        RowAsFloat(w, r, dst);
      }
    } else {
      avx2::WidenRow(bytes + r * cols * DTypeSize(w.dtype), w.dtype, cols,
                     widened + (r - begin) * cols);
    }
  }
  SgemmRows(x, n, widened, end - begin, cols, y + begin, ldy);
}

}  // namespace

size_t MatmulWorkspaceFloats(int num_threads, int64_t max_cols) {
  return static_cast<size_t>(num_threads) * kGemmChunkRows * max_cols;
}

namespace {

void MatmulInto(ThreadPool& pool, const float* x, int64_t n, const Tensor& w, float* y, int64_t ldy,
                std::span<float> workspace) {
  if (n < kGemmMinRows && IsQuantized(w.dtype)) {
    QuantizedGemv(pool, x, n, std::span<const Tensor>(&w, 1), y, ldy, workspace);
    return;
  }
  if (n < kGemmMinRows) {
    const int64_t chunk =
        std::max<int64_t>(16, w.rows() / (pool.size() * kGemvChunksPerThread) / 16 * 16);
    pool.ParallelForDynamic(w.rows(), chunk, [&](int64_t begin, int64_t end, int) {
      GemvRange(x, n, w, y, ldy, begin, end);
    });
    return;
  }
  const size_t per_thread = kGemmChunkRows * w.cols();
  pool.ParallelForDynamic(w.rows(), kGemmChunkRows, [&](int64_t begin, int64_t end, int thread) {
    GemmChunk(x, n, w, y, ldy, begin, end, workspace.data() + thread * per_thread);
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
  if (n < kGemmMinRows && parts.size() <= kMaxGemvParts && AllQuantized(parts)) {
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
