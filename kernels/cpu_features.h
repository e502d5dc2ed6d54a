// Runtime CPU feature detection. pdserve requires AVX2+FMA+F16C (x86-64-v3); kernels with an
// AVX-512 variant use it when the CPU has AVX-512 F/BW/VL/DQ, unless PDSERVE_SIMD=avx2 is set in
// the environment (to compare paths); the quantized GEMV kernels also need VNNI and VBMI.
// Thread-safe: detected once.
#ifndef PDSERVE_KERNELS_CPU_FEATURES_H_
#define PDSERVE_KERNELS_CPU_FEATURES_H_

#include <string>

namespace pdserve::kernels {

enum class SimdLevel { kAvx2, kAvx512 };

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512 = false;       // F, BW, VL and DQ together
  bool avx512_vnni = false;  // AVX-512 with VNNI and VBMI as well (Ice Lake and later, Zen 4/5)
};

const CpuFeatures& GetCpuFeatures();

// The widest level both the CPU and the PDSERVE_SIMD override allow.
SimdLevel ActiveSimdLevel();

// "avx512" or "avx2".
const char* SimdLevelName(SimdLevel level);

// True when the CPU can run this binary (AVX2, FMA and F16C present).
bool CpuIsSupported();

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_FEATURES_H_
