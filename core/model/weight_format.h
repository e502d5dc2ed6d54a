// WeightFormat: how an engine holds a model's matrices. Plain matrices (f32/f16/bf16) are
// converted to `dtype`. Quantized ones (ggml block formats, from GGUF files) stay as stored when
// `keep_quantized` — the CPU kernels read them in place (kernels/matmul.h) — and are dequantized
// to `dtype` otherwise (the CUDA engine has no quantized kernels). Matrices an engine transforms
// (ZACK's folded V/O, SwiftKV's) are floats by then and simply converted. Immutable value type.
#ifndef PDSERVE_CORE_MODEL_WEIGHT_FORMAT_H_
#define PDSERVE_CORE_MODEL_WEIGHT_FORMAT_H_

#include <vector>

#include "core/tensor/dtype.h"
#include "core/tensor/tensor.h"

namespace pdserve {

// Matrices of one column count stacked row-wise, [Σ rows, cols]: one part when they share a format
// (the usual case), one part per matrix when kept quantized matrices differ in format.
// kernels::Matmul takes `parts` as one matrix.
struct StackedWeights {
  std::vector<Tensor> parts;

  int64_t rows() const;
  int64_t cols() const { return parts.empty() ? 0 : parts.front().cols(); }
  // The one part of a stack whose matrices share a format (engines without mixed-format kernels).
  // Requires parts.size() == 1.
  const Tensor& single() const { return parts.front(); }
};

struct WeightFormat {
  DType dtype = DType::kF32;  // f32, f16 or bf16
  bool keep_quantized = true;

  // `t` as the engine runs it; shares t's bytes when nothing changes.
  Tensor Apply(const Tensor& t) const;
  // Apply, for a `t` read no more: where that converted it, t's pages are released
  // (ReleaseResidentPages), as by ApplyOwned.
  Tensor ApplyReleasing(const Tensor& t) const;
  // Apply, in memory of the engine's own (CopyTensor's huge pages: decode streams them ~10%
  // faster than a file mapping's 4 KiB pages). The source's pages are released
  // (ReleaseResidentPages), so that a model read from a file is resident once (its bytes stay
  // readable: a file's pages are read again when touched).
  Tensor ApplyOwned(const Tensor& t) const;
  // Matrices stacked row-wise after Apply, in memory of the engine's own: one ConcatRows part when
  // they share a format, else ApplyOwned parts (only kept quantized ones can differ). The sources'
  // pages are released as by ApplyOwned.
  StackedWeights Stack(const std::vector<Tensor>& parts) const;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_WEIGHT_FORMAT_H_
