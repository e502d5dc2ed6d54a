// Projection: the weights of one linear layer as an engine multiplies by them. A stack of one
// part that PanelMatrix takes (f32, f16, bf16; Q4_0, Q8_0, Q4_K, Q5_K and Q6_K on CPUs with
// AVX512-VNNI), or of several quantized parts it takes (formats mixed, as Q4_K_M's q, k in Q4_K
// with v in Q6_K), is packed once into PanelMatrix parts (every batch size then runs the GEMM's
// register tiles without packing per call); other weights stay as they are and take Matmul's
// tensor paths, read in place. Immutable; copies share the bytes; thread-safe for concurrent reads.
#ifndef PDSERVE_KERNELS_PROJECTION_H_
#define PDSERVE_KERNELS_PROJECTION_H_

#include <cstdint>
#include <span>
#include <vector>

#include "core/base/thread_pool.h"
#include "core/tensor/tensor.h"
#include "kernels/panel_matrix.h"

namespace pdserve::kernels {

class Projection {
 public:
  Projection() = default;
  // Requires matrices of one column count, stacked row-wise as by kernels::Matmul's parts. With
  // `release_source`, a part that is packed has its pages released as it goes
  // (PanelMatrix), for parts that are views of a file the caller reads no more. With `pool`, the
  // packing runs on its threads.
  explicit Projection(std::vector<Tensor> parts, bool release_source = false,
                      ThreadPool* pool = nullptr);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Whether the weights were packed (then the parts' own bytes are no longer needed).
  bool packed() const { return !panels_.empty(); }

 private:
  friend void Matmul(ThreadPool& pool, const float* x, int64_t n, const Projection& w, float* y,
                     std::span<float> workspace);

  int64_t rows_ = 0, cols_ = 0;
  std::vector<PanelMatrix> panels_;  // when packed: one, or a quantized stack's parts
  std::vector<Tensor> parts_;        // when not packed
};

// y[n, w.rows()] = x[n, w.cols()] · Wᵀ, as kernels::Matmul (workspace as it requires; a packed
// projection uses it only for a bf16 dot product's rounded activations).
void Matmul(ThreadPool& pool, const float* x, int64_t n, const Projection& w, float* y,
            std::span<float> workspace);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_PROJECTION_H_
