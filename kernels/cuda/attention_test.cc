// cuda::Attention against kernels::AttentionReference on the same paged KV cache, built on the
// host with the real core/kv code (KvSectionLayout, WriteKvRow, SectionView) and copied to the
// device: GQA ratios, head dims, page sizes that split key tiles, f32 and FP8 (per-token and
// per-page scales), ZACK widths (K and V different per KV head, a head dropped), packed q/out
// offsets, prefill chunks with start_pos > 0, mixed prefill/decode batches, long contexts and
// pages in shuffled order. Unused cache bytes are 0xFF (NaN in f32 and e4m3), so any read outside
// a sequence's tokens poisons the output. Tolerance (fp32 both sides, different summation
// orders): |got − want| ≤ 2e-5 + 1e-4·|want|.
#include "kernels/cuda/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kv/kv_layout.h"
#include "core/kv/kv_row_codec.h"
#include "core/kv/paged_kv_cache.h"
#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gpu_test.h"
#include "kernels/cuda/kv_section_testing.h"

namespace pdserve::kernels::cuda {
namespace {

using Section = TestSection;

constexpr double kAbsTolerance = 2e-5;
constexpr double kRelTolerance = 1e-4;
constexpr float kUnwritten = 12345.0f;  // output floats no head owns keep this value
constexpr float kGuard = 777.0f;
constexpr int kGuardFloats = 8;

struct Spec {
  int start_pos;
  int n_queries;
};

struct Config {
  int n_heads = 8;
  int n_kv_heads = 2;
  int head_dim = 64;
  int page_size = 16;
  std::vector<int> k_dims = {};  // per KV head; empty: head_dim each
  std::vector<int> v_dims = {};
  KvElement element = KvElement::kF32;
  KvScaleMode scales = KvScaleMode::kNone;
  bool packed_offsets = false;  // q/out rows hold each head's own width only (ZACK)
  int pool_offset = 0;          // device pools start this many bytes past an aligned address
  float q_scale = 1.0f;         // larger: peakier softmax, every key matters
  uint32_t seed = 1;
  std::vector<Spec> seqs = {};
};

std::vector<int> Widths(const std::vector<int>& dims, const Config& c) {
  return dims.empty() ? std::vector<int>(c.n_kv_heads, c.head_dim) : dims;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, size_t n) {
  double norm = 0.0;
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (want[i] == kUnwritten) {
      ASSERT_EQ(got[i], kUnwritten) << "wrote float " << i << ", which no head owns";
      continue;
    }
    ASSERT_TRUE(std::isfinite(got[i])) << "out[" << i << "] = " << got[i];
    norm += double{got[i]} * got[i];
    const double error = std::abs(double{got[i]} - want[i]);
    if (error > kAbsTolerance + kRelTolerance * std::abs(want[i]) && ++bad <= 5) {
      ADD_FAILURE() << "out[" << i << "] = " << got[i] << ", reference " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << "floats out of tolerance";
  for (int g = 0; g < kGuardFloats; ++g) ASSERT_EQ(got[n + g], kGuard) << "wrote past the output";
  EXPECT_GT(norm, 0.0) << "all-zero output";
}

void CheckAgainstReference(const Config& c) {
  std::mt19937 rng(c.seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int p = c.page_size;
  Section k{.layout = KvSectionLayout(p, Widths(c.k_dims, c), c.element, c.scales)};
  Section v{.layout = KvSectionLayout(p, Widths(c.v_dims, c), c.element, c.scales)};
  k.stride = PagedKvCache::StrideOf(k.layout);
  v.stride = PagedKvCache::StrideOf(v.layout);

  int total_pages = 3;  // spares stay 0xFF
  for (const Spec& s : c.seqs) total_pages += (s.start_pos + s.n_queries + p - 1) / p;
  std::vector<int32_t> order(total_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  k.host.assign(total_pages * k.stride, 0xFF);
  v.host.assign(total_pages * v.stride, 0xFF);

  int q_floats = c.n_heads * c.head_dim, out_floats = q_floats;
  std::vector<int> q_offsets, out_offsets;
  if (c.packed_offsets) {
    q_offsets = PackedOffsets(c.n_heads, c.n_kv_heads, k.layout.dims(), &q_floats);
    out_offsets = PackedOffsets(c.n_heads, c.n_kv_heads, v.layout.dims(), &out_floats);
  }
  AttentionShape shape{.n_heads = c.n_heads, .n_kv_heads = c.n_kv_heads, .head_dim = c.head_dim};
  if (c.packed_offsets) {
    shape.q_offsets = q_offsets.data();
    shape.out_offsets = out_offsets.data();
  }

  const size_t n_seqs = c.seqs.size();
  std::vector<std::vector<int32_t>> pages(n_seqs);
  std::vector<std::vector<float>> q(n_seqs), want(n_seqs);
  std::vector<float> k_row(c.head_dim), v_row(c.head_dim);
  BatchBounds bounds;
  int next_page = 0;
  for (size_t s = 0; s < n_seqs; ++s) {
    const Spec& spec = c.seqs[s];
    const int tokens = spec.start_pos + spec.n_queries;
    bounds.max_queries = std::max(bounds.max_queries, spec.n_queries);
    bounds.max_context = std::max(bounds.max_context, tokens);
    const int n_pages = (tokens + p - 1) / p;
    pages[s].assign(order.begin() + next_page, order.begin() + next_page + n_pages);
    next_page += n_pages;
    for (int t = 0; t < tokens; ++t) {
      for (int g = 0; g < c.n_kv_heads; ++g) {
        for (float& x : k_row) x = dist(rng);
        for (float& x : v_row) x = dist(rng);
        WriteKvRow(k.layout, k.host.data() + pages[s][t / p] * k.stride, g, t % p, k_row.data());
        WriteKvRow(v.layout, v.host.data() + pages[s][t / p] * v.stride, g, t % p, v_row.data());
      }
    }
    q[s].resize(static_cast<size_t>(spec.n_queries) * q_floats);
    for (float& x : q[s]) x = c.q_scale * dist(rng);
    want[s].assign(static_cast<size_t>(spec.n_queries) * out_floats + kGuardFloats, kUnwritten);
    std::fill(want[s].end() - kGuardFloats, want[s].end(), kGuard);
    AttentionSequence seq{
        .q = q[s].data(),
        .q_row_stride = q_floats,
        .out = want[s].data(),
        .out_row_stride = out_floats,
        .n_queries = spec.n_queries,
        .start_pos = spec.start_pos,
        .kv = {.k = k.HostView(), .v = v.HostView(), .pages = pages[s].data(), .page_size = p}};
    AttentionReference(shape, seq);
  }

  k.Upload(c.pool_offset);
  v.Upload(c.pool_offset);
  AttentionShape device_shape = shape;
  DeviceBuffer<int> q_offsets_device, out_offsets_device;
  if (c.packed_offsets) {
    q_offsets_device = Upload<int>(q_offsets);
    out_offsets_device = Upload<int>(out_offsets);
    device_shape.q_offsets = q_offsets_device.data();
    device_shape.out_offsets = out_offsets_device.data();
  }
  std::vector<DeviceBuffer<int32_t>> pages_device;
  std::vector<DeviceBuffer<float>> q_device, out_device;
  SequenceBatch batch;
  batch.n = static_cast<int>(n_seqs);
  for (size_t s = 0; s < n_seqs; ++s) {
    pages_device.push_back(Upload<int32_t>(pages[s]));
    q_device.push_back(Upload<float>(q[s]));
    std::vector<float> out(want[s].size(), kUnwritten);
    std::fill(out.end() - kGuardFloats, out.end(), kGuard);
    out_device.push_back(Upload<float>(out));
    batch.sequences[s] = {.q = q_device[s].data(),
                          .q_row_stride = q_floats,
                          .out = out_device[s].data(),
                          .out_row_stride = out_floats,
                          .n_queries = c.seqs[s].n_queries,
                          .start_pos = c.seqs[s].start_pos,
                          .kv = {.k = k.DeviceView(c.pool_offset),
                                 .v = v.DeviceView(c.pool_offset),
                                 .pages = pages_device[s].data(),
                                 .page_size = p}};
  }
  auto workspace = DeviceBuffer<uint8_t>::Allocate(AttentionWorkspaceBytes(shape, bounds));
  ASSERT_TRUE(workspace.ok()) << workspace.status();
  Attention(device_shape, batch, bounds, workspace->data(), nullptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  for (size_t s = 0; s < n_seqs; ++s) {
    SCOPED_TRACE(absl::StrCat("sequence ", s, " start_pos ", c.seqs[s].start_pos, " n_queries ",
                              c.seqs[s].n_queries));
    std::vector<float> got(want[s].size());
    ASSERT_TRUE(out_device[s].CopyToHost(std::span<float>(got)).ok());
    ExpectClose(got, want[s], want[s].size() - kGuardFloats);
  }
}

// A prefill from 0, a prefill chunk after 37 cached tokens, and two decodes.
const std::vector<Spec> kSmallMix = {{0, 45}, {37, 70}, {99, 1}, {16, 1}};

TEST(CudaAttentionTest, GqaRatiosHeadDimsAndPageSizes) {
  PDSERVE_REQUIRE_GPU();
  for (int group : {1, 2, 4, 8}) {
    for (int head_dim : {64, 128}) {
      for (int page_size : {16, 7}) {
        SCOPED_TRACE(absl::StrCat("group ", group, " head_dim ", head_dim, " page ", page_size));
        CheckAgainstReference({.n_heads = 2 * group,
                               .n_kv_heads = 2,
                               .head_dim = head_dim,
                               .page_size = page_size,
                               .seed = static_cast<uint32_t>(group * 1000 + head_dim + page_size),
                               .seqs = kSmallMix});
      }
    }
  }
}

TEST(CudaAttentionTest, Fp8PerTokenAndPerPageScales) {
  PDSERVE_REQUIRE_GPU();
  for (KvScaleMode scales : {KvScaleMode::kPerTokenHead, KvScaleMode::kPerPageHead}) {
    for (int page_size : {16, 7}) {
      SCOPED_TRACE(absl::StrCat(KvScaleModeName(scales), " page ", page_size));
      CheckAgainstReference({.n_heads = 8,
                             .n_kv_heads = 2,
                             .head_dim = 128,
                             .page_size = page_size,
                             .element = KvElement::kE4M3,
                             .scales = scales,
                             .seed = 7u + static_cast<uint32_t>(page_size),
                             .seqs = kSmallMix});
    }
  }
}

TEST(CudaAttentionTest, ZackRaggedWidthsAndDroppedHeads) {
  PDSERVE_REQUIRE_GPU();
  for (KvElement element : {KvElement::kF32, KvElement::kE4M3}) {
    for (bool packed : {true, false}) {
      SCOPED_TRACE(absl::StrCat(KvElementName(element), packed ? " packed" : " strided"));
      CheckAgainstReference(
          {.n_heads = 8,
           .n_kv_heads = 4,
           .head_dim = 64,
           .page_size = 7,
           .k_dims = {64, 37, 12, 0},
           .v_dims = {5, 64, 0, 37},
           .element = element,
           .scales = element == KvElement::kF32 ? KvScaleMode::kNone : KvScaleMode::kPerTokenHead,
           .packed_offsets = packed,
           .seed = 11,
           .seqs = kSmallMix});
    }
  }
}

TEST(CudaAttentionTest, PoolsNotSixteenByteAlignedTakeTheScalarPath) {
  PDSERVE_REQUIRE_GPU();
  // Pages must start 4-byte aligned (f32 rows and FP8 scales are floats).
  for (int offset : {4, 8}) {
    for (KvElement element : {KvElement::kF32, KvElement::kE4M3}) {
      SCOPED_TRACE(absl::StrCat("offset ", offset, " ", KvElementName(element)));
      CheckAgainstReference(
          {.n_heads = 4,
           .n_kv_heads = 2,
           .head_dim = 64,
           .page_size = 16,
           .element = element,
           .scales = element == KvElement::kF32 ? KvScaleMode::kNone : KvScaleMode::kPerPageHead,
           .pool_offset = offset,
           .seed = 13,
           .seqs = kSmallMix});
    }
  }
}

TEST(CudaAttentionTest, HeadDim256) {
  PDSERVE_REQUIRE_GPU();
  CheckAgainstReference(
      {.n_heads = 4, .n_kv_heads = 1, .head_dim = 256, .seed = 17, .seqs = kSmallMix});
}

TEST(CudaAttentionTest, MixedBatchOfManySequences) {
  PDSERVE_REQUIRE_GPU();
  std::vector<Spec> seqs;
  for (int i = 0; i < 12; ++i) {
    seqs.push_back(i % 3 == 0 ? Spec{i * 13, 1 + i * 11} : Spec{i * 97 + 3, 1});
  }
  CheckAgainstReference({.n_heads = 16,
                         .n_kv_heads = 4,
                         .head_dim = 64,
                         .page_size = 16,
                         .element = KvElement::kE4M3,
                         .scales = KvScaleMode::kPerTokenHead,
                         .seed = 19,
                         .seqs = seqs});
}

TEST(CudaAttentionTest, LongPrefillAndLongDecode) {
  PDSERVE_REQUIRE_GPU();
  CheckAgainstReference({.n_heads = 4,
                         .n_kv_heads = 2,
                         .head_dim = 64,
                         .page_size = 16,
                         .q_scale = 4.0f,
                         .seed = 23,
                         .seqs = {{0, 4096}, {16383, 1}, {4095, 1}}});
}

TEST(CudaAttentionTest, LongDecodeWithZackWidthsSplitsPerHead) {
  PDSERVE_REQUIRE_GPU();
  CheckAgainstReference({.n_heads = 16,
                         .n_kv_heads = 4,
                         .head_dim = 128,
                         .page_size = 16,
                         .k_dims = {128, 96, 32, 8},
                         .v_dims = {128, 64, 32, 4},
                         .element = KvElement::kE4M3,
                         .scales = KvScaleMode::kPerTokenHead,
                         .q_scale = 4.0f,
                         .seed = 29,
                         .seqs = {{16383, 1}, {9000, 1}, {40, 1}}});
}

}  // namespace
}  // namespace pdserve::kernels::cuda
