// Matmul: the fast path (GEMV kernels for n < 8, the packed GEMM for n ≥ 8) against
// MatmulReference on the same seeded inputs, for every weight dtype, awkward shapes and several
// pool sizes; the AVX2 and AVX-512 GEMV row kernels and GEMM micro-kernels directly, with strides,
// partial row ranges and partial tiles.
#include "kernels/matmul.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/tensor/float16.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/gemv_kernels.h"
#include "kernels/cpu_features.h"
#include "kernels/float16_rows.h"
#include "kernels/panel_matrix.h"
#include "kernels/projection.h"

namespace pdserve::kernels {
namespace {

// Fast path vs reference on the same weights (only summation order differs).
constexpr double kSameWeightsTolerance = 1e-5;

// Fast path on 16-bit weights vs the reference on the f32 weights they were rounded from.
double DTypeTolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 1e-5;
    case DType::kF16:
      return 2e-3;  // 11-bit significand
    case DType::kBF16:
      return 1.5e-2;  // 8-bit significand
    default:
      return 0.0;  // quantized weights: kernels/quant_dot_test.cc
  }
}

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

double Norm(const float* v, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double{v[i]} * v[i];
  return std::sqrt(sum);
}

// ‖got − want‖ / ‖want‖ over the first n values.
double RelativeError(const float* got, const float* want, int64_t n) {
  double diff = 0.0, ref = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double d = double{got[i]} - want[i];
    diff += d * d;
    ref += double{want[i]} * want[i];
  }
  return std::sqrt(diff) / std::sqrt(ref);
}

struct Shape {
  int64_t rows;
  int64_t cols;
};

// Odd row counts, columns that are not multiples of 8, 16 or 32, and a few aligned ones.
const Shape kShapes[] = {{1, 1},   {3, 7},    {37, 33},  {67, 172}, {129, 1},
                         {65, 31}, {131, 64}, {17, 513}, {64, 768}, {200, 96}};

constexpr float kGuard = 12345.0f;

// A kernel's output block before the call: m rows of ldy floats, seeded values in the first `live`
// columns and kGuard past them.
std::vector<float> GuardedOutput(int64_t m, int64_t ldy, int64_t live, uint32_t seed) {
  std::vector<float> y = RandomVector(m * ldy, seed);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = live; j < ldy; ++j) y[i * ldy + j] = kGuard;
  }
  return y;
}

// A kernel's output against double-precision sums: y[i, j] = Σ_{k < terms} term(i, j, k), plus
// before[i, j] when accumulating, within 1e-6 of the sum of the terms' magnitudes; the guard past
// `live` columns untouched.
template <typename Term>
void ExpectSums(const std::vector<float>& y, const std::vector<float>& before, int64_t m,
                int64_t ldy, int64_t live, bool accumulate, int64_t terms, Term term) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldy; ++j) {
      if (j >= live) {
        ASSERT_EQ(y[i * ldy + j], kGuard) << "wrote past the outputs at " << i << ", " << j;
        continue;
      }
      double want = accumulate ? before[i * ldy + j] : 0.0, scale = std::abs(want);
      for (int64_t k = 0; k < terms; ++k) {
        const double t = term(i, j, k);
        want += t;
        scale += std::abs(t);
      }
      ASSERT_NEAR(y[i * ldy + j], want, 1e-6 * scale) << i << ", " << j;
    }
  }
}

struct MatmulCase {
  int64_t n;
  DType dtype;
  int threads;
};

std::string CaseName(const testing::TestParamInfo<MatmulCase>& info) {
  return absl::StrCat("n", info.param.n, "_", DTypeName(info.param.dtype), "_threads",
                      info.param.threads);
}

class MatmulTest : public testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulTest, FastPathMatchesReference) {
  const MatmulCase& c = GetParam();
  ThreadPool pool(c.threads);
  uint32_t seed = 1;
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(absl::StrCat("rows ", shape.rows, " cols ", shape.cols));
    Tensor w32 =
        MakeF32Tensor(RandomVector(shape.rows * shape.cols, seed++), {shape.rows, shape.cols});
    Tensor w = ConvertTensor(w32, c.dtype);
    ASSERT_EQ(w.dtype, c.dtype);
    std::vector<float> x = RandomVector(c.n * shape.cols, seed++);
    ASSERT_GT(Norm(x.data(), c.n * shape.cols), 0.0);

    const int64_t out = c.n * shape.rows;
    std::vector<float> y(out + 16, kGuard);  // guard values after the output
    std::vector<float> workspace(MatmulWorkspaceFloats(pool.size(), shape.cols));
    Matmul(pool, x.data(), c.n, w, y.data(), workspace);
    for (int64_t i = out; i < out + 16; ++i) ASSERT_EQ(y[i], kGuard) << "wrote past y at " << i;

    std::vector<float> want(out), want32(out);
    MatmulReference(x.data(), c.n, w, want.data());
    MatmulReference(x.data(), c.n, w32, want32.data());
    ASSERT_GT(Norm(want.data(), out), 0.0);
    ASSERT_GT(Norm(y.data(), out), 0.0);
    for (int64_t i = 0; i < out; ++i) ASSERT_TRUE(std::isfinite(y[i])) << "y[" << i << "]";

    EXPECT_LT(RelativeError(y.data(), want.data(), out), kSameWeightsTolerance);
    EXPECT_LT(RelativeError(y.data(), want32.data(), out), DTypeTolerance(c.dtype));
  }
}

std::vector<MatmulCase> AllCases() {
  std::vector<MatmulCase> cases;
  for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33, 63, 64, 100, 250}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int threads : {1, 2, 3}) cases.push_back({n, dtype, threads});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllPaths, MatmulTest, testing::ValuesIn(AllCases()), CaseName);

// x with every element rounded to bf16 (nearest even), as the bf16 dot product reads it.
std::vector<float> RoundedToBf16(std::vector<float> x) {
  for (float& v : x) v = BF16ToF32(F32ToBF16(v));
  return x;
}

// The packings a PanelMatrix can take on this CPU: each level, and the bf16 dot product where the
// CPU has AVX512_BF16 (whatever Bf16DotActive() says, so every machine with it tests it).
struct Packing {
  SimdLevel level;
  bool bf16_dot;
};
std::vector<Packing> Packings() {
  std::vector<Packing> packings = {{SimdLevel::kAvx2, false}};
  if (GetCpuFeatures().avx512) packings.push_back({SimdLevel::kAvx512, false});
  if (GetCpuFeatures().avx512_bf16) packings.push_back({SimdLevel::kAvx512, true});
  return packings;
}

// Matrices packed once (PanelMatrix) in each packing, against the reference on the same weights:
// every batch from one decode row to several tiles and several slices of x rows (a ragged last
// one), chunks past the first and a ragged last one, K blocks past the first, y rows wider than
// W's; nothing written past a y row's outputs. A bf16 dot product's x is the reference's x
// rounded to bf16; below kBf16DotMinRows it is x itself.
TEST_P(MatmulTest, PanelMatrixMatchesReference) {
  const MatmulCase& c = GetParam();
  ThreadPool pool(c.threads);
  uint32_t seed = 500;
  for (const Packing& packing : Packings()) {
    for (const Shape& shape : {Shape{1, 1}, Shape{37, 33}, Shape{67, 172}, Shape{300, 24},
                               Shape{129, 1100}, Shape{64, 768}}) {
      SCOPED_TRACE(absl::StrCat(SimdLevelName(packing.level), " bf16_dot ", packing.bf16_dot,
                                " rows ", shape.rows, " cols ", shape.cols));
      const Tensor w = ConvertTensor(
          MakeF32Tensor(RandomVector(shape.rows * shape.cols, seed++), {shape.rows, shape.cols}),
          c.dtype);
      const PanelMatrix packed(w, packing.level, packing.bf16_dot);
      ASSERT_EQ(packed.rows(), shape.rows);
      ASSERT_EQ(packed.cols(), shape.cols);
      ASSERT_EQ(packed.dtype(), c.dtype);
      ASSERT_EQ(packed.bf16_dot(),
                packing.bf16_dot && c.dtype == DType::kBF16 && shape.cols % 2 == 0);
      const std::vector<float> x = RandomVector(c.n * shape.cols, seed++);
      const int64_t ldy = shape.rows + 3;
      std::vector<float> y(c.n * ldy, kGuard);
      std::vector<float> workspace(MatmulWorkspaceFloats(pool.size(), shape.cols));
      Matmul(pool, x.data(), c.n, packed, y.data(), ldy, workspace);

      const bool rounds = packed.bf16_dot() && c.n >= kBf16DotMinRows;
      std::vector<float> want(c.n * shape.rows), got(c.n * shape.rows);
      MatmulReference(rounds ? RoundedToBf16(x).data() : x.data(), c.n, w, want.data());
      for (int64_t i = 0; i < c.n; ++i) {
        for (int64_t j = 0; j < ldy; ++j) {
          if (j < shape.rows) {
            got[i * shape.rows + j] = y[i * ldy + j];
          } else {
            ASSERT_EQ(y[i * ldy + j], kGuard) << "wrote past row " << i << "'s outputs at " << j;
          }
        }
      }
      ASSERT_GT(Norm(want.data(), c.n * shape.rows), 0.0);
      EXPECT_LT(RelativeError(got.data(), want.data(), c.n * shape.rows), kSameWeightsTolerance);
    }
  }
}

// The bf16 pairs layout below kBf16DotMinRows multiplies exactly: bit for bit what the k-major
// bf16 panels give.
TEST(PanelMatrixTest, Bf16PairsBelowTheDotRowsEqualKMajorPanels) {
  if (!GetCpuFeatures().avx512_bf16) GTEST_SKIP() << "CPU lacks AVX512_BF16";
  ThreadPool pool(2);
  const int64_t rows = 150, cols = 1100;
  const Tensor w =
      ConvertTensor(MakeF32Tensor(RandomVector(rows * cols, 40), {rows, cols}), DType::kBF16);
  const PanelMatrix pairs(w, SimdLevel::kAvx512, true), k_major(w, SimdLevel::kAvx512, false);
  ASSERT_TRUE(pairs.bf16_dot());
  std::vector<float> workspace(MatmulWorkspaceFloats(pool.size(), cols));
  for (int64_t n : {int64_t{1}, int64_t{16}, kBf16DotMinRows - 1}) {
    const std::vector<float> x = RandomVector(n * cols, 41);
    std::vector<float> a(n * rows), b(n * rows);
    Matmul(pool, x.data(), n, pairs, a.data(), rows, workspace);
    Matmul(pool, x.data(), n, k_major, b.data(), rows, workspace);
    for (int64_t i = 0; i < n * rows; ++i) ASSERT_EQ(a[i], b[i]) << "n " << n << " at " << i;
  }
}

// A workspace that holds fewer rows than n: the dot product runs slab by slab and still gives every
// row; one too small for a tile's rows multiplies exactly instead. Sizes in unpadded rows of pairs:
// 11 hold fewer than a tile's 12 rows however rows are padded; 40 hold 12 or more (30 with the
// padding of 16 pairs a row: slabs); 200 hold all 130 (one slab).
TEST(PanelMatrixTest, Bf16DotRunsInSlabsOfTheWorkspace) {
  if (!GetCpuFeatures().avx512_bf16) GTEST_SKIP() << "CPU lacks AVX512_BF16";
  ThreadPool pool(2);
  const int64_t rows = 70, cols = 96, n = 130;
  const Tensor w =
      ConvertTensor(MakeF32Tensor(RandomVector(rows * cols, 50), {rows, cols}), DType::kBF16);
  const PanelMatrix packed(w, SimdLevel::kAvx512, true);
  const std::vector<float> x = RandomVector(n * cols, 51);
  for (int64_t slab_rows : {11, 40, 200}) {
    SCOPED_TRACE(absl::StrCat("workspace rows ", slab_rows));
    std::vector<float> workspace(slab_rows * cols / 2), y(n * rows), want(n * rows);
    Matmul(pool, x.data(), n, packed, y.data(), rows, workspace);
    const bool rounds = slab_rows >= avx512::kGemmMr;
    MatmulReference(rounds ? RoundedToBf16(x).data() : x.data(), n, w, want.data());
    EXPECT_LT(RelativeError(y.data(), want.data(), n * rows), kSameWeightsTolerance);
  }
}

// RoundToBf16Pairs rounds as F32ToBF16 does (nearest even, overflow to infinity), bit for bit, at
// every ragged row end, writing nothing past a row's pairs.
TEST(Bf16DotKernelTest, RoundToBf16PairsMatchesF32ToBF16) {
  if (!GetCpuFeatures().avx512_bf16) GTEST_SKIP() << "CPU lacks AVX512_BF16";
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t cols : {2, 14, 30, 32, 34, 62, 64, 100}) {
    const int64_t rows = 3;
    std::vector<float> x = RandomVector(rows * cols, 60 + cols);
    x[0] = inf;
    x[1] = -3.4e38f;            // rounds to −infinity
    x[cols - 1] = 1.00390625f;  // halfway between two bf16 values: to the even one
    std::vector<uint32_t> out(rows * cols / 2 + 8, 0xdeadbeefu);
    avx512::RoundToBf16Pairs(x.data(), rows, cols, out.data(), cols / 2);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const uint32_t pair = out[i / 2];
      const auto got = static_cast<uint16_t>(i % 2 == 0 ? pair & 0xffffu : pair >> 16);
      ASSERT_EQ(got, F32ToBF16(x[i])) << "cols " << cols << " element " << i << " = " << x[i];
    }
    for (size_t i = rows * cols / 2; i < out.size(); ++i) ASSERT_EQ(out[i], 0xdeadbeefu);
  }
}

// n rows of seeded bf16 pairs, ldx pairs apart, as RoundToBf16Pairs lays them out.
std::vector<uint32_t> Bf16PairRows(int64_t n, int64_t ldx, uint32_t seed) {
  const std::vector<float> xf = RandomVector(n * ldx * 2, seed);
  std::vector<uint32_t> x(n * ldx);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = F32ToBF16(xf[2 * i]) | uint32_t{F32ToBF16(xf[2 * i + 1])} << 16;
  }
  return x;
}

// Element k of row i of such rows.
double PairElement(const std::vector<uint32_t>& x, int64_t ldx, int64_t i, int64_t k) {
  const uint32_t pair = x[i * ldx + k / 2];
  return BF16ToF32(static_cast<uint16_t>(k % 2 == 0 ? pair : pair >> 16));
}

// The dot-product tile called directly: every tile height, full and partial panel widths, padded
// x and y rows, overwriting and accumulating, against the exact sum of the bf16 values.
TEST(Bf16DotKernelTest, TileMatchesExactSums) {
  if (!GetCpuFeatures().avx512_bf16) GTEST_SKIP() << "CPU lacks AVX512_BF16";
  constexpr int kNr = avx512::kGemmNr;
  uint32_t seed = 700;
  for (int64_t kc : {2, 8, 64, 258}) {
    std::vector<uint16_t> panel(kc * kNr);
    const std::vector<float> values = RandomVector(kc * kNr, seed++);
    // values[k · kNr + j] is W[j, k]; stored in the pairs layout.
    for (int64_t k = 0; k < kc; ++k) {
      for (int j = 0; j < kNr; ++j) {
        panel[(k / 2) * 2 * kNr + 2 * j + k % 2] = F32ToBF16(values[k * kNr + j]);
      }
    }
    for (int mr = 1; mr <= avx512::kGemmMr; ++mr) {
      for (int nr : {1, 17, kNr}) {
        for (bool accumulate : {false, true}) {
          SCOPED_TRACE(absl::StrCat("kc ", kc, " mr ", mr, " nr ", nr, " accumulate ", accumulate));
          const int64_t ldx = kc / 2 + 3, ldy = kNr + 5;
          const std::vector<uint32_t> x = Bf16PairRows(mr, ldx, seed++);
          std::vector<float> y = GuardedOutput(mr, ldy, nr, seed++);
          const std::vector<float> before = y;
          avx512::Bf16DotTile({x.data(), ldx, mr, panel.data(), kc, y.data(), ldy, nr, accumulate});
          ExpectSums(y, before, mr, ldy, nr, accumulate, kc, [&](int64_t i, int64_t j, int64_t k) {
            return PairElement(x, ldx, i, k) * BF16ToF32(panel[(k / 2) * 2 * kNr + 2 * j + k % 2]);
          });
        }
      }
    }
  }
}

// The AMX product of a chunk called directly: x tiles of one and two halves (n ≤ 16 and beyond,
// ragged), full and partial last panels, K blocks past the first (adding to y) with tails of
// fewer than 32 k, against the exact sums of the bf16 values; nothing written past a y row's
// outputs.
TEST(Bf16DotKernelTest, AmxChunkMatchesExactSums) {
  if (!GetCpuFeatures().amx) GTEST_SKIP() << "CPU (or OS) offers no AMX tiles";
  constexpr int kNr = avx512::kGemmNr;
  uint32_t seed = 800;
  for (int64_t cols : {2, 32, 76, 1024 + 96, 2 * 1024 + 34}) {
    for (int64_t rows : {int64_t{1}, int64_t{17}, int64_t{32}, kGemmChunkRows - 5}) {
      for (int64_t n : {1, 16, 17, 32, 45, 70}) {
        SCOPED_TRACE(absl::StrCat("cols ", cols, " rows ", rows, " n ", n));
        const int64_t panels = (rows + kNr - 1) / kNr;
        const std::vector<float> values =
            RandomVector(rows * cols, seed++);  // W[j, k] at j·cols + k
        std::vector<uint16_t> chunk(panels * kNr * cols, 0);
        for (int64_t k0 = 0; k0 < cols; k0 += kGemmKc) {
          const int64_t kc = std::min(kGemmKc, cols - k0);
          for (int64_t j = 0; j < rows; ++j) {
            uint16_t* panel = chunk.data() + (k0 * panels + (j / kNr) * kc) * kNr;
            for (int64_t k = 0; k < kc; ++k) {
              panel[(k / 2) * 2 * kNr + 2 * (j % kNr) + k % 2] =
                  F32ToBF16(values[j * cols + k0 + k]);
            }
          }
        }
        const int64_t ldx = cols / 2 + 3, ldy = rows + 5;
        const std::vector<uint32_t> x = Bf16PairRows(n, ldx, seed++);
        std::vector<float> y = GuardedOutput(n, ldy, rows, seed++);
        avx512::AmxBf16Chunk(x.data(), ldx, n, cols, chunk.data(), rows, y.data(), ldy);
        ExpectSums(y, y, n, ldy, rows, false, cols, [&](int64_t i, int64_t j, int64_t k) {
          return PairElement(x, ldx, i, k) * BF16ToF32(F32ToBF16(values[j * cols + k]));
        });
      }
    }
  }
}

// A Projection packs one part PanelMatrix takes (float; Q4_0 and Q8_0 with AVX512-VNNI) and stacks
// of such quantized parts, keeps stacks with a float part as stored, and multiplies as Matmul does
// on the parts (quantized panels, whose sums are added in another order, within 1e-5).
TEST(ProjectionTest, PacksFloatStacksAndMatchesMatmul) {
  ThreadPool pool(2);
  const int64_t cols = 64, n = 5;
  const Tensor a = MakeF32Tensor(RandomVector(40 * cols, 600), {40, cols});
  const Tensor b = MakeF32Tensor(RandomVector(24 * cols, 601), {24, cols});
  const std::vector<float> x = RandomVector(n * cols, 602);
  std::vector<float> workspace(MatmulWorkspaceFloats(pool.size(), cols));
  for (const std::vector<Tensor>& parts :
       {std::vector<Tensor>{ConvertTensor(a, DType::kF16)},
        std::vector<Tensor>{ConvertTensor(a, DType::kQ8_0)},
        std::vector<Tensor>{ConvertTensor(a, DType::kQ4_0)},
        std::vector<Tensor>{ConvertTensor(a, DType::kQ8_0), ConvertTensor(b, DType::kQ4_0)},
        std::vector<Tensor>{ConvertTensor(a, DType::kQ8_0), ConvertTensor(b, DType::kF16)}}) {
    SCOPED_TRACE(DescribeTensor(parts.back()));
    const Projection projection(parts);
    const int64_t rows = parts.size() == 1 ? 40 : 64;
    EXPECT_EQ(projection.rows(), rows);
    EXPECT_EQ(projection.cols(), cols);
    bool packable = true;
    for (const Tensor& part : parts) {
      packable &= PanelMatrix::Takes(part.dtype) && (parts.size() == 1 || IsQuantized(part.dtype));
    }
    EXPECT_EQ(projection.packed(), packable);
    std::vector<float> got(n * rows), want(n * rows);
    Matmul(pool, x.data(), n, projection, got.data(), workspace);
    Matmul(pool, x.data(), n, std::span<const Tensor>(parts), want.data(), workspace);
    EXPECT_LT(RelativeError(got.data(), want.data(), n * rows), kSameWeightsTolerance);
  }
}

// Which dtypes a PanelMatrix packs at each level.
TEST(PanelMatrixTest, TakesFloatsQ4_0Q8_0AndTheKQuantsEverywhere) {
  for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ8_0,
                        DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
      EXPECT_TRUE(PanelMatrix::Takes(dtype, level)) << DTypeName(dtype);
    }
    for (DType dtype : {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1}) {
      EXPECT_FALSE(PanelMatrix::Takes(dtype, level)) << DTypeName(dtype);
    }
  }
}

// Larger projections (stories15M shapes) on the GEMM path: several chunks per thread, K blocks
// after the first (700 columns: two full and a partial one), chunks narrower than a panel.
TEST(MatmulLargeTest, PrefillProjectionShapes) {
  ThreadPool pool(3);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (Shape shape : {Shape{768, 288}, Shape{288, 768}, Shape{1000, 288}, Shape{100, 700}}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " rows ", shape.rows, " cols ", shape.cols));
      const int64_t n = 19;
      Tensor w = ConvertTensor(
          MakeF32Tensor(RandomVector(shape.rows * shape.cols, 7), {shape.rows, shape.cols}), dtype);
      std::vector<float> x = RandomVector(n * shape.cols, 8);
      std::vector<float> y(n * shape.rows), want(n * shape.rows);
      std::vector<float> workspace(MatmulWorkspaceFloats(pool.size(), shape.cols));
      Matmul(pool, x.data(), n, w, y.data(), workspace);
      MatmulReference(x.data(), n, w, want.data());
      ASSERT_GT(Norm(want.data(), n * shape.rows), 0.0);
      ASSERT_GT(Norm(y.data(), n * shape.rows), 0.0);
      EXPECT_LT(RelativeError(y.data(), want.data(), n * shape.rows), kSameWeightsTolerance);
    }
  }
}

// A second call on the same output must overwrite, not accumulate.
TEST(MatmulLargeTest, OverwritesOutput) {
  ThreadPool pool(2);
  Tensor w = MakeF32Tensor(RandomVector(40 * 24, 3), {40, 24});
  for (int64_t n : {1, 4, 8}) {
    std::vector<float> x = RandomVector(n * 24, 4);
    std::vector<float> y(n * 40, 1e6f), want(n * 40);
    std::vector<float> workspace(MatmulWorkspaceFloats(pool.size(), 24));
    Matmul(pool, x.data(), n, w, y.data(), workspace);
    MatmulReference(x.data(), n, w, want.data());
    EXPECT_LT(RelativeError(y.data(), want.data(), n * 40), kSameWeightsTolerance) << "n " << n;
  }
}

// The GEMV row kernels called directly: x and y rows padded (ldx > cols, ldy > rows), a row range
// that starts and ends inside the matrix; rows outside the range and the padding stay untouched.
using GemvFn = void (*)(const GemvArgs&, int64_t, int64_t);

void CheckGemvKernel(GemvFn gemv) {
  uint32_t seed = 100;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (Shape shape : {Shape{9, 1}, Shape{13, 7}, Shape{21, 33}, Shape{11, 172}, Shape{6, 64},
                        Shape{7, 47}, Shape{5, 300}}) {
      for (int nb = 1; nb <= kGemvMaxBatch; ++nb) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dtype), " rows ", shape.rows, " cols ", shape.cols, " nb ", nb));
        Tensor w = ConvertTensor(
            MakeF32Tensor(RandomVector(shape.rows * shape.cols, seed++), {shape.rows, shape.cols}),
            dtype);
        const int64_t ldx = shape.cols + 5, ldy = shape.rows + 3;
        std::vector<float> x = RandomVector(nb * ldx, seed++);
        std::vector<float> y(nb * ldy, kGuard);
        const int64_t begin = shape.rows > 2 ? 1 : 0, end = shape.rows - (shape.rows > 4 ? 2 : 0);
        GemvArgs args{x.data(), nb, ldx, w.data, dtype, shape.cols, y.data(), ldy};
        gemv(args, begin, end);

        for (int b = 0; b < nb; ++b) {
          std::vector<float> want(shape.rows);
          MatmulReference(x.data() + b * ldx, 1, w, want.data());
          ASSERT_GT(Norm(want.data() + begin, end - begin), 0.0);
          EXPECT_LT(RelativeError(y.data() + b * ldy + begin, want.data() + begin, end - begin),
                    kSameWeightsTolerance)
              << "batch row " << b;
          for (int64_t r = 0; r < ldy; ++r) {
            if (r < begin || r >= end) {
              EXPECT_EQ(y[b * ldy + r], kGuard) << "row " << r << " outside the range was written";
            }
          }
        }
      }
    }
  }
}

TEST(GemvKernelTest, Avx2) {
  if (!CpuIsSupported()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  CheckGemvKernel(&avx2::GemvRows);
}

TEST(GemvKernelTest, Avx512) {
  if (!GetCpuFeatures().avx512) GTEST_SKIP() << "CPU lacks AVX-512 F/BW/VL/DQ";
  CheckGemvKernel(&avx512::GemvRows);
}

// The batched GEMV kernels called directly: empty calls, every x-row count up to three tiles and
// a partial one, row counts that leave 1 to 3 rows of a last tile, columns off the vector width,
// padded x, w and y rows, f32, f16 and bf16 weights (the last row ending the allocation, so a read
// past it is caught under ASan), overwriting and accumulating, with and without a prefetch range;
// each y[b, j] against a double-precision dot product, padding untouched.
void CheckBatchGemvKernel(void (*kernel)(const BatchGemvArgs&)) {
  // No x rows or no weight rows: nothing to compute, nothing written.
  float untouched = kGuard;
  kernel({nullptr, 1, 0, nullptr, DType::kF32, 1, 3, 1, &untouched, 1, false, nullptr, 0});
  kernel({nullptr, 1, 3, nullptr, DType::kF16, 1, 0, 1, &untouched, 1, false, nullptr, 0});
  ASSERT_EQ(untouched, kGuard);
  uint32_t seed = 200;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t rows : {1, 2, 3, 4, 7, 18}) {
      for (int64_t cols : {1, 7, 16, 33, 172}) {
        for (int64_t n = 1; n <= 19; n += (n < 8 ? 1 : 5)) {
          const bool accumulate = (rows + cols + n) % 2 == 1;
          SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " rows ", rows, " cols ", cols, " n ", n,
                                    " accumulate ", accumulate));
          const int64_t ldx = cols + 5, ldw = cols + 3, ldy = rows + 2;
          const int64_t w_len = (rows - 1) * ldw + cols;
          std::vector<float> x = RandomVector(n * ldx, seed++);
          const Tensor w =
              ConvertTensor(MakeF32Tensor(RandomVector(w_len, seed++), {w_len}), dtype);
          std::vector<float> y = GuardedOutput(n, ldy, rows, seed++);
          const std::vector<float> before = y;
          const std::vector<float> next = RandomVector(300, seed++);
          kernel({x.data(), ldx, n, w.data, dtype, ldw, rows, cols, y.data(), ldy, accumulate,
                  next.data(), n % 3 == 0 ? 0 : static_cast<int64_t>(next.size() * sizeof(float))});
          ExpectSums(y, before, n, ldy, rows, accumulate, cols,
                     [&](int64_t b, int64_t j, int64_t c) {
                       return double{x[b * ldx + c]} * ElementAsFloat(w, j * ldw + c);
                     });
        }
      }
    }
  }
}

TEST(BatchGemvKernelTest, Avx2) {
  if (!CpuIsSupported()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  CheckBatchGemvKernel(&avx2::BatchGemvRows);
}

TEST(BatchGemvKernelTest, Avx512) {
  if (!GetCpuFeatures().avx512) GTEST_SKIP() << "CPU lacks AVX-512 F/BW/VL/DQ";
  CheckBatchGemvKernel(&avx512::BatchGemvRows);
}

// The GEMM micro-kernels called directly: f32, f16 and bf16 panels, every tile height up to
// kGemmMr, full and partial panel widths, padded x and y rows, overwriting and accumulating; y
// past nr stays untouched.
void CheckGemmTile(void (*tile)(const GemmTileArgs&), int max_mr, int panel_width) {
  uint32_t seed = 300;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t kc : {1, 7, 64, 257}) {
      // The panel as the kernel stores it, and its values as floats.
      const Tensor stored = ConvertTensor(
          MakeF32Tensor(RandomVector(kc * panel_width, seed++), {kc, panel_width}), dtype);
      std::vector<float> panel(kc * panel_width);
      for (int64_t e = 0; e < kc * panel_width; ++e) panel[e] = ElementAsFloat(stored, e);
      for (int mr = 1; mr <= max_mr; ++mr) {
        for (int nr : {1, panel_width / 2 + 1, panel_width}) {
          for (bool accumulate : {false, true}) {
            SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " kc ", kc, " mr ", mr, " nr ", nr,
                                      " accumulate ", accumulate));
            const int64_t ldx = kc + 3, ldy = panel_width + 5;
            std::vector<float> x = RandomVector(mr * ldx, seed++);
            std::vector<float> y = GuardedOutput(mr, ldy, nr, seed++);
            const std::vector<float> before = y;
            tile({x.data(), ldx, mr, stored.data, dtype, kc, y.data(), ldy, nr, accumulate});
            ExpectSums(y, before, mr, ldy, nr, accumulate, kc,
                       [&](int64_t i, int64_t j, int64_t k) {
                         return double{x[i * ldx + k]} * panel[k * panel_width + j];
                       });
          }
        }
      }
    }
  }
}

TEST(GemmKernelTest, Avx2) {
  if (!CpuIsSupported()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  CheckGemmTile(&avx2::GemmTile, avx2::kGemmMr, avx2::kGemmNr);
}

TEST(GemmKernelTest, Avx512) {
  if (!GetCpuFeatures().avx512) GTEST_SKIP() << "CPU lacks AVX-512 F/BW/VL/DQ";
  CheckGemmTile(&avx512::GemmTile, avx512::kGemmMr, avx512::kGemmNr);
}

// The panel packers called directly: every live row count, column blocks with ragged ends and an
// offset k0; the panel holds exactly the rows' columns (zeros for missing rows), nothing past it
// is written.
void CheckPackPanel(GemmPackFn pack, int panel_width) {
  uint32_t seed = 400;
  for (int64_t k0 : {0, 5}) {
    for (int64_t kc : {1, 7, 16, 17, 64, 257}) {
      for (int live = 1; live <= panel_width; ++live) {
        SCOPED_TRACE(absl::StrCat("k0 ", k0, " kc ", kc, " live ", live));
        std::vector<std::vector<float>> rows;
        std::vector<const float*> src;
        for (int j = 0; j < live; ++j) {
          rows.push_back(RandomVector(k0 + kc, seed++));
          src.push_back(rows.back().data());
        }
        const int64_t size = kc * panel_width;
        std::vector<float> panel(size + 16, kGuard);
        pack(src.data(), live, k0, kc, panel.data());
        for (int64_t k = 0; k < kc; ++k) {
          for (int j = 0; j < panel_width; ++j) {
            const float want = j < live ? rows[j][k0 + k] : 0.0f;
            ASSERT_EQ(panel[k * panel_width + j], want) << "k " << k << " j " << j;
          }
        }
        for (int64_t i = size; i < size + 16; ++i) ASSERT_EQ(panel[i], kGuard) << "wrote past";
      }
    }
  }
}

TEST(GemmPackTest, Avx2) {
  if (!CpuIsSupported()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  CheckPackPanel(&avx2::PackPanel, avx2::kGemmNr);
}

TEST(GemmPackTest, Avx512) {
  if (!GetCpuFeatures().avx512) GTEST_SKIP() << "CPU lacks AVX-512 F/BW/VL/DQ";
  CheckPackPanel(&avx512::PackPanel, avx512::kGemmNr);
}

TEST(GemvKernelTest, WidenRowMatchesElementAsFloat) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t n : {1, 7, 8, 9, 33, 172}) {
      Tensor t = ConvertTensor(MakeF32Tensor(RandomVector(n, 9), {1, n}), dtype);
      std::vector<float> widened(n);
      avx2::WidenRow(t.data, dtype, n, widened.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(widened[i], ElementAsFloat(t, i)) << DTypeName(dtype) << " n " << n << " i " << i;
      }
    }
  }
}

// Packing on a pool's threads (chunks of 128 rows in turn, each thread with scratch of its own)
// gives the panels packing on the caller's thread does: Matmul's outputs equal bit for bit, for
// every float dtype, bf16 pairs included, over ragged chunks.
TEST(PanelMatrixTest, PackingOnAPoolEqualsPackingInline) {
  ThreadPool pool(2);
  const int64_t rows = 700, cols = 96, n = 70;  // 5 full chunks and a ragged one
  const std::vector<float> x = RandomVector(n * cols, 620);
  std::vector<float> workspace(MatmulWorkspaceFloats(pool.size(), cols));
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor w =
        ConvertTensor(MakeF32Tensor(RandomVector(rows * cols, 621), {rows, cols}), dtype);
    const PanelMatrix inline_packed(w),
        pool_packed(w, ActiveSimdLevel(), Bf16DotActive(), false, &pool);
    std::vector<float> want(n * rows), got(n * rows);
    Matmul(pool, x.data(), n, inline_packed, want.data(), rows, workspace);
    Matmul(pool, x.data(), n, pool_packed, got.data(), rows, workspace);
    for (int64_t i = 0; i < n * rows; ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << i;
    }
  }
}

// Packing keeps every 16-bit weight as it is: infinities and the largest finite values too (a
// saturating narrowing would turn an infinite weight into ±65504 and its outputs finite).
TEST(PanelMatrixTest, KeepsInfinitiesAndExtremes) {
  ThreadPool pool(1);
  const float inf = std::numeric_limits<float>::infinity();
  // Row j's only nonzero weight is at column j: y[j] = that weight times x[j] = 1.
  const std::vector<float> diagonal = {inf, -inf, 65504.0f, -65504.0f, 6.1e-5f, 3.0e38f};
  const int64_t rows = static_cast<int64_t>(diagonal.size()), cols = rows;
  std::vector<float> values(rows * cols, 0.0f);
  for (int64_t j = 0; j < rows; ++j) values[j * cols + j] = diagonal[j];
  const std::vector<float> x(cols, 1.0f);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor w = ConvertTensor(MakeF32Tensor(values, {rows, cols}), dtype);
    std::vector<float> got(rows), want(rows);
    Matmul(pool, x.data(), 1, PanelMatrix(w), got.data(), rows, {});
    MatmulReference(x.data(), 1, w, want.data());
    for (int64_t j = 0; j < rows; ++j) EXPECT_EQ(got[j], want[j]) << "row " << j;
  }
}

TEST(Float16RowsTest, FloatsToF16RoundsWithoutClamping) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = RandomVector(19, 11);
  for (float v : {inf, -inf, 65504.0f, -65504.0f, 65520.0f, 1e6f, 6.0e-8f}) x.push_back(v);
  std::vector<uint16_t> got(x.size());
  FloatsToF16(x.data(), static_cast<int64_t>(x.size()), got.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], F32ToF16(x[i])) << "x = " << x[i];
}

TEST(CpuFeaturesTest, ActiveLevelIsConsistent) {
  const SimdLevel level = ActiveSimdLevel();
  if (level == SimdLevel::kAvx512) {
    EXPECT_TRUE(GetCpuFeatures().avx512);
  }
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx2), "avx2");
  EXPECT_STREQ(SimdLevelName(SimdLevel::kAvx512), "avx512");
  EXPECT_TRUE(CpuIsSupported());
}

// Each bad override is named with its value; valid ones, and unset or empty ones, are not.
TEST(CpuFeaturesTest, SimdOverridesAreCheckedAgainstTheCpu) {
  CpuFeatures avx2_only;
  avx2_only.avx2 = avx2_only.fma = avx2_only.f16c = true;
  CpuFeatures bf16 = avx2_only;
  bf16.avx512 = bf16.avx512_vnni = bf16.avx512_bf16 = true;
  for (const CpuFeatures& f : {avx2_only, bf16}) {
    EXPECT_EQ(SimdOverrideError(nullptr, nullptr, nullptr, f), "");
    EXPECT_EQ(SimdOverrideError("", "", nullptr, f), "");
    EXPECT_EQ(SimdOverrideError("avx2", "off", nullptr, f), "");
    EXPECT_EQ(SimdOverrideError("avx5l2", nullptr, nullptr, f),
              "PDSERVE_SIMD=avx5l2: expected avx2 or avx512");
    EXPECT_EQ(SimdOverrideError(nullptr, "yes", nullptr, f),
              "PDSERVE_BF16_DOT=yes: expected on or off");
    EXPECT_EQ(SimdOverrideError("AVX2", nullptr, nullptr, f),
              "PDSERVE_SIMD=AVX2: expected avx2 or avx512");
  }
  EXPECT_EQ(SimdOverrideError("avx512", "on", nullptr, bf16), "");
  EXPECT_EQ(SimdOverrideError(nullptr, "on", nullptr, bf16), "");
  EXPECT_NE(SimdOverrideError("avx512", nullptr, nullptr, avx2_only).find("lacks AVX-512"),
            std::string::npos);
  EXPECT_NE(SimdOverrideError(nullptr, "on", nullptr, avx2_only).find("lacks AVX512_BF16"),
            std::string::npos);
  EXPECT_NE(SimdOverrideError("avx2", "on", nullptr, bf16).find("PDSERVE_SIMD=avx2 is set"),
            std::string::npos);
  CpuFeatures amx = bf16;
  amx.amx = true;
  for (const CpuFeatures& f : {avx2_only, bf16, amx}) {
    EXPECT_EQ(SimdOverrideError(nullptr, nullptr, "off", f), "");
    EXPECT_EQ(SimdOverrideError(nullptr, nullptr, "of", f), "PDSERVE_AMX=of: expected on or off");
  }
  EXPECT_EQ(SimdOverrideError("avx512", "on", "on", amx), "");
  EXPECT_NE(SimdOverrideError(nullptr, nullptr, "on", bf16).find("offers no AMX"),
            std::string::npos);
  EXPECT_NE(SimdOverrideError("avx2", nullptr, "on", amx).find("PDSERVE_SIMD=avx2 is set"),
            std::string::npos);
}

}  // namespace
}  // namespace pdserve::kernels
