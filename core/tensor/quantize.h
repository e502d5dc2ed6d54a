// Quantization into ggml's block formats (quant_blocks.h), with ggml's reference algorithms
// (quantize_row_*_ref in ggml-quants.c, no importance matrix): the blocks llama-quantize writes
// for the same floats. Pure functions: thread-safe.
#ifndef PDSERVE_CORE_TENSOR_QUANTIZE_H_
#define PDSERVE_CORE_TENSOR_QUANTIZE_H_

#include <cstdint>

#include "core/tensor/dtype.h"

namespace pdserve::quant {

// Writes `n` floats at `src` as RowBytes(dtype, n) bytes of `dtype` blocks at `dst`.
// Requires IsQuantized(dtype), n % BlockElements(dtype) == 0 and finite inputs.
void QuantizeRow(DType dtype, const float* src, int64_t n, void* dst);

}  // namespace pdserve::quant

#endif  // PDSERVE_CORE_TENSOR_QUANTIZE_H_
