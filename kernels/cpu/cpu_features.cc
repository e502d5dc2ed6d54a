#include "kernels/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace pdserve::kernels {
namespace {

// Whether the CPU has AMX-TILE, AMX-BF16 and AMX-INT8, the OS saves their state (XCR0 bits 17
// and 18) and grants this process the tile data (Linux: arch_prctl ARCH_REQ_XCOMP_PERM, feature
// 18, which holds for every thread of the process).
bool AmxUsable() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  constexpr unsigned kBf16 = 1u << 22, kTile = 1u << 24, kInt8 = 1u << 25;
  if ((edx & (kBf16 | kTile | kInt8)) != (kBf16 | kTile | kInt8)) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx & bit_OSXSAVE) == 0) return false;
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);
  if ((xcr0_low & kTileState) != kTileState) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXFeatureTileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXFeatureTileData) == 0;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = [] {
    __builtin_cpu_init();
    CpuFeatures f;
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;  // Clang's __builtin_cpu_supports lacks "f16c"
    f.f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    f.avx512_vnni =
        f.avx512 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
    f.avx512_bf16 =
        f.avx512 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5)) != 0;
    f.amx = f.avx512_bf16 && AmxUsable();
    f.amd = __get_cpuid(0, &eax, &ebx, &ecx, &edx) && ebx == signature_AMD_ebx &&
            ecx == signature_AMD_ecx && edx == signature_AMD_edx;
    return f;
  }();
  return features;
}

SimdLevel ActiveSimdLevel() {
  static const SimdLevel level = [] {
    const char* requested = std::getenv("PDSERVE_SIMD");
    bool allow_avx512 = requested == nullptr || std::strcmp(requested, "avx2") != 0;
    return GetCpuFeatures().avx512 && allow_avx512 ? SimdLevel::kAvx512 : SimdLevel::kAvx2;
  }();
  return level;
}

bool Bf16DotActive() {
  static const bool active = [] {
    const CpuFeatures& f = GetCpuFeatures();
    if (ActiveSimdLevel() != SimdLevel::kAvx512 || !f.avx512_bf16) return false;
    const char* requested = std::getenv("PDSERVE_BF16_DOT");
    if (requested != nullptr && std::strcmp(requested, "off") == 0) return false;
    if (requested != nullptr && std::strcmp(requested, "on") == 0) return true;
    return f.amd || AmxActive();
  }();
  return active;
}

bool AmxActive() {
  static const bool active = [] {
    if (ActiveSimdLevel() != SimdLevel::kAvx512 || !GetCpuFeatures().amx) return false;
    const char* requested = std::getenv("PDSERVE_AMX");
    return requested == nullptr || std::strcmp(requested, "off") != 0;
  }();
  return active;
}

namespace {

bool IsSet(const char* v) { return v != nullptr && *v != '\0'; }
bool Is(const char* v, const char* value) { return std::strcmp(v, value) == 0; }

// What is wrong with the on|off override `name`=`value` of a feature at the AVX-512 level that the
// CPU has (`has`; else `lacks` says what it lacks), `simd` the PDSERVE_SIMD override; "" if
// nothing.
std::string OnOffOverrideError(const char* name, const char* value, bool has, const char* lacks,
                               const char* simd) {
  if (!IsSet(value)) return "";
  const std::string override = std::string(name) + "=" + value;
  if (!Is(value, "on") && !Is(value, "off")) return override + ": expected on or off";
  if (Is(value, "off")) return "";
  if (!has) return override + ": " + lacks;
  if (IsSet(simd) && Is(simd, "avx2")) {
    return override + ": needs the AVX-512 level, and PDSERVE_SIMD=avx2 is set";
  }
  return "";
}

}  // namespace

std::string SimdOverrideError(const char* simd, const char* bf16_dot, const char* amx,
                              const CpuFeatures& f) {
  if (IsSet(simd) && !Is(simd, "avx2") && !Is(simd, "avx512")) {
    return std::string("PDSERVE_SIMD=") + simd + ": expected avx2 or avx512";
  }
  if (IsSet(simd) && Is(simd, "avx512") && !f.avx512) {
    return "PDSERVE_SIMD=avx512: this CPU lacks AVX-512 F/BW/VL/DQ (avx2 is the widest level here)";
  }
  if (std::string bad = OnOffOverrideError("PDSERVE_BF16_DOT", bf16_dot, f.avx512_bf16,
                                           "this CPU lacks AVX512_BF16", simd);
      !bad.empty()) {
    return bad;
  }
  return OnOffOverrideError("PDSERVE_AMX", amx, f.amx, "this CPU (or its OS) offers no AMX tiles",
                            simd);
}

std::string SimdOverrideError() {
  return SimdOverrideError(std::getenv("PDSERVE_SIMD"), std::getenv("PDSERVE_BF16_DOT"),
                           std::getenv("PDSERVE_AMX"), GetCpuFeatures());
}

const char* SimdLevelName(SimdLevel level) {
  return level == SimdLevel::kAvx512 ? "avx512" : "avx2";
}

bool CpuIsSupported() {
  const CpuFeatures& f = GetCpuFeatures();
  return f.avx2 && f.fma && f.f16c;
}

}  // namespace pdserve::kernels
