// cuda::Gemm against kernels::MatmulReference on the same seeded x and W (uniform in [−1, 1], W
// narrowed to its dtype on the host, so both sides multiply by identical weights): f32, f16 and
// bf16 weights; small and odd shapes, decode batches n = 1..4 and prefill n = 512 on the
// stories110M projections (768x768, 2048x768, 768x2048) and its 32000x768 classifier. Large
// shapes are checked on sampled tokens (every output column of each). Also: the activation
// conversion rounds like the CPU, one Gemm serves several matrices in a row, and Run refuses what
// Create was not sized for. Without a device: cuBLAS is not in the process until it is loaded.
//
// Tolerances, with S = Σ_c |x_c · w_c| of the output element (computed in double):
//   f32:  |Δ| ≤ 2^-17·S + 1e-6 (pedantic fp32 on both sides differs by summation order only;
//         TF32's 2^-11 per product would not pass the mean test below);
//   bf16: |Δ| ≤ 2^-7·S + 1e-5 (the GPU rounds x to bf16: ≤ 2^-8 relative per product);
//   f16:  |Δ| ≤ 2^-10·S + 1e-5 (x rounded to f16: ≤ 2^-11 relative per product).
// Rounding errors are independent across columns, so over a matrix the mean of |Δ| / S is also
// bounded: ≤ 2^-20 for f32 and 4u/√cols for 16-bit (u = 2^-8 bf16, 2^-11 f16), about ten times
// what they are, and below what one missing column of products would give.
#include "kernels/cuda/gemm.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/tensor/float16.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gpu_test.h"
#include "kernels/matmul.h"

namespace pdserve::kernels::cuda {
namespace {

bool CublasMapped() {
  std::ifstream maps("/proc/self/maps");
  const std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
  return text.find("libcublas") != std::string::npos;
}

// Needs no device: loading the library does not initialize a GPU.
TEST(CublasLibraryTest, LoadedOnlyWhenAskedFor) {
  ASSERT_FALSE(CublasMapped()) << "cuBLAS is in the process before anything asked for it";
  absl::StatusOr<const CublasLibrary*> cublas = LoadCublas();
  ASSERT_TRUE(cublas.ok()) << cublas.status();
  EXPECT_TRUE(CublasMapped());
  EXPECT_NE((*cublas)->gemm_ex, nullptr);
  EXPECT_EQ(*LoadCublas(), *cublas);  // once per process
}

constexpr float kSentinel = 12345.0f;
constexpr size_t kGuardFloats = 37;
// Above this many multiply-adds, only sampled tokens are checked against the reference.
constexpr int64_t kFullCheckMacs = int64_t{1} << 25;

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Tolerance {
  double relative;       // of S per element
  double absolute;       // per element
  double mean_relative;  // bound on the mean of |Δ| / S
};

Tolerance ToleranceFor(DType dtype, int64_t cols) {
  const double root = std::sqrt(static_cast<double>(cols));
  switch (dtype) {
    case DType::kF32:
      return {0x1p-17, 1e-6, 0x1p-20};
    case DType::kBF16:
      return {0x1p-7, 1e-5, 4 * 0x1p-8 / root};
    case DType::kF16:
      return {0x1p-10, 1e-5, 4 * 0x1p-11 / root};
    default:
      break;  // the GPU runs plain dtypes only
  }
  return {};
}

// A host weight matrix and its device copy.
struct Weights {
  Tensor host;
  DeviceBuffer<uint8_t> device;

  DeviceMatrix Matrix() const {
    return {.data = device.data(), .dtype = host.dtype, .rows = host.rows(), .cols = host.cols()};
  }
};

Weights MakeWeights(int64_t rows, int64_t cols, DType dtype, uint32_t seed) {
  Weights w;
  w.host = ConvertTensor(MakeF32Tensor(RandomFloats(rows * cols, seed), {rows, cols}), dtype);
  w.device =
      Upload<uint8_t>(std::span(static_cast<const uint8_t*>(w.host.data), w.host.NumBytes()));
  return w;
}

// Tokens whose outputs are checked: all of them for small problems, else the first, second,
// middle and last and four more at random.
std::vector<int64_t> CheckedTokens(int64_t n, int64_t rows, int64_t cols, uint32_t seed) {
  if (n * rows * cols <= kFullCheckMacs) {
    std::vector<int64_t> all(n);
    for (int64_t t = 0; t < n; ++t) all[t] = t;
    return all;
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> token(0, n - 1);
  std::set<int64_t> chosen = {0, std::min<int64_t>(1, n - 1), n / 2, n - 1};
  for (int i = 0; i < 4; ++i) chosen.insert(token(rng));
  return {chosen.begin(), chosen.end()};
}

// Compares y (n rows of w.rows, from the GPU) with MatmulReference on the checked tokens.
void ExpectMatchesReference(const std::vector<float>& x, int64_t n, const Tensor& w,
                            const std::vector<float>& y, uint32_t seed) {
  const int64_t rows = w.rows(), cols = w.cols();
  const std::vector<int64_t> tokens = CheckedTokens(n, rows, cols, seed);
  const int64_t m = static_cast<int64_t>(tokens.size());
  std::vector<float> x_checked(m * cols), want(m * rows);
  for (int64_t i = 0; i < m; ++i) {
    std::copy_n(x.begin() + tokens[i] * cols, cols, x_checked.begin() + i * cols);
  }
  MatmulReference(x_checked.data(), m, w, want.data());

  const Tolerance tolerance = ToleranceFor(w.dtype, cols);
  const Tensor w32 = ToF32(w);
  const float* weights = w32.as<float>();
  double ratio_sum = 0.0, norm = 0.0;
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    const float* xr = x_checked.data() + i * cols;
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0.0;
      for (int64_t c = 0; c < cols; ++c) s += std::fabs(double{xr[c]} * weights[r * cols + c]);
      const double got = y[tokens[i] * rows + r], expected = want[i * rows + r];
      const double error = std::fabs(got - expected);
      norm += got * got;
      ratio_sum += error / s;
      if (!(error <= tolerance.relative * s + tolerance.absolute) && ++bad <= 3) {
        ADD_FAILURE() << "y[" << tokens[i] << ", " << r << "] = " << got << ", reference "
                      << expected << ", S " << s;
      }
    }
  }
  EXPECT_EQ(bad, 0) << "elements out of tolerance, of " << m * rows;
  EXPECT_LE(ratio_sum / static_cast<double>(m * rows), tolerance.mean_relative)
      << "mean |error| / S";
  EXPECT_GT(norm, 0.0) << "all-zero output";
}

// One Gemm sized for this problem; y carries guard floats that must stay untouched.
void CheckGemm(int64_t n, int64_t rows, int64_t cols, DType dtype, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " n " << n << " W [" << rows << ", "
                                  << cols << "]");
  const Weights w = MakeWeights(rows, cols, dtype, seed);
  const std::vector<float> x = RandomFloats(n * cols, seed + 1);
  auto device_x = Upload<float>(x);
  auto y = Upload<float>(std::vector<float>(n * rows + kGuardFloats, kSentinel));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    auto gemm = Gemm::Create(stream, n, cols);
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    const absl::Status run = (*gemm)->Run(device_x.data(), n, w.Matrix(), y.data());
    EXPECT_TRUE(run.ok()) << run;
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  cudaStreamDestroy(stream);
  std::vector<float> got(y.size());
  ASSERT_TRUE(y.CopyToHost(std::span<float>(got)).ok());
  for (size_t i = n * rows; i < got.size(); ++i) ASSERT_EQ(got[i], kSentinel) << "wrote past y";
  ExpectMatchesReference(x, n, w.host, got, seed + 2);
}

const DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

TEST(CudaGemmTest, SmallAndOddShapes) {
  PDSERVE_REQUIRE_GPU();
  struct Shape {
    int64_t n, rows, cols;
  };
  const Shape shapes[] = {{1, 1, 1},     {1, 7, 3},     {3, 13, 17},   {4, 64, 33},
                          {2, 288, 288}, {5, 100, 257}, {17, 31, 769}, {64, 129, 65}};
  uint32_t seed = 1;
  for (DType dtype : kDTypes) {
    for (const Shape& s : shapes) {
      CheckGemm(s.n, s.rows, s.cols, dtype, seed);
      seed += 3;
    }
  }
}

// The stories110M projections (q/k/v/o, w1/w3, w2) and its classifier.
struct Matrix {
  int64_t rows, cols;
};
const Matrix kModelMatrices[] = {{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}};

TEST(CudaGemmTest, DecodeBatches) {
  PDSERVE_REQUIRE_GPU();
  uint32_t seed = 100;
  for (DType dtype : kDTypes) {
    for (const Matrix& m : kModelMatrices) {
      for (int64_t n = 1; n <= 4; ++n) {
        CheckGemm(n, m.rows, m.cols, dtype, seed);
        seed += 3;
      }
    }
  }
}

TEST(CudaGemmTest, PrefillShapes) {
  PDSERVE_REQUIRE_GPU();
  uint32_t seed = 200;
  for (DType dtype : kDTypes) {
    for (const Matrix& m : kModelMatrices) {
      CheckGemm(512, m.rows, m.cols, dtype, seed);
      seed += 3;
    }
  }
}

// One Gemm (sized for the largest) runs matrices of every dtype and shape back to back on its
// stream, reusing its workspace, before a single synchronization.
TEST(CudaGemmTest, OneGemmManyMatrices) {
  PDSERVE_REQUIRE_GPU();
  struct Problem {
    int64_t n, rows, cols;
    DType dtype;
  };
  const Problem problems[] = {{8, 300, 1024, DType::kBF16}, {3, 77, 500, DType::kF16},
                              {8, 64, 1024, DType::kF32},   {1, 512, 1000, DType::kBF16},
                              {5, 33, 17, DType::kF16},     {8, 1000, 1024, DType::kF16}};
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto gemm = Gemm::Create(stream, 8, 1024);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  std::vector<Weights> weights;
  std::vector<std::vector<float>> xs;
  std::vector<DeviceBuffer<float>> device_xs, ys;
  uint32_t seed = 300;
  for (const Problem& p : problems) {
    weights.push_back(MakeWeights(p.rows, p.cols, p.dtype, seed++));
    xs.push_back(RandomFloats(p.n * p.cols, seed++));
    device_xs.push_back(Upload<float>(xs.back()));
    ys.push_back(Upload<float>(std::vector<float>(p.n * p.rows, kSentinel)));
  }
  for (size_t i = 0; i < std::size(problems); ++i) {
    const absl::Status run =
        (*gemm)->Run(device_xs[i].data(), problems[i].n, weights[i].Matrix(), ys[i].data());
    ASSERT_TRUE(run.ok()) << run;
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (size_t i = 0; i < std::size(problems); ++i) {
    SCOPED_TRACE(testing::Message() << "problem " << i);
    std::vector<float> got(ys[i].size());
    ASSERT_TRUE(ys[i].CopyToHost(std::span<float>(got)).ok());
    ExpectMatchesReference(xs[i], problems[i].n, weights[i].host, got, seed++);
  }
  gemm->reset();
  cudaStreamDestroy(stream);
}

// gemm.h: InvalidArgument beyond what Create was sized for (y untouched); n = 0 does nothing.
TEST(CudaGemmTest, RefusesWhatItWasNotSizedFor) {
  PDSERVE_REQUIRE_GPU();
  auto gemm = Gemm::Create(nullptr, 4, 64);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  const Weights narrow = MakeWeights(16, 64, DType::kBF16, 1);
  const Weights wide = MakeWeights(16, 65, DType::kBF16, 2);
  auto x = Upload<float>(RandomFloats(5 * 65, 3));
  auto y = Upload<float>(std::vector<float>(5 * 16, kSentinel));
  EXPECT_EQ((*gemm)->Run(x.data(), 5, narrow.Matrix(), y.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*gemm)->Run(x.data(), 2, wide.Matrix(), y.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*gemm)->Run(x.data(), 0, narrow.Matrix(), y.data()).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(y.size());
  ASSERT_TRUE(y.CopyToHost(std::span<float>(got)).ok());
  for (float v : got) ASSERT_EQ(v, kSentinel);
}

// The GPU narrows activations exactly as core/tensor/float16.h does (round to nearest even,
// overflow to infinity, f16 subnormals), NaN staying NaN.
TEST(CudaGemmTest, ActivationConversionRoundsLikeTheCpu) {
  PDSERVE_REQUIRE_GPU();
  std::mt19937 rng(400);
  std::vector<float> x(1 << 20);
  for (float& v : x) v = std::bit_cast<float>(static_cast<uint32_t>(rng()));  // every exponent
  const float specials[] = {0.0f,       -0.0f,      65504.0f,
                            65519.99f,  65520.0f,   1.00048828125f /* f16 halfway */,
                            0x1p-25f,   0x1.8p-24f, 1.00390625f /* bf16 halfway */,
                            1.01171875f};
  std::copy(std::begin(specials), std::end(specials), x.begin());
  auto device_x = Upload<float>(x);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    auto out = Upload<uint16_t>(std::vector<uint16_t>(x.size(), 0));
    ConvertF32To16(device_x.data(), static_cast<int64_t>(x.size()), dtype, out.data(), nullptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> got(x.size());
    ASSERT_TRUE(out.CopyToHost(std::span<uint16_t>(got)).ok());
    int64_t mismatches = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t want = dtype == DType::kF16 ? F32ToF16(x[i]) : F32ToBF16(x[i]);
      if (std::isnan(x[i])) {
        const float widened = dtype == DType::kF16 ? F16ToF32(got[i]) : BF16ToF32(got[i]);
        EXPECT_TRUE(std::isnan(widened)) << "element " << i;
      } else if (got[i] != want && ++mismatches <= 3) {
        ADD_FAILURE() << std::hexfloat << x[i] << ": got 0x" << std::hex << got[i] << ", want 0x"
                      << want;
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

}  // namespace
}  // namespace pdserve::kernels::cuda
