#include "kernels/cpu/decode_rows.h"

#include "kernels/cpu_features.h"

namespace pdserve::kernels {

const DecodeRowKernels& ActiveDecodeRows() {
  return ActiveSimdLevel() == SimdLevel::kAvx512 ? avx512::kDecodeRows : avx2::kDecodeRows;
}

}  // namespace pdserve::kernels
