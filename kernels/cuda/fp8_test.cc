// cuda FP8 e4m3 conversions against kernels/fp8.h on the CPU: every code decodes to the CPU's
// table, every one of the 2^32 float bit patterns encodes to FloatToE4M3's code, and scaled
// quantization/dequantization equal the CPU's references bit for bit.
#include "kernels/cuda/fp8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gpu_test.h"
#include "kernels/fp8.h"

namespace pdserve::kernels::cuda {
namespace {

template <typename T>
std::vector<T> Download(const DeviceBuffer<T>& device, size_t n) {
  std::vector<T> host(n);
  const absl::Status status = device.CopyToHost(std::span<T>(host));
  if (!status.ok()) {
    std::fprintf(stderr, "download failed: %s\n", status.ToString().c_str());
    std::abort();
  }
  return host;
}

// Equal bits, or both NaN (the NaN payloads of the two decoders may differ).
bool SameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(CudaFp8Test, EveryCodeDecodesToTheCpuTable) {
  PDSERVE_REQUIRE_GPU();
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  DeviceBuffer<uint8_t> codes_device = Upload<uint8_t>(codes);
  auto out = DeviceBuffer<float>::Allocate(256);
  ASSERT_TRUE(out.ok()) << out.status();
  DequantizeE4M3(codes_device.data(), 256, 1.0f, out->data(), nullptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> got = Download(*out, 256);
  const float* table = E4M3Table();
  for (int c = 0; c < 256; ++c) {
    EXPECT_TRUE(SameFloat(got[c], table[c]))
        << "code " << c << ": " << got[c] << " vs " << table[c];
  }
}

struct Mismatch {
  uint32_t pattern;
  uint8_t gpu;
  uint8_t cpu;
};

// Compares gpu[i] with FloatToE4M3(bits first + i) for i < n on every hardware thread; returns
// how many differ and (in `first`) the lowest few patterns that do.
int64_t CompareChunk(uint32_t first, const std::vector<uint8_t>& gpu, int64_t n,
                     std::vector<Mismatch>* first_mismatches) {
  constexpr size_t kKeep = 8;
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<int64_t> counts(threads, 0);
  std::vector<std::vector<Mismatch>> found(threads);
  std::vector<std::thread> pool;
  const int64_t per_thread = (n + threads - 1) / threads;
  for (int w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      const int64_t end = std::min(n, (w + 1) * per_thread);
      for (int64_t i = w * per_thread; i < end; ++i) {
        const uint32_t pattern = first + static_cast<uint32_t>(i);
        const uint8_t cpu = FloatToE4M3(std::bit_cast<float>(pattern));
        if (cpu == gpu[i]) continue;
        ++counts[w];
        if (found[w].size() < kKeep) found[w].push_back({pattern, gpu[i], cpu});
      }
    });
  }
  for (std::thread& t : pool) t.join();
  int64_t total = 0;
  for (int w = 0; w < threads; ++w) {
    total += counts[w];
    for (const Mismatch& m : found[w]) {
      if (first_mismatches->size() < kKeep) first_mismatches->push_back(m);
    }
  }
  return total;
}

// All 2^32 float bit patterns (every NaN payload, infinities, subnormals, both zeros), 2^28 at a
// time.
TEST(CudaFp8Test, EveryFloatBitPatternEncodesAsOnTheCpu) {
  PDSERVE_REQUIRE_GPU();
  constexpr int64_t kChunk = int64_t{1} << 28;
  constexpr int64_t kPatterns = int64_t{1} << 32;
  auto codes = DeviceBuffer<uint8_t>::Allocate(kChunk);
  ASSERT_TRUE(codes.ok()) << codes.status();
  std::vector<uint8_t> gpu(kChunk);
  std::vector<Mismatch> mismatches;
  int64_t total = 0;
  for (int64_t first = 0; first < kPatterns; first += kChunk) {
    EncodeBitPatterns(static_cast<uint32_t>(first), kChunk, codes->data(), nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_TRUE(codes->CopyToHost(std::span<uint8_t>(gpu)).ok());
    total += CompareChunk(static_cast<uint32_t>(first), gpu, kChunk, &mismatches);
  }
  for (const Mismatch& m : mismatches) {
    ADD_FAILURE() << "bits 0x" << std::hex << m.pattern << " (" << std::bit_cast<float>(m.pattern)
                  << "): gpu 0x" << int{m.gpu} << ", cpu 0x" << int{m.cpu};
  }
  EXPECT_EQ(total, 0) << "float bit patterns whose codes differ";
}

// Seeded values over many magnitudes plus the special cases: zeros, infinities, NaN, tiny and
// huge values, and exact ties of the e4m3 grid.
std::vector<float> TestValues(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 20);
  std::vector<float> x(n);
  for (float& v : x) v = std::ldexp(normal(rng), exponent(rng));
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            448.0f,
                            464.0f,
                            -464.0f,
                            0x1p-10f,
                            0x1.8p-9f,
                            0x1p-6f,
                            1.0625f,
                            1e-40f,
                            3e38f};
  for (size_t i = 0; i < std::size(specials) && i < x.size(); ++i) x[i * 7] = specials[i];
  return x;
}

TEST(CudaFp8Test, ScaledQuantizationEqualsTheCpuReference) {
  PDSERVE_REQUIRE_GPU();
  constexpr int kN = 100003;  // not a multiple of any block or vector width
  const std::vector<float> x = TestValues(7, kN);
  DeviceBuffer<float> x_device = Upload<float>(x);
  auto codes_device = DeviceBuffer<uint8_t>::Allocate(kN);
  auto out_device = DeviceBuffer<float>::Allocate(kN);
  ASSERT_TRUE(codes_device.ok() && out_device.ok());
  std::vector<uint8_t> want_codes(kN);
  std::vector<float> want_out(kN);
  for (float scale : {1.0f, 0.5f, 3.7f, 1.0f / 448.0f, 1e-3f, 123456.0f,
                      std::numeric_limits<float>::min(), E4M3ScaleFor(17.25f)}) {
    SCOPED_TRACE(scale);
    QuantizeE4M3Reference(x.data(), kN, scale, want_codes.data());
    DequantizeE4M3Reference(want_codes.data(), kN, scale, want_out.data());
    QuantizeE4M3(x_device.data(), kN, scale, codes_device->data(), nullptr);
    DequantizeE4M3(codes_device->data(), kN, scale, out_device->data(), nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const std::vector<uint8_t> codes = Download(*codes_device, kN);
    const std::vector<float> out = Download(*out_device, kN);
    int bad = 0, nonzero = 0;
    for (int i = 0; i < kN; ++i) {
      nonzero += (codes[i] & 0x7F) != 0;
      if ((codes[i] != want_codes[i] || !SameFloat(out[i], want_out[i])) && ++bad <= 5) {
        ADD_FAILURE() << "x[" << i << "] = " << x[i] << ": code 0x" << std::hex << int{codes[i]}
                      << " vs 0x" << int{want_codes[i]} << std::dec << ", value " << out[i]
                      << " vs " << want_out[i];
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_GT(nonzero, kN / 10) << "mostly zero codes: the scale test exercises nothing";
  }
}

}  // namespace
}  // namespace pdserve::kernels::cuda
