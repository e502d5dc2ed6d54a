// Quantized weights: the scalar dot products against the dequantized weights times the
// dequantized activations (in double), the AVX2 kernels against the scalar ones, activation
// quantization's error bound, and Matmul's quantized paths (integer GEMV below 8 rows,
// dequantized SGEMM above) against MatmulReference — for every block format, on seeded random
// blocks and on adversarial ones (extreme scales, all-zero blocks, extreme codes).
#include "kernels/cpu/quant_dot.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/tensor/float16.h"
#include "core/tensor/quant_blocks.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/panel_matrix.h"
#include "kernels/projection.h"

namespace pdserve::kernels {
namespace {

constexpr DType kQuantTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                                 DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

enum class Pattern { kRandom, kExtreme, kZero };

// A [rows, cols] matrix of random block bytes whose f16 scales are finite: random scales in
// [-0.05, 0.05] (kRandom), f16's largest scales with every byte 0xFF or 0x00 (kExtreme), or all
// zero (kZero).
struct QuantMatrix {
  std::vector<uint8_t> bytes;
  Tensor tensor;
};

QuantMatrix MakeMatrix(DType dtype, int64_t rows, int64_t cols, uint32_t seed, Pattern pattern) {
  QuantMatrix m;
  const size_t block_bytes = BlockBytes(dtype);
  const int64_t blocks = rows * cols / BlockElements(dtype);
  m.bytes.resize(blocks * block_bytes);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* b = m.bytes.data() + i * block_bytes;
    for (size_t j = 0; j < block_bytes; ++j) {
      b[j] = pattern == Pattern::kZero      ? 0
             : pattern == Pattern::kExtreme ? (rng() % 2 ? 0xFF : 0x00)
                                            : static_cast<uint8_t>(rng());
    }
    // The f16 fields: d (and m/dmin) at the front, Q6_K's d at the end.
    const uint16_t big = rng() % 2 ? 0x7bff : 0xfbff;  // ±65504
    auto f16 = [&] { return pattern == Pattern::kExtreme ? big : F32ToF16(scale(rng)); };
    if (pattern == Pattern::kZero) continue;
    if (dtype == DType::kQ6_K) {
      const uint16_t d = f16();
      std::memcpy(b + block_bytes - 2, &d, 2);
    } else {
      const uint16_t d = f16(), m2 = f16();
      std::memcpy(b, &d, 2);
      if (dtype == DType::kQ4_1 || dtype == DType::kQ5_1 || BlockElements(dtype) == 256) {
        std::memcpy(b + 2, &m2, 2);
      }
    }
  }
  m.tensor.dtype = dtype;
  m.tensor.shape = {rows, cols};
  m.tensor.data = m.bytes.data();
  return m;
}

std::vector<float> RandomVector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The activations as the kernels see them: d·q per element.
std::vector<double> DequantizedActivations(DType dtype, const void* act, int64_t cols) {
  std::vector<double> out(cols);
  for (int64_t c = 0; c < cols; ++c) {
    if (BlockElements(dtype) == 256) {
      const auto& b = static_cast<const ActBlockK*>(act)[c / 256];
      out[c] = double{b.d} * b.qs[c % 256];
    } else {
      const auto& b = static_cast<const ActBlock32*>(act)[c / 32];
      out[c] = double{b.d} * b.qs[c % 32];
    }
  }
  return out;
}

TEST(QuantDotTest, ActivationQuantizationErrorIsAboutHalfAStep) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_K}) {
    const int64_t cols = 512;
    std::vector<float> x = RandomVector(cols, 7, 3.0f);
    std::fill(x.begin() + 256, x.begin() + 288, 0.0f);  // an all-zero 32-block
    std::vector<uint8_t> act(QuantizedActivationBytes(dtype, cols));
    QuantizeActivations(dtype, x.data(), cols, act.data());
    const std::vector<double> back = DequantizedActivations(dtype, act.data(), cols);
    const int64_t block = BlockElements(dtype);
    for (int64_t b = 0; b < cols / block; ++b) {
      double amax = 0.0;
      for (int64_t c = b * block; c < (b + 1) * block; ++c)
        amax = std::max(amax, std::fabs(double{x[c]}));
      // Half a step, plus the f16 rounding of the 32-element blocks' scale on codes up to 127.
      const double scale_error = block == 32 ? amax * 0x1p-11 : 0.0;
      for (int64_t c = b * block; c < (b + 1) * block; ++c) {
        ASSERT_LE(std::fabs(back[c] - x[c]), amax / 127.0 * 0.5 + scale_error + 1e-6)
            << DTypeName(dtype) << c;
      }
    }
    if (dtype == DType::kQ4_K) {
      const auto* k = reinterpret_cast<const ActBlockK*>(act.data());
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int j = 0; j < 16; ++j) s += k[1].qs[16 * g + j];
        EXPECT_EQ(k[1].bsums[g], s);
      }
    }
  }
}

// The scalar dot equals Σ dequant(w)·dequant(a) up to fp32 rounding, and every SIMD kernel equals
// the scalar one up to summation order.
TEST(QuantDotTest, ScalarAndSimdDotsMatchDequantizedProducts) {
  for (DType dtype : kQuantTypes) {
    // An odd number of 32-element blocks too, for the kernels that take two blocks a step.
    for (int64_t cols :
         {int64_t{1024}, BlockElements(dtype) == 32 ? int64_t{1056} : int64_t{1024}}) {
      for (Pattern pattern : {Pattern::kRandom, Pattern::kExtreme, Pattern::kZero}) {
        const QuantMatrix w = MakeMatrix(dtype, 8, cols, 11, pattern);
        const std::vector<float> x = RandomVector(cols, 13);
        std::vector<uint8_t> act(QuantizedActivationBytes(dtype, cols));
        QuantizeActivations(dtype, x.data(), cols, act.data());
        const std::vector<double> a = DequantizedActivations(dtype, act.data(), cols);
        std::vector<float> row(cols);
        const QuantDotFn scalar = ScalarQuantDot(dtype);
        ASSERT_NE(scalar, nullptr);
        std::vector<std::pair<const char*, QuantDotFn>> simd_kernels = {
            {"avx2", avx2::QuantDot(dtype)}};
        if (GetCpuFeatures().avx512) simd_kernels.push_back({"avx512", avx512::QuantDot(dtype)});
        for (int64_t r = 0; r < 8; ++r) {
          RowAsFloat(w.tensor, r, row.data());
          double want = 0.0, magnitude = 0.0;
          for (int64_t c = 0; c < cols; ++c) {
            want += row[c] * a[c];
            magnitude += std::fabs(row[c] * a[c]);
          }
          const void* w_row = w.bytes.data() + r * RowBytes(dtype, cols);
          const float got = scalar(w_row, act.data(), cols);
          const double tolerance = 1e-5 * magnitude + 1e-30;
          ASSERT_NEAR(got, want, tolerance)
              << DTypeName(dtype) << " pattern " << static_cast<int>(pattern) << " row " << r;
          if (pattern == Pattern::kZero) {
            EXPECT_EQ(got, 0.0f);
          }
          for (auto [level, simd] : simd_kernels) {
            if (simd == nullptr) continue;
            ASSERT_NEAR(simd(w_row, act.data(), cols), got, tolerance)
                << DTypeName(dtype) << " " << level << ", pattern " << static_cast<int>(pattern)
                << " row " << r << " cols " << cols;
          }
        }
      }
    }
  }
}

// Every GEMV kernel — BestQuantGemv's and, where the CPU has VNNI, the VNNI ones with their own
// activation layouts — equals the scalar dot products up to summation order: odd row counts (the
// kernels take rows in pairs), 1 to 6 activation rows (in fours), column counts a kernel does and
// does not take, every pattern.
TEST(QuantDotTest, GemvKernelsMatchTheScalarDots) {
  const int64_t rows = 7;
  for (DType dtype : kQuantTypes) {
    const bool small = BlockElements(dtype) == 32;
    for (int64_t cols : small ? std::vector<int64_t>{1024, 1088, 1152, 1056}
                              : std::vector<int64_t>{256, 1024, 1280}) {
      std::vector<std::pair<const char*, QuantGemvKernel>> kernels = {
          {"best", BestQuantGemv(dtype, cols)}};
      if (GetCpuFeatures().avx512_vnni) {
        const QuantGemvKernel vnni = avx512::VnniQuantGemv(dtype, cols);
        const bool expected = dtype == DType::kQ4_K || dtype == DType::kQ6_K ||
                              (dtype == DType::kQ8_0 && cols % 64 == 0) ||
                              (dtype == DType::kQ4_0 && cols % 128 == 0);
        ASSERT_EQ(vnni.rows != nullptr, expected) << DTypeName(dtype) << " cols " << cols;
        if (vnni.rows != nullptr) kernels.push_back({"vnni", vnni});
      }
      for (Pattern pattern : {Pattern::kRandom, Pattern::kExtreme, Pattern::kZero}) {
        const QuantMatrix w = MakeMatrix(dtype, rows, cols, 43, pattern);
        for (int nb : {1, 3, 6}) {  // activation rows: one pass, a partial pass, 4 + 2
          const std::vector<float> x = RandomVector(nb * cols, 47 + nb);
          std::vector<float> row(cols);
          for (auto [name, kernel] : kernels) {
            const size_t act_bytes = kernel.activation_bytes(dtype, cols);
            std::vector<uint8_t> act(nb * act_bytes);
            for (int b = 0; b < nb; ++b) {
              kernel.quantize(dtype, x.data() + b * cols, cols, act.data() + b * act_bytes);
            }
            std::vector<float> y(nb * rows, -1.0f);
            kernel.rows(dtype, w.bytes.data(), RowBytes(dtype, cols), rows, act.data(), act_bytes,
                        nb, cols, y.data(), rows);
            for (int b = 0; b < nb; ++b) {
              std::vector<uint8_t> standard(QuantizedActivationBytes(dtype, cols));
              QuantizeActivations(dtype, x.data() + b * cols, cols, standard.data());
              const std::vector<double> a = DequantizedActivations(dtype, standard.data(), cols);
              for (int64_t r = 0; r < rows; ++r) {
                RowAsFloat(w.tensor, r, row.data());
                double magnitude = 0.0;
                for (int64_t c = 0; c < cols; ++c) magnitude += std::fabs(row[c] * a[c]);
                const float want = ScalarQuantDot(dtype)(w.bytes.data() + r * RowBytes(dtype, cols),
                                                         standard.data(), cols);
                ASSERT_NEAR(y[b * rows + r], want, 1e-5 * magnitude + 1e-30)
                    << DTypeName(dtype) << " " << name << " pattern " << static_cast<int>(pattern)
                    << " x row " << b << " of " << nb << " row " << r << " cols " << cols;
                if (pattern == Pattern::kZero) {
                  EXPECT_EQ(y[b * rows + r], 0.0f);
                }
              }
            }
          }
        }
      }
    }
  }
}

// The AVX2 dequantization (prefill's tiles) equals the scalar one bit for bit.
TEST(QuantDotTest, SimdDequantizationIsBitExact) {
  const int64_t cols = 512;
  for (DType dtype : kQuantTypes) {
    for (Pattern pattern : {Pattern::kRandom, Pattern::kExtreme, Pattern::kZero}) {
      const QuantMatrix w = MakeMatrix(dtype, 4, cols, 41, pattern);
      std::vector<float> want(4 * cols), got(4 * cols, -1.0f);
      quant::DequantizeRow(dtype, w.bytes.data(), 4 * cols, want.data());
      if (!avx2::DequantizeRow(dtype, w.bytes.data(), 4 * cols, got.data())) continue;
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << DTypeName(dtype) << " pattern " << static_cast<int>(pattern);
    }
  }
}

// Matmul on quantized weights vs the reference on the dequantized weights: exact weights, so
// the error is the activations' int8 rounding (≤ half a step of max|x|/127 per element) for the
// GEMV path and the int8 GEMM (8 rows and more where Int8GemmFor has a tile), and summation order
// for the SGEMM one.
TEST(QuantDotTest, MatmulPathsMatchTheReference) {
  const int64_t rows = 96, cols = 512;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<float> workspace(MatmulWorkspaceFloats(threads, cols));
    for (DType dtype : kQuantTypes) {
      const bool int8_gemm = Int8GemmFor(dtype) != nullptr;
      const int64_t gemv_below = BestQuantGemv(dtype, cols).gemm_from_rows;
      const QuantMatrix w = MakeMatrix(dtype, rows, cols, 17, Pattern::kRandom);
      for (int64_t n : {1, 3, 4, 7, 8, 20, 64}) {
        const std::vector<float> x = RandomVector(n * cols, 19 + n);
        std::vector<float> got(n * rows), want(n * rows);
        Matmul(pool, x.data(), n, w.tensor, got.data(), workspace);
        MatmulReference(x.data(), n, w.tensor, want.data());
        std::vector<float> row(cols);
        for (int64_t r = 0; r < rows; ++r) {
          RowAsFloat(w.tensor, r, row.data());
          for (int64_t b = 0; b < n; ++b) {
            double magnitude = 0.0, weights = 0.0;
            for (int64_t c = 0; c < cols; ++c) {
              magnitude += std::fabs(row[c] * x[b * cols + c]);
              weights += std::fabs(row[c]);
            }
            // |x| ≤ 1: the int8 rounding moves each product by at most |w|·(1/127)/2.
            const double tolerance = n < gemv_below || int8_gemm
                                         ? weights / 254.0 + 1e-5 * magnitude
                                         : 1e-5 * magnitude + 1e-6;
            ASSERT_NEAR(got[b * rows + r], want[b * rows + r], tolerance)
                << DTypeName(dtype) << " n " << n << " row " << r << " threads " << threads;
          }
        }
      }
    }
  }
}

// Block32AsU8For's codes, scales and mins give the dequantized weights bit for bit (in fp32), for
// every format that has one (all but Q6_K), on every pattern.
TEST(QuantDotTest, BlocksAsUnsignedCodesAreExact) {
  const int64_t cols = 512;
  for (DType dtype : kQuantTypes) {
    const Block32AsU8Fn unpack = Block32AsU8For(dtype);
    ASSERT_EQ(unpack == nullptr, dtype == DType::kQ6_K) << DTypeName(dtype);
    if (unpack == nullptr) continue;
    for (Pattern pattern : {Pattern::kRandom, Pattern::kExtreme, Pattern::kZero}) {
      const QuantMatrix w = MakeMatrix(dtype, 2, cols, 53, pattern);
      std::vector<float> want(cols);
      for (int64_t r = 0; r < 2; ++r) {
        RowAsFloat(w.tensor, r, want.data());
        for (int64_t b = 0; b < cols / 32; ++b) {
          uint8_t u[32];
          float scale, min;
          unpack(w.bytes.data() + r * RowBytes(dtype, cols), b, u, &scale, &min);
          for (int j = 0; j < 32; ++j) {
            ASSERT_EQ(scale * static_cast<float>(u[j]) - min, want[b * 32 + j])
                << DTypeName(dtype) << " pattern " << static_cast<int>(pattern) << " block " << b;
          }
        }
      }
    }
  }
}

// The int8 GEMM's AVX2 activation quantizer writes QuantizeActivations' bytes, NaN, infinities,
// zero and subnormal blocks included.
TEST(QuantDotTest, SimdActivationQuantizationIsBitExact) {
  const int64_t cols = 256;
  std::vector<float> x = RandomVector(cols, 59, 4.0f);
  std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  x[70] = std::numeric_limits<float>::quiet_NaN();
  x[100] = std::numeric_limits<float>::infinity();
  x[101] = -2.0f;
  for (int j = 128; j < 160; ++j) x[j] = (j % 3 - 1) * 1e-39f;  // subnormal: 127 / max|x| = inf
  x[200] = -std::numeric_limits<float>::infinity();
  std::vector<ActBlock32> want(cols / 32), got(cols / 32);
  QuantizeActivations(DType::kQ8_0, x.data(), cols, want.data());
  QuantizeActivations32(x.data(), cols, got.data());
  for (size_t b = 0; b < want.size(); ++b) {
    EXPECT_EQ(std::memcmp(&got[b].d, &want[b].d, sizeof(float)), 0) << "block " << b;
    EXPECT_EQ(std::memcmp(&got[b].sum, &want[b].sum, sizeof(float)), 0) << "block " << b;
    EXPECT_EQ(std::memcmp(got[b].half_sums, want[b].half_sums, 2 * sizeof(float)), 0)
        << "block " << b;
    EXPECT_EQ(std::memcmp(got[b].qs, want[b].qs, 32), 0) << "block " << b;
    int low = 0, high = 0;
    for (int j = 0; j < 16; ++j) low += want[b].qs[j], high += want[b].qs[16 + j];
    EXPECT_EQ(std::bit_cast<uint32_t>(want[b].half_sums[0]),
              std::bit_cast<uint32_t>(want[b].d * static_cast<float>(low)))
        << "block " << b;
    EXPECT_EQ(std::bit_cast<uint32_t>(want[b].half_sums[1]),
              std::bit_cast<uint32_t>(want[b].d * static_cast<float>(high)))
        << "block " << b;
  }
}

// Sets every code byte of a Q4_0, Q4_K, Q5_K, Q6_K or Q8_0 matrix to its largest unsigned code
// (0xFF bytes; Q8_0: 127, or its smallest, -128, with `q8_0_smallest`), scales untouched.
void SetLargestCodes(DType dtype, std::vector<uint8_t>& bytes, bool q8_0_smallest = false) {
  const size_t block = BlockBytes(dtype);
  // [first, last) code bytes of a block: after Q4_0/Q8_0's d; after Q4_K/Q5_K's d, dmin, scales;
  // Q6_K's ql and qh, before its scales and d.
  const size_t first = dtype == DType::kQ6_K         ? 0
                       : BlockElements(dtype) == 256 ? 4 + quant::kScaleBytesK
                                                     : 2;
  const size_t last = dtype == DType::kQ6_K ? quant::kQK_K / 2 + quant::kQK_K / 4 : block;
  for (size_t b = 0; b < bytes.size(); b += block) {
    const int code = dtype != DType::kQ8_0 ? 0xFF : q8_0_smallest ? 0x80 : 0x7F;
    std::memset(bytes.data() + b + first, code, last - first);
  }
}

// Each int8 GEMM tile (AVX2's; AVX512-VNNI's where the CPU has it) against the GEMM's own
// arithmetic in double — Σ_b (scale·u − min)·(d_x·q_x) over the unpacked blocks and the
// quantized x — on a weight row count that leaves partial panels and x row counts that leave
// partial tiles; then Matmul with more x rows than one slab of its workspace holds (one thread).
TEST(QuantDotTest, Int8GemmTilesMatchTheirArithmetic) {
  const int64_t rows = 37, cols = 256, blocks = cols / 32;
  for (DType dtype : {DType::kQ4_0, DType::kQ4_K, DType::kQ8_0, DType::kQ5_K}) {
    const Block32AsU8Fn unpack = Block32AsU8For(dtype);
    std::vector<std::pair<const char*, Int8GemmFn>> tiles = {
        {"avx2", avx2::Int8GemmPanelsFor(Block32AsU8MaxCode(dtype))}};
    if (GetCpuFeatures().avx512_vnni) tiles.push_back({"vnni", avx512::Int8GemmPanels});
    // Random blocks; then every code at its largest against x all 1 (codes 127): the int16 sums
    // of the AVX2 tiles at their bound; Q8_0 also with every code -128 against x all -1 (codes
    // -127): the signed tile's |q| at 128 and x's codes negated.
    for (int extreme : {0, 1, 2}) {
      if (extreme == 2 && dtype != DType::kQ8_0) continue;
      const bool largest = extreme > 0;
      QuantMatrix w = MakeMatrix(dtype, rows, cols, 61, Pattern::kRandom);
      if (largest) SetLargestCodes(dtype, w.bytes, extreme == 2);
      const size_t row_bytes = RowBytes(dtype, cols);
      std::vector<uint8_t> packed(3 * blocks * kInt8PanelBlockBytes);
      PackInt8Panels(unpack, w.bytes.data(), row_bytes, cols, 0, rows, packed.data());
      for (int64_t n : {1, 5, 13}) {
        const std::vector<float> x = largest
                                         ? std::vector<float>(n * cols, extreme == 2 ? -1.0f : 1.0f)
                                         : RandomVector(n * cols, 67 + n);
        std::vector<ActBlock32> act(n * blocks);
        for (int64_t i = 0; i < n; ++i) {
          QuantizeActivations32(x.data() + i * cols, cols, act.data() + i * blocks);
        }
        for (auto [name, tile] : tiles) {
          std::vector<float> got(n * rows, -1.0f);
          tile(packed.data(), rows, cols, act.data(), n, got.data(), rows);
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t r = 0; r < rows; ++r) {
              double want = 0.0, magnitude = 0.0;
              for (int64_t b = 0; b < blocks; ++b) {
                uint8_t u[32];
                float scale, min;
                unpack(w.bytes.data() + r * row_bytes, b, u, &scale, &min);
                const ActBlock32& a = act[i * blocks + b];
                for (int j = 0; j < 32; ++j) {
                  const double term = (double{scale} * u[j] - min) * (double{a.d} * a.qs[j]);
                  want += term;
                  magnitude += std::fabs(term);
                }
              }
              ASSERT_NEAR(got[i * rows + r], want, 1e-5 * magnitude + 1e-6)
                  << DTypeName(dtype) << " " << name << " n " << n << " row " << r
                  << (extreme == 1   ? " (largest codes)"
                      : extreme == 2 ? " (smallest codes)"
                                     : "");
            }
          }
        }
      }
    }
  }
  // Slabs: 500 x rows against one thread's workspace (room for about 384 at 256 columns).
  ThreadPool pool(1);
  std::vector<float> workspace(MatmulWorkspaceFloats(1, cols));
  const QuantMatrix w = MakeMatrix(DType::kQ4_0, rows, cols, 71, Pattern::kRandom);
  const int64_t n = 500;
  const std::vector<float> x = RandomVector(n * cols, 73);
  std::vector<float> all(n * rows), last(100 * rows);
  Matmul(pool, x.data(), n, w.tensor, all.data(), workspace);
  Matmul(pool, x.data() + 400 * cols, 100, w.tensor, last.data(), workspace);
  for (int64_t i = 0; i < 100 * rows; ++i) ASSERT_EQ(all[400 * rows + i], last[i]) << i;
}

// x's n rows quantized per 32, as Matmul on quantized panels quantizes them.
std::vector<ActBlock32> QuantizedRows(const std::vector<float>& x, int64_t n, int64_t cols) {
  std::vector<ActBlock32> act(n * cols / 32);
  for (int64_t i = 0; i < n; ++i) {
    QuantizeActivations32(x.data() + i * cols, cols, act.data() + i * cols / 32);
  }
  return act;
}

// Matmul on quantized `panels` of x's n rows — one and two threads, a roomy workspace, one of
// room for three x rows (slabs) and one of room for 40 (slabs of the AMX product) — into y rows 3
// wider than the matrix's: past its rows y stays untouched, and check(i, r, y[i, r], amx) judges
// every output, `amx` where the product ran on AMX tiles in bf16 (kAmxQuantMinRows or more rows on
// an AMX CPU, all but the three-row workspace), not the VNNI tile.
template <typename Check>
void CheckPanelMatmuls(const PanelMatrix& panels, const std::vector<float>& x, int64_t n,
                       Check check) {
  const int64_t rows = panels.rows(), cols = panels.cols(), ldy = rows + 3;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    const size_t roomy = MatmulWorkspaceFloats(threads, cols);
    const size_t few_rows = 3 * cols / 32 * sizeof(ActBlock32) / sizeof(float);
    // Room for the AMX shares and 40 rows of x in bf16: the AMX product in slabs.
    const size_t amx_slabs =
        threads * kGemmChunkRows * std::min<int64_t>(cols, kGemmKc) / 2 + 40 * (cols / 2 + 16);
    for (size_t floats : {roomy, few_rows, amx_slabs}) {
      SCOPED_TRACE(absl::StrCat("threads ", threads, " workspace ", floats, " n ", n));
      std::vector<float> workspace(floats);
      std::vector<float> got(n * ldy, -7.0f);
      Matmul(pool, x.data(), n, panels, got.data(), ldy, workspace);
      const bool amx = AmxActive() && panels.level() == SimdLevel::kAvx512 &&
                       n >= avx512::kAmxQuantMinRows && floats != few_rows;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t r = rows; r < ldy; ++r) {
          ASSERT_EQ(got[i * ldy + r], -7.0f) << "wrote past row " << i << "'s outputs at " << r;
        }
        for (int64_t r = 0; r < rows; ++r) {
          check(i, r, got[i * ldy + r], amx);
          if (::testing::Test::HasFatalFailure()) return;  // the first wrong output only
        }
      }
    }
  }
}

// The weight patterns the panel tests run: random blocks, extreme scales, all zero, and (pattern
// 3) random scales with every code at its largest.
constexpr int kPanelPatterns = 4;
QuantMatrix PanelTestMatrix(DType dtype, int64_t rows, int64_t cols, uint32_t seed, int pattern) {
  QuantMatrix w = MakeMatrix(dtype, rows, cols, seed,
                             pattern == 3 ? Pattern::kRandom : static_cast<Pattern>(pattern));
  if (pattern == 3) SetLargestCodes(dtype, w.bytes);
  return w;
}

// w's rows dequantized as the format defines them.
std::vector<float> Dequantized(const QuantMatrix& w) {
  const int64_t rows = w.tensor.rows(), cols = w.tensor.cols();
  std::vector<float> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    quant::DequantizeRow(w.tensor.dtype, w.bytes.data() + r * RowBytes(w.tensor.dtype, cols), cols,
                         out.data() + r * cols);
  }
  return out;
}

// The AMX product's output (i, r) against its arithmetic in double: Σ over c of the weight and x
// each rounded to bf16, within 1e-5 of the terms' magnitudes (fp32 sums of exact products).
void ExpectBf16Product(const std::vector<float>& dequantized, const std::vector<float>& x,
                       int64_t cols, int64_t i, int64_t r, float got) {
  auto bf16 = [](float v) { return double{BF16ToF32(F32ToBF16(v))}; };
  double want = 0.0, magnitude = 0.0;
  for (int64_t c = 0; c < cols; ++c) {
    const double term = bf16(dequantized[r * cols + c]) * bf16(x[i * cols + c]);
    want += term;
    magnitude += std::fabs(term);
  }
  ASSERT_NEAR(got, want, 1e-5 * magnitude + 1e-30) << "at " << i << ", " << r << " (AMX)";
}

// On AMX CPUs, a prompt's product on quantized panels multiplies each weight as
// DequantizePanelsToBf16Pairs gives it: with x one row per column, each a one-hot row, Matmul
// returns every weight of the matrix, each exactly the format's value (DequantizeRow's) rounded
// to bf16 (a subnormal one as zero: the tiles read those as zero) — every format, block pattern and
// the largest codes, ragged panels (one and several pairs of them, an odd last one), K blocks past
// the first and a ragged last one.
TEST(QuantDotTest, AmxPromptsMultiplyTheFormatsValuesInBf16) {
  if (!AmxActive()) GTEST_SKIP() << "no AMX tiles (CPU, OS or PDSERVE_AMX=off)";
  ThreadPool pool(2);
  for (DType dtype : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    uint32_t seed = 900;
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{17, 256}, {50, 512}, {130, 1280}}) {
      for (int pattern = 0; pattern < kPanelPatterns; ++pattern) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dtype), " rows ", rows, " cols ", cols, " pattern ", pattern));
        const QuantMatrix w = PanelTestMatrix(dtype, rows, cols, seed++, pattern);
        const std::vector<float> dequantized = Dequantized(w);
        const PanelMatrix panels(w.tensor, SimdLevel::kAvx512);
        const int64_t n = cols;  // ≥ kAmxQuantMinRows
        std::vector<float> x(n * cols, 0.0f), y(n * rows);
        for (int64_t i = 0; i < n; ++i) x[i * cols + i] = 1.0f;
        std::vector<float> workspace(MatmulWorkspaceFloats(pool.size(), cols));
        Matmul(pool, x.data(), n, panels, y.data(), rows, workspace);
        for (int64_t c = 0; c < cols; ++c) {
          for (int64_t r = 0; r < rows; ++r) {
            float want = BF16ToF32(F32ToBF16(dequantized[r * cols + c]));
            if (std::fpclassify(want) == FP_SUBNORMAL) want = 0.0f;
            ASSERT_EQ(y[c * rows + r], want) << "weight " << r << ", " << c;
          }
        }
      }
    }
  }
}

// Q4_0, Q8_0, Q4_K and Q5_K kept as PanelMatrix panels (at the AVX2 level, and at the AVX-512
// level with VNNI): Matmul equals, bit for bit, the prefill's int8 GEMM of the same level on the
// same rows — x quantized per 32, PackInt8Panels, Int8GemmPanels — for one decode row
// to several tiles (the AVX2 level's whole-panel tiles of 1 and 2 rows, its half-panel ones of up
// to 6), on ragged panels, every block pattern (extreme scales overflow alike) and the largest
// codes, in CheckPanelMatmuls's settings; where the product runs on AMX tiles (CheckPanelMatmuls's
// `amx`), its bf16 arithmetic instead.
TEST(QuantDotTest, QuantPanelsEqualTheInt8Gemm) {
  using Shapes = std::vector<std::pair<int64_t, int64_t>>;
  const Shapes blocks32 = {{1, 32}, {37, 256}, {300, 96}, {64, 768}};
  const Shapes blocks256 = {{1, 256}, {37, 512}, {300, 256}, {64, 768}};
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (level == SimdLevel::kAvx512 && !GetCpuFeatures().avx512_vnni) continue;
    for (DType dtype : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K}) {
      if (!PanelMatrix::Takes(dtype, level)) continue;
      const Int8GemmFn int8_gemm = level == SimdLevel::kAvx512
                                       ? avx512::Int8GemmPanels
                                       : avx2::Int8GemmPanelsFor(Block32AsU8MaxCode(dtype));
      uint32_t seed = 300;
      for (auto [rows, cols] : BlockElements(dtype) == 256 ? blocks256 : blocks32) {
        for (int pattern = 0; pattern < kPanelPatterns; ++pattern) {
          SCOPED_TRACE(absl::StrCat(SimdLevelName(level), " ", DTypeName(dtype), " rows ", rows,
                                    " cols ", cols, " pattern ", pattern));
          const QuantMatrix w = PanelTestMatrix(dtype, rows, cols, seed++, pattern);
          const PanelMatrix panels(w.tensor, level);
          ASSERT_EQ(panels.dtype(), dtype);
          ASSERT_EQ(panels.rows(), rows);
          const std::vector<float> dequantized = Dequantized(w);
          std::vector<uint8_t> u8((rows + 15) / 16 * (cols / 32) * kInt8PanelBlockBytes);
          PackInt8Panels(Block32AsU8For(dtype), w.bytes.data(), RowBytes(dtype, cols), cols, 0,
                         rows, u8.data());
          for (int64_t n : {1, 2, 3, 4, 5, 12, 13, 100}) {
            const std::vector<float> x = RandomVector(n * cols, seed++);
            const std::vector<ActBlock32> act = QuantizedRows(x, n, cols);
            std::vector<float> want(n * rows);
            int8_gemm(u8.data(), rows, cols, act.data(), n, want.data(), rows);
            CheckPanelMatmuls(panels, x, n, [&](int64_t i, int64_t r, float got, bool amx) {
              if (amx) return ExpectBf16Product(dequantized, x, cols, i, r, got);
              ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want[i * rows + r]))
                  << "at " << i << ", " << r << ": " << got << " vs " << want[i * rows + r];
            });
          }
        }
      }
    }
  }
}

// Q6_K kept as PanelMatrix panels at `level`, whose scales cover 16 elements, so that no per-call
// int8 GEMM exists to equal: Matmul against the panels' own arithmetic in double — Σ over elements
// of the dequantized weight (d·s·(q − 32), exact in fp32) times the quantized x (d_x·q_x) — on
// ragged panels, every block pattern and the largest codes (all 63, the bytes 0xFF), one decode
// row to several tiles (the AVX2 level's whole-panel tiles of 1 and 2 rows, its half-panel ones of
// up to 6), in CheckPanelMatmuls's settings (on AMX tiles, their bf16 arithmetic).
void CheckQ6KPanels(SimdLevel level) {
  uint32_t seed = 500;
  for (auto [rows, cols] :
       {std::pair<int64_t, int64_t>{1, 256}, {37, 512}, {300, 256}, {64, 768}}) {
    for (int pattern = 0; pattern < kPanelPatterns; ++pattern) {
      SCOPED_TRACE(
          absl::StrCat(SimdLevelName(level), " rows ", rows, " cols ", cols, " pattern ", pattern));
      const QuantMatrix w = PanelTestMatrix(DType::kQ6_K, rows, cols, seed++, pattern);
      const std::vector<float> dequantized = Dequantized(w);
      const PanelMatrix panels(w.tensor, level);
      ASSERT_EQ(panels.dtype(), DType::kQ6_K);
      for (int64_t n : {1, 2, 3, 5, 12, 13, 100}) {
        const std::vector<float> x = RandomVector(n * cols, seed++);
        const std::vector<ActBlock32> act = QuantizedRows(x, n, cols);
        CheckPanelMatmuls(panels, x, n, [&](int64_t i, int64_t r, float got, bool amx) {
          if (amx) return ExpectBf16Product(dequantized, x, cols, i, r, got);
          double want = 0.0, magnitude = 0.0;
          for (int64_t c = 0; c < cols; ++c) {
            const ActBlock32& a = act[i * cols / 32 + c / 32];
            const double term = double{dequantized[r * cols + c]} * a.d * a.qs[c % 32];
            want += term;
            magnitude += std::fabs(term);
          }
          ASSERT_NEAR(got, want, 1e-5 * magnitude + 1e-6) << "at " << i << ", " << r;
        });
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// CheckQ6KPanels at the AVX2 level, and at the AVX-512 level with VNNI.
TEST(QuantDotTest, Q6KPanelsMatchTheirArithmetic) {
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (level == SimdLevel::kAvx512 && !GetCpuFeatures().avx512_vnni) continue;
    CheckQ6KPanels(level);
  }
}

// A matrix of several packing slices (2 MiB of source each; the last ragged, ending in a partial
// panel), packed with and without releasing its source's pages, and on a pool's threads: each
// equals the int8 GEMM bit for bit, and the source's bytes are unchanged.
TEST(QuantDotTest, QuantPanelsPackInSlicesAndReleaseNothingTheyNeed) {
  const int64_t rows = 4100, cols = 1024, blocks = cols / 32;
  const QuantMatrix w = MakeMatrix(DType::kQ8_0, rows, cols, 91, Pattern::kRandom);
  const std::vector<uint8_t> before = w.bytes;
  std::vector<uint8_t> u8((rows + 15) / 16 * blocks * kInt8PanelBlockBytes);
  PackInt8Panels(Block32AsU8For(DType::kQ8_0), w.bytes.data(), RowBytes(DType::kQ8_0, cols), cols,
                 0, rows, u8.data());
  ThreadPool pool(2);
  std::vector<float> workspace(MatmulWorkspaceFloats(2, cols));
  ThreadPool packers(2);
  for (auto [release, packing_pool] :
       {std::pair<bool, ThreadPool*>{false, nullptr}, {true, nullptr}, {true, &packers}}) {
    const PanelMatrix panels(w.tensor, ActiveSimdLevel(), false, release, packing_pool);
    for (int64_t n : {1, 13}) {
      const std::vector<float> x = RandomVector(n * cols, 93 + n);
      std::vector<ActBlock32> act(n * blocks);
      for (int64_t i = 0; i < n; ++i) {
        QuantizeActivations32(x.data() + i * cols, cols, act.data() + i * blocks);
      }
      std::vector<float> want(n * rows), got(n * rows);
      Int8GemmFor(DType::kQ8_0)(u8.data(), rows, cols, act.data(), n, want.data(), rows);
      Matmul(pool, x.data(), n, panels, got.data(), rows, workspace);
      for (int64_t i = 0; i < n * rows; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << "release " << release << " pool " << (packing_pool != nullptr) << " n " << n
            << " at " << i;
      }
    }
  }
  EXPECT_EQ(w.bytes, before);
}

// Row-stacked parts in different formats (as Q4_K_M's q/k in Q4_K with v in Q6_K): each part's
// outputs land in its columns of y, equal to that part alone.
TEST(QuantDotTest, StackedPartsOfDifferentFormats) {
  const int64_t cols = 512;
  ThreadPool pool(2);
  std::vector<float> workspace(MatmulWorkspaceFloats(2, cols));
  const QuantMatrix q = MakeMatrix(DType::kQ4_K, 48, cols, 23, Pattern::kRandom);
  const QuantMatrix v = MakeMatrix(DType::kQ6_K, 16, cols, 29, Pattern::kRandom);
  const Tensor f = MakeF32Tensor(RandomVector(8 * cols, 31), {8, cols});
  const std::vector<Tensor> parts = {q.tensor, v.tensor, f};
  for (int64_t n : {1, 5, 12}) {
    const std::vector<float> x = RandomVector(n * cols, 37);
    std::vector<float> stacked(n * 72);
    Matmul(pool, x.data(), n, parts, stacked.data(), workspace);
    int64_t offset = 0;
    for (const Tensor& part : parts) {
      std::vector<float> alone(n * part.rows());
      Matmul(pool, x.data(), n, part, alone.data(), workspace);
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t r = 0; r < part.rows(); ++r) {
          ASSERT_EQ(stacked[b * 72 + offset + r], alone[b * part.rows() + r])
              << DTypeName(part.dtype) << " n " << n << " row " << r;
        }
      }
      offset += part.rows();
    }
  }
}

// A projection stacked from quantized parts of different formats (Q4_K_M's q and k in Q4_K, v in
// Q6_K; here also a part of 8 rows, less than a panel, and a Q8_0 part) is packed part by part, and
// its outputs equal, bit for bit, each part's PanelMatrix alone — one decode row to several tiles,
// one and two threads, at the active level. A stack with a float part stays unpacked.
TEST(QuantDotTest, QuantizedStacksArePackedPartByPart) {
  const int64_t cols = 512;
  std::vector<QuantMatrix> parts;
  parts.push_back(MakeMatrix(DType::kQ4_K, 48, cols, 41, Pattern::kRandom));
  parts.push_back(MakeMatrix(DType::kQ6_K, 8, cols, 43, Pattern::kRandom));
  parts.push_back(MakeMatrix(DType::kQ8_0, 40, cols, 45, Pattern::kRandom));
  parts.push_back(MakeMatrix(DType::kQ6_K, 33, cols, 47, Pattern::kExtreme));
  std::vector<Tensor> tensors;
  int64_t rows = 0;
  for (const QuantMatrix& part : parts) {
    tensors.push_back(part.tensor);
    rows += part.tensor.rows();
  }
  const Projection projection(tensors);
  ASSERT_TRUE(projection.packed());
  ASSERT_EQ(projection.rows(), rows);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<float> workspace(MatmulWorkspaceFloats(threads, cols));
    for (int64_t n : {1, 5, 13, 100}) {
      const std::vector<float> x = RandomVector(n * cols, 49 + n);
      std::vector<float> stacked(n * rows);
      Matmul(pool, x.data(), n, projection, stacked.data(), workspace);
      int64_t offset = 0;
      for (const QuantMatrix& part : parts) {
        const PanelMatrix alone(part.tensor);
        std::vector<float> want(n * alone.rows());
        Matmul(pool, x.data(), n, alone, want.data(), alone.rows(), workspace);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t r = 0; r < alone.rows(); ++r) {
            ASSERT_EQ(std::bit_cast<uint32_t>(stacked[i * rows + offset + r]),
                      std::bit_cast<uint32_t>(want[i * alone.rows() + r]))
                << DTypeName(part.tensor.dtype) << " threads " << threads << " n " << n << " at "
                << i << ", " << r;
          }
        }
        offset += alone.rows();
      }
    }
  }
  tensors.push_back(MakeF32Tensor(RandomVector(8 * cols, 51), {8, cols}));
  EXPECT_FALSE(Projection(tensors).packed()) << "a float part among quantized ones";
}

}  // namespace
}  // namespace pdserve::kernels
