// The elementwise and per-row CUDA ops against their CPU references on the same seeded inputs:
// embedding lookup (f32/f16/bf16, every 16-bit pattern), RmsNorm and AddRmsNorm, table RoPE (both
// pairings, strided rows, positions up to the table's end, Llama 3.1 scaling), SwiGLU, residual
// add and row gather. Odd sizes, n = 1 and dims that are not multiples of 4 or 32 throughout.
// Every output buffer carries guard floats past its end that must stay untouched.
//
// Tolerances: embedding, RoPE, residual add, gather: bit-exact (same conversions, the CPU's fmas,
// single roundings). RmsNorm: |Δ| ≤ 3e-5·|want| + 1e-6 (the tree-reduced sum of squares differs
// from the CPU's sequential one by ~√dim roundings; the scale takes half of that). SwiGLU:
// |Δ| ≤ 4e-6·|want| + 1e-30 (CUDA's expf is within 2 ulp, then four correctly rounded steps).
#include <cuda_runtime_api.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <vector>

#include "core/tensor/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gpu_test.h"
#include "kernels/cuda/residual.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"
#include "kernels/embedding.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace pdserve::kernels::cuda {
namespace {

constexpr float kSentinel = 12345.0f;
constexpr size_t kGuardFloats = 37;

// A blocking stream (ordered after the synchronous uploads on the legacy default stream).
class Stream {
 public:
  Stream() { EXPECT_EQ(cudaStreamCreate(&stream_), cudaSuccess); }
  ~Stream() { cudaStreamDestroy(stream_); }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// `n` floats and kGuardFloats more, all kSentinel.
DeviceBuffer<float> Output(size_t n) {
  return Upload<float>(std::vector<float>(n + kGuardFloats, kSentinel));
}

// Waits for `stream` and reads the whole buffer back.
template <typename T>
std::vector<T> Download(const DeviceBuffer<T>& buffer, cudaStream_t stream) {
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<T> host(buffer.size());
  EXPECT_TRUE(buffer.CopyToHost(std::span<T>(host)).ok());
  return host;
}

void ExpectGuardIntact(const std::vector<float>& got, size_t n) {
  for (size_t i = n; i < got.size(); ++i) ASSERT_EQ(got[i], kSentinel) << "wrote past the end";
}

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

bool AllZero(std::span<const float> v) {
  for (float x : v) {
    if (x != 0.0f) return false;
  }
  return true;
}

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// Expects got[i] and want[i] to have the same bits for i < want.size(); reports the first few.
void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want) {
  int64_t mismatches = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (Bits(got[i]) != Bits(want[i]) && ++mismatches <= 3) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << want.size();
}

// --- Embedding -------------------------------------------------------------------------------

void CheckEmbedding(const Tensor& table, const std::vector<int32_t>& ids) {
  const int64_t dim = table.cols(), n = static_cast<int64_t>(ids.size());
  Stream stream;
  auto device_table =
      Upload<uint8_t>(std::span(static_cast<const uint8_t*>(table.data), table.NumBytes()));
  auto device_ids = Upload<int32_t>(ids);
  auto out = Output(n * dim);
  EmbeddingLookup(device_table.data(), table.dtype, dim, device_ids.data(), n, out.data(),
                  stream.get());
  const std::vector<float> got = Download(out, stream.get());
  std::vector<float> want(n * dim);
  kernels::EmbeddingLookup(table, ids.data(), n, want.data());
  ASSERT_FALSE(AllZero(want));
  ExpectSameBits(got, want);
  ExpectGuardIntact(got, want.size());
}

TEST(CudaEmbeddingTest, MatchesCpuForEveryDtypeAndShape) {
  PDSERVE_REQUIRE_GPU();
  uint32_t seed = 1;
  const int64_t vocab = 37;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t dim : {1, 3, 67, 768, 4097}) {
      const Tensor table = ConvertTensor(
          MakeF32Tensor(RandomFloats(vocab * dim, seed++, -2.0f, 2.0f), {vocab, dim}), dtype);
      for (int n : {1, 5, 300}) {
        SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " dim " << dim << " n " << n);
        std::mt19937 rng(seed++);
        std::uniform_int_distribution<int32_t> id(0, vocab - 1);
        std::vector<int32_t> ids(n);
        for (int32_t& i : ids) i = id(rng);
        ids.back() = vocab - 1;
        if (n > 1) ids.front() = 0;
        CheckEmbedding(table, ids);
      }
    }
  }
}

// Every f16 and bf16 bit pattern (zeros, subnormals, infinities, NaN payloads) widens to exactly
// the CPU's float.
TEST(CudaEmbeddingTest, WidensEvery16BitPatternLikeTheCpu) {
  PDSERVE_REQUIRE_GPU();
  std::vector<uint16_t> patterns(1 << 16);
  for (size_t i = 0; i < patterns.size(); ++i) patterns[i] = static_cast<uint16_t>(i);
  std::vector<int32_t> ids(256);
  for (int32_t i = 0; i < 256; ++i) ids[i] = 255 - i;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor table = {
        .dtype = dtype, .shape = {256, 256}, .data = patterns.data(), .owner = nullptr};
    CheckEmbedding(table, ids);
  }
}

// --- RmsNorm ---------------------------------------------------------------------------------

// Rows of x at different scales (0.01, 1, 100), so the normalization has work to do.
std::vector<float> ScaledRows(int64_t n, int64_t dim, uint32_t seed) {
  std::vector<float> x = RandomFloats(n * dim, seed, -2.0f, 2.0f);
  for (int64_t r = 0; r < n; ++r) {
    const float scale = r % 3 == 0 ? 1.0f : (r % 3 == 1 ? 0.01f : 100.0f);
    for (int64_t i = 0; i < dim; ++i) x[r * dim + i] *= scale;
  }
  return x;
}

void ExpectNormClose(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_FALSE(AllZero(want));
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double error = std::fabs(double{got[i]} - want[i]);
    if (!(error <= 3e-5 * std::fabs(want[i]) + 1e-6) && ++bad <= 3) {
      ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0);
}

const int64_t kNormDims[] = {1, 7, 31, 288, 768, 4096, 5000};

TEST(CudaRmsNormTest, MatchesReference) {
  PDSERVE_REQUIRE_GPU();
  uint32_t seed = 100;
  for (int64_t n : {1, 3, 17}) {
    for (int64_t dim : kNormDims) {
      SCOPED_TRACE(testing::Message() << "n " << n << " dim " << dim);
      const std::vector<float> x = ScaledRows(n, dim, seed++);
      const std::vector<float> weight = RandomFloats(dim, seed++, 0.5f, 1.5f);
      Stream stream;
      auto device_x = Upload<float>(x);
      auto device_weight = Upload<float>(weight);
      auto out = Output(n * dim);
      RmsNorm(device_x.data(), device_weight.data(), n, dim, 1e-5f, out.data(), stream.get());
      const std::vector<float> got = Download(out, stream.get());
      std::vector<float> want(n * dim);
      RmsNormReference(x.data(), weight.data(), n, dim, 1e-5f, want.data());
      ExpectNormClose(got, want);
      ExpectGuardIntact(got, want.size());
    }
  }
}

// rms_norm.h: out may alias x.
TEST(CudaRmsNormTest, InPlace) {
  PDSERVE_REQUIRE_GPU();
  const int64_t n = 5, dim = 4099;
  const std::vector<float> x = ScaledRows(n, dim, 7);
  const std::vector<float> weight = RandomFloats(dim, 8, 0.5f, 1.5f);
  Stream stream;
  std::vector<float> guarded = x;
  guarded.resize(x.size() + kGuardFloats, kSentinel);
  auto device_x = Upload<float>(guarded);
  auto device_weight = Upload<float>(weight);
  RmsNorm(device_x.data(), device_weight.data(), n, dim, 1e-6f, device_x.data(), stream.get());
  const std::vector<float> got = Download(device_x, stream.get());
  std::vector<float> want(n * dim);
  RmsNormReference(x.data(), weight.data(), n, dim, 1e-6f, want.data());
  ExpectNormClose(got, want);
  ExpectGuardIntact(got, want.size());
}

// x += delta exactly (one fp32 addition per element, as on the CPU), then out = RmsNorm(x).
TEST(CudaRmsNormTest, AddRmsNormUpdatesResidualThenNormalizes) {
  PDSERVE_REQUIRE_GPU();
  uint32_t seed = 200;
  for (int64_t n : {1, 4, 33}) {
    for (int64_t dim : kNormDims) {
      SCOPED_TRACE(testing::Message() << "n " << n << " dim " << dim);
      const std::vector<float> x = ScaledRows(n, dim, seed++);
      const std::vector<float> delta = RandomFloats(n * dim, seed++, -1.0f, 1.0f);
      const std::vector<float> weight = RandomFloats(dim, seed++, 0.5f, 1.5f);
      std::vector<float> sum(n * dim);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = x[i] + delta[i];
      Stream stream;
      std::vector<float> guarded = x;
      guarded.resize(x.size() + kGuardFloats, kSentinel);
      auto device_x = Upload<float>(guarded);
      auto device_delta = Upload<float>(delta);
      auto device_weight = Upload<float>(weight);
      auto out = Output(n * dim);
      AddRmsNorm(device_x.data(), device_delta.data(), device_weight.data(), n, dim, 1e-5f,
                 out.data(), stream.get());
      const std::vector<float> got = Download(out, stream.get());
      const std::vector<float> got_sum = Download(device_x, stream.get());
      std::vector<float> want(n * dim);
      RmsNormReference(sum.data(), weight.data(), n, dim, 1e-5f, want.data());
      ExpectSameBits(got_sum, sum);
      ExpectGuardIntact(got_sum, sum.size());
      ExpectNormClose(got, want);
      ExpectGuardIntact(got, want.size());
    }
  }
}

// --- RoPE ------------------------------------------------------------------------------------

struct RopeCase {
  int head_dim;
  int n_heads;
  int64_t n;
  int64_t extra;  // floats per row past the rotated heads (other heads of a fused qkv row)
  RopePairing pairing;
};

// Rotates the first n_heads heads of each row on the GPU and on the CPU (ApplyRope with the same
// table): bit-identical, and floats past the heads and past the rows untouched.
void CheckRope(const RopeTable& table, const RopeCase& c, uint32_t seed) {
  const int64_t row_stride = int64_t{c.n_heads} * c.head_dim + c.extra;
  std::vector<float> x = RandomFloats(c.n * row_stride, seed, -2.0f, 2.0f);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> position(0, table.max_positions() - 1);
  std::vector<int32_t> positions(c.n);
  for (int32_t& p : positions) p = position(rng);
  positions.back() = table.max_positions() - 1;
  if (c.n > 1) positions.front() = 0;

  const size_t half = table.head_dim() / 2;
  const size_t table_floats = static_cast<size_t>(table.max_positions()) * half;
  auto cos = Upload<float>(std::span(table.cos(0), table_floats));
  auto sin = Upload<float>(std::span(table.sin(0), table_floats));
  auto device_positions = Upload<int32_t>(positions);
  std::vector<float> guarded = x;
  guarded.resize(x.size() + kGuardFloats, kSentinel);
  auto device_x = Upload<float>(guarded);
  Stream stream;
  const RopeTables tables = {.cos = cos.data(), .sin = sin.data(), .head_dim = table.head_dim()};
  ApplyRope(device_x.data(), c.n, row_stride, c.n_heads, device_positions.data(), tables, c.pairing,
            stream.get());
  const std::vector<float> got = Download(device_x, stream.get());

  std::vector<float> want = x;
  for (int64_t t = 0; t < c.n; ++t) {
    kernels::ApplyRope(want.data() + t * row_stride, c.n_heads, table, positions[t], c.pairing);
  }
  ASSERT_FALSE(AllZero(want));
  ASSERT_NE(want, x) << "no rotation happened";
  ExpectSameBits(got, want);  // the untouched floats of each row included
  ExpectGuardIntact(got, want.size());
}

TEST(CudaRopeTest, MatchesCpuTablePathBitForBit) {
  PDSERVE_REQUIRE_GPU();
  uint32_t seed = 300;
  for (int head_dim : {2, 6, 64, 128}) {
    const RopeTable table(head_dim, 4096, 10000.0f);
    for (int n_heads : {1, 3, 32}) {
      for (int64_t n : {1, 5, 300}) {
        for (int64_t extra : {0, 2 * head_dim + 1}) {
          for (RopePairing pairing : {RopePairing::kAdjacent, RopePairing::kSplitHalf}) {
            SCOPED_TRACE(testing::Message()
                         << "head_dim " << head_dim << " heads " << n_heads << " n " << n
                         << " extra " << extra << " pairing " << static_cast<int>(pairing));
            CheckRope(table, {head_dim, n_heads, n, extra, pairing}, seed++);
          }
        }
      }
    }
  }
}

// The Llama 3.1 scaling lives in the table, so the GPU follows it unchanged.
TEST(CudaRopeTest, Llama3ScaledTable) {
  PDSERVE_REQUIRE_GPU();
  const RopeScaling scaling = {.factor = 8.0f,
                               .low_freq_factor = 1.0f,
                               .high_freq_factor = 4.0f,
                               .original_max_positions = 8192};
  const RopeTable table(128, 16384, 500000.0f, scaling);
  uint32_t seed = 400;
  for (RopePairing pairing : {RopePairing::kAdjacent, RopePairing::kSplitHalf}) {
    CheckRope(table, {128, 8, 64, 2 * 128, pairing}, seed++);
  }
}

// --- SwiGLU ----------------------------------------------------------------------------------

TEST(CudaSwiGluTest, MatchesCpu) {
  PDSERVE_REQUIRE_GPU();
  uint32_t seed = 500;
  for (int64_t n : {1, 3, 64}) {
    for (int64_t hidden : {1, 7, 2048, 5003}) {
      SCOPED_TRACE(testing::Message() << "n " << n << " hidden " << hidden);
      std::vector<float> gate_up = RandomFloats(n * 2 * hidden, seed++, -10.0f, 10.0f);
      // Saturated gates: silu(−100) = −0 (expf overflows to inf), silu(100) = 100.
      const float extremes[] = {-100.0f, -30.0f, 0.0f, 30.0f, 100.0f};
      for (int64_t k = 0; k < static_cast<int64_t>(std::size(extremes)); ++k) {
        gate_up[(k % n) * 2 * hidden + (k * 7919) % hidden] = extremes[k];
      }
      Stream stream;
      auto device_gate_up = Upload<float>(gate_up);
      auto out = Output(n * hidden);
      SwiGlu(device_gate_up.data(), n, hidden, out.data(), stream.get());
      const std::vector<float> got = Download(out, stream.get());
      std::vector<float> want(n * hidden);
      for (int64_t t = 0; t < n; ++t) {
        const float* row = gate_up.data() + t * 2 * hidden;
        kernels::SwiGlu(row, row + hidden, hidden, want.data() + t * hidden);
      }
      ASSERT_FALSE(AllZero(want));
      int bad = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        const double error = std::fabs(double{got[i]} - want[i]);
        if (!(error <= 4e-6 * std::fabs(want[i]) + 1e-30) && ++bad <= 3) {
          ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
        }
      }
      EXPECT_EQ(bad, 0);
      ExpectGuardIntact(got, want.size());
    }
  }
}

// --- Residual add and gather -----------------------------------------------------------------

TEST(CudaResidualTest, AddInPlaceIsExact) {
  PDSERVE_REQUIRE_GPU();
  uint32_t seed = 600;
  for (int64_t count : {1, 7, 4097, 1000003}) {
    SCOPED_TRACE(testing::Message() << "count " << count);
    const std::vector<float> x = RandomFloats(count, seed++, -3.0f, 3.0f);
    const std::vector<float> y = RandomFloats(count, seed++, -3.0f, 3.0f);
    std::vector<float> want(count);
    for (int64_t i = 0; i < count; ++i) want[i] = x[i] + y[i];
    std::vector<float> guarded = x;
    guarded.resize(x.size() + kGuardFloats, kSentinel);
    Stream stream;
    auto device_x = Upload<float>(guarded);
    auto device_y = Upload<float>(y);
    AddInPlace(device_x.data(), device_y.data(), count, stream.get());
    const std::vector<float> got = Download(device_x, stream.get());
    ASSERT_FALSE(AllZero(want));
    ExpectSameBits(got, want);
    ExpectGuardIntact(got, want.size());
  }
}

TEST(CudaResidualTest, GatherRowsCopiesChosenRows) {
  PDSERVE_REQUIRE_GPU();
  uint32_t seed = 700;
  const int64_t src_rows = 50;
  for (int64_t width : {1, 13, 768}) {
    const std::vector<float> src = RandomFloats(src_rows * width, seed++, -1.0f, 1.0f);
    for (int64_t n : {1, 9, 300}) {
      SCOPED_TRACE(testing::Message() << "width " << width << " n " << n);
      std::mt19937 rng(seed++);
      std::uniform_int_distribution<int32_t> row(0, src_rows - 1);
      std::vector<int32_t> rows(n);
      for (int32_t& r : rows) r = row(rng);  // repeats included
      rows.back() = src_rows - 1;
      Stream stream;
      auto device_src = Upload<float>(src);
      auto device_rows = Upload<int32_t>(rows);
      auto out = Output(n * width);
      GatherRows(device_src.data(), device_rows.data(), n, width, out.data(), stream.get());
      const std::vector<float> got = Download(out, stream.get());
      std::vector<float> want(n * width);
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c = 0; c < width; ++c) want[r * width + c] = src[rows[r] * width + c];
      }
      ASSERT_FALSE(AllZero(want));
      ExpectSameBits(got, want);
      ExpectGuardIntact(got, want.size());
    }
  }
}

}  // namespace
}  // namespace pdserve::kernels::cuda
