#include "kernels/panel_matrix.h"

#include <algorithm>
#include <vector>

#include "core/tensor/float16.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/float16_rows.h"

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

}  // namespace

PanelMatrix::PanelMatrix(const Tensor& w, SimdLevel level)
    : rows_(w.rows()), cols_(w.cols()), level_(level) {
  const GemmKernel kernel = GemmKernelFor(level_);
  const int64_t chunks = (rows_ + kGemmChunkRows - 1) / kGemmChunkRows;
  auto [storage, bytes] = NewTensor(w.dtype, {chunks * kGemmChunkRows * cols_});
  const size_t chunk_bytes = kGemmChunkRows * cols_ * DTypeSize(w.dtype);
  // f32 chunks are packed in place; 16-bit ones as floats here, then narrowed back.
  const bool in_place = w.dtype == DType::kF32;
  std::vector<float> packed(in_place ? 0 : kGemmChunkRows * cols_);
  std::vector<float> widened(kernel.nr * cols_);  // PackChunk's rows of one panel
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kGemmChunkRows, end = std::min(rows_, begin + kGemmChunkRows);
    uint8_t* to = bytes + c * chunk_bytes;
    PackChunk(kernel, w, begin, end, in_place ? reinterpret_cast<float*>(to) : packed.data(),
              widened.data());
    if (!in_place) {
      const int64_t elements = (end - begin + kernel.nr - 1) / kernel.nr * kernel.nr * cols_;
      NarrowExact(packed.data(), elements, w.dtype, to);
    }
  }
  storage_ = std::move(storage);
}

void Matmul(ThreadPool& pool, const float* x, int64_t n, const PanelMatrix& w, float* y,
            int64_t ldy) {
  const GemmKernel kernel = GemmKernelFor(w.level_);
  const auto* bytes = static_cast<const uint8_t*>(w.storage_.data);
  const size_t chunk_bytes = kGemmChunkRows * w.cols_ * DTypeSize(w.dtype());
  // Each range is one chunk.
  pool.ParallelForDynamic(w.rows_, kGemmChunkRows, [&](int64_t begin, int64_t end, int) {
    MultiplyChunk(kernel, x, n, w.cols_, bytes + begin / kGemmChunkRows * chunk_bytes, w.dtype(),
                  end - begin, y + begin, ldy);
  });
}

}  // namespace pdserve::kernels
