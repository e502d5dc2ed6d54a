// Runtime CPU feature detection. pdserve requires AVX2+FMA+F16C (x86-64-v3); kernels with an
// AVX-512 variant use it when the CPU has AVX-512 F/BW/VL/DQ, unless PDSERVE_SIMD=avx2 is set in
// the environment (to compare paths); the quantized GEMV kernels also need VNNI and VBMI, and the
// bf16 dot-product GEMM AVX512_BF16 (Bf16DotActive), which runs on AMX tiles where the CPU and
// the kernel offer them (AmxActive). Thread-safe: detected once.
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
  bool avx512_bf16 = false;  // AVX-512 with AVX512_BF16 (vdpbf16ps: Cooper Lake and later, Zen 4/5)
  // AMX-TILE, AMX-BF16 and AMX-INT8 (Sapphire Rapids and later Xeons) on AVX-512, with the tile
  // data enabled by the OS and this process permitted to use it (Linux's ARCH_REQ_XCOMP_PERM,
  // requested once, for every thread, by the first GetCpuFeatures).
  bool amx = false;
  bool amd = false;  // the vendor is AuthenticAMD
};

const CpuFeatures& GetCpuFeatures();

// The widest level both the CPU and the PDSERVE_SIMD override allow.
SimdLevel ActiveSimdLevel();

// Whether bf16 weight matrices multiply many activation rows (prefill) by bf16 dot products, the
// activations rounded to bf16 (as llama.cpp does for bf16 weights), instead of widening the weights
// to fp32 FMAs: on AVX-512 CPUs with AVX512_BF16 whose vdpbf16ps runs at the FMA's instruction
// rate, i.e. twice its flops — AMD Zen 4 (measured) and Zen 5 (where llama.cpp's bf16 prefill on
// it outran fp32 FMAs) — and on CPUs with AMX (AmxActive), whose tiles multiply them at several
// times the FMA's flops (docs/measurements.md). Other Intel Xeons run vdpbf16ps at a quarter of
// the FMA's instruction rate, half its flops, so not there. PDSERVE_BF16_DOT=off turns it off, =on
// forces it on any CPU with AVX512_BF16 (both for tests and A/B runs); needs the AVX-512 level
// (not with PDSERVE_SIMD=avx2).
bool Bf16DotActive();

// Whether the bf16 dot products run on AMX tiles (gemm_amx.cc) rather than vdpbf16ps, and prompts
// on quantized panels on those tiles too (dequantized to bf16) rather than the VNNI int8 tile: on
// CPUs with AMX (CpuFeatures::amx) at the AVX-512 level, unless PDSERVE_AMX=off.
bool AmxActive();

// What is wrong with the overrides `simd` (PDSERVE_SIMD: avx2, or avx512 where the CPU `f` has
// it), `bf16_dot` (PDSERVE_BF16_DOT: off, or on where `f` has AVX512_BF16 and `simd` leaves the
// AVX-512 level) and `amx` (PDSERVE_AMX: off, or on where `f` has AMX) — e.g.
// "PDSERVE_SIMD=avx5l2: expected avx2 or avx512" — or "" when all are valid; null or empty values
// are unset. ActiveSimdLevel, Bf16DotActive and AmxActive take what they know and ignore the rest,
// so a program asks this once at start and refuses to run on an error.
std::string SimdOverrideError(const char* simd, const char* bf16_dot, const char* amx,
                              const CpuFeatures& f);
// The same for this process's environment and CPU.
std::string SimdOverrideError();

// "avx512" or "avx2".
const char* SimdLevelName(SimdLevel level);

// True when the CPU can run this binary (AVX2, FMA and F16C present).
bool CpuIsSupported();

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_FEATURES_H_
