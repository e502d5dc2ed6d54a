// PanelMatrix: an f32, f16, bf16 (or Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K, below) weight matrix [rows,
// cols] stored once — at model load — in the layout the GEMM's micro-kernels read
// (kernels/cpu/gemm_kernels.h), instead of packed again on every call: chunks of 128 rows, each the
// K blocks of its panels of the SIMD level's panel width, k-major, in the matrix's own dtype
// (16-bit elements are widened in registers as a kernel reads them, so the matrix takes the bytes
// it took as rows). Matmul on it runs every batch — one decode row to a whole prefill — through the
// same register tiles, reading each weight once per tile of x rows (12 with AVX-512, 6 with AVX2).
// bf16 matrices on CPUs where Bf16DotActive() keep their panels in the pairs layout
// (kernels/cpu/gemm_kernels.h), so that prefill-sized products run vdpbf16ps on activations rounded
// to bf16 while smaller ones stay exact. A Q4_0, Q8_0, Q4_K, Q5_K or Q6_K matrix is kept as panels
// of 16 rows whose blocks' bytes are rearranged for the int8 tiles (gemm_kernels.h; the same bytes
// as its rows): every batch quantizes x per 32 and runs the level's tile (AVX512-VNNI's, or
// AVX2's), one row of x for decode as a prompt's for prefill, with no per-call packing. Immutable
// after construction; copies share the bytes; thread-safe for concurrent reads.
#ifndef PDSERVE_KERNELS_PANEL_MATRIX_H_
#define PDSERVE_KERNELS_PANEL_MATRIX_H_

#include <cstdint>
#include <span>

#include "core/base/thread_pool.h"
#include "core/tensor/tensor.h"
#include "kernels/cpu_features.h"

namespace pdserve::kernels {

class PanelMatrix {
 public:
  PanelMatrix() = default;
  // Requires w [rows, cols] with Takes(w.dtype, level), and a level the CPU has. Packed for
  // `level`, whose kernels Matmul then uses; with `bf16_dot` (taken at the AVX-512 level on a CPU
  // with AVX512_BF16, ignored elsewhere), a bf16 matrix of even cols multiplies kBf16DotMinRows or
  // more x rows by vdpbf16ps.
  // With `release_source`, the source's pages are released (ReleaseResidentPages) slice by slice
  // as they are packed — for a source read no more, such as a file mapping, whose pages would
  // otherwise stay resident beside the panels. With
  // `pool`, the packing runs on its threads (not concurrently with other work on that pool).
  explicit PanelMatrix(const Tensor& w, SimdLevel level = ActiveSimdLevel(),
                       bool bf16_dot = Bf16DotActive(), bool release_source = false,
                       ThreadPool* pool = nullptr);

  // Whether a matrix of `dtype` can be packed for `level`: f32, f16, bf16, Q4_0, Q8_0, Q4_K, Q5_K
  // and Q6_K at every level (quantized panels feed the level's int8 tile, for decode as for
  // prefill).
  static bool Takes(DType dtype, SimdLevel level = ActiveSimdLevel());

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  DType dtype() const { return storage_.dtype; }
  SimdLevel level() const { return level_; }  // whose kernels multiply it
  bool empty() const { return storage_.empty(); }
  // Whether products of many rows round x to bf16 and run vdpbf16ps.
  bool bf16_dot() const { return bf16_pairs_; }

 private:
  friend void Matmul(ThreadPool& pool, const float* x, int64_t n, const PanelMatrix& w, float* y,
                     int64_t ldy, std::span<float> workspace);
  friend void Matmul(ThreadPool& pool, const float* x, int64_t n,
                     std::span<const PanelMatrix> parts, float* y, int64_t ldy,
                     std::span<float> workspace);
  friend struct PanelParts;  // panel_matrix.cc: where a quantized stack's panels lie

  int64_t rows_ = 0, cols_ = 0;
  SimdLevel level_ = SimdLevel::kAvx2;
  bool bf16_pairs_ = false;  // bf16 panels in the pairs layout
  Tensor storage_;           // the chunks back to back, each kGemmChunkRows · cols elements apart;
                             // quantized: the panels back to back, rows rounded up to whole panels
};

// y[i, j] = Σ_c x[i, c]·W[j, c] for i < n, j < w.rows(): x rows w.cols() floats apart, y rows
// `ldy` ≥ w.rows() apart, y not aliasing x; accumulation in fp32. `workspace` (aliasing neither x
// nor y) holds, in slabs of as many rows as fit, the rounded activations of w.bf16_dot()'s
// products (with room for fewer than a tile's rows the product is exact instead) or a quantized
// matrix's quantized ones (room for one row required: aborts, saying so, without it);
// MatmulWorkspaceFloats of the pool's threads and w.cols() is plenty. Unused otherwise. Does not
// allocate.
void Matmul(ThreadPool& pool, const float* x, int64_t n, const PanelMatrix& w, float* y,
            int64_t ldy, std::span<float> workspace);

// The same product by a stack of quantized matrices of one column count (`parts`, each of a dtype
// PanelMatrix takes quantized; Q4_K_M stores some layers' V in Q6_K beside Q4_K Q and K): y[i,
// o_p + j] for row j of part p, o_p the rows of the parts before it; x quantized once, every part's
// panels in one parallel pass. Each part's outputs equal, bit for bit, those of Matmul on it alone.
void Matmul(ThreadPool& pool, const float* x, int64_t n, std::span<const PanelMatrix> parts,
            float* y, int64_t ldy, std::span<float> workspace);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_PANEL_MATRIX_H_
