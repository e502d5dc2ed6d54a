// cuda::KCacheAttention against kernels::KCacheAttention on the CPU (one thread, values fetched
// from the host pages) on the same paged KV cache, built on the host with the real core/kv code
// and copied to the device: top_n small and everything selected, sink and recent windows,
// renormalization on and off, GQA 1, 4, 12 and 16 (query-head tiles), f32 and per-token FP8, ZACK
// widths with packed q/out rows, page sizes 16 and 7, several sequences of different lengths (some
// over several 256-key chunks). The data are regenerated with the next seed until, computed in
// double, every top-N boundary has a relative gap of at least 1e-4, so fp32 rounding cannot change
// the chosen set; the selected counts must then be equal and the outputs within
// |got − want| ≤ 2e-5 + 1e-4·|want| (fp32 both sides, different summation orders). When every
// token is selected the output is also compared with AttentionReference.
#include "kernels/cuda/kcache_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/kv/kv_layout.h"
#include "core/kv/kv_row_codec.h"
#include "core/kv/paged_kv_cache.h"
#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gpu_test.h"
#include "kernels/cuda/kv_section_testing.h"
#include "kernels/kcache_attention.h"

namespace pdserve::kernels::cuda {
namespace {

using Section = TestSection;

constexpr double kAbsTolerance = 2e-5;
constexpr double kRelTolerance = 1e-4;
constexpr double kMinMargin = 1e-4;
constexpr float kUnwritten = 12345.0f;  // output floats no head owns keep this value

struct Config {
  int n_heads = 8;
  int n_kv_heads = 2;
  int head_dim = 64;
  int page_size = 16;
  std::vector<int> k_dims = {};  // per KV head; empty: head_dim each
  std::vector<int> v_dims = {};
  KvElement element = KvElement::kF32;
  TopNOptions options = {.top_n = 8, .sink = 2, .recent = 4};
  std::vector<int> start_pos = {99, 250, 40, 7, 600};
  float q_scale = 3.0f;
  uint32_t seed = 1;
};

std::vector<int> Widths(const std::vector<int>& dims, const Config& c) {
  return dims.empty() ? std::vector<int>(c.n_kv_heads, c.head_dim) : dims;
}

// The host side of a test case: pools, pages and queries.
struct Case {
  Section k;
  Section v;
  std::vector<std::vector<int32_t>> pages = {};
  std::vector<std::vector<float>> q = {};
  std::vector<int> q_offsets = {};
  std::vector<int> out_offsets = {};
  int q_floats = 0;
  int out_floats = 0;
};

Case Build(const Config& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const KvScaleMode scales =
      c.element == KvElement::kF32 ? KvScaleMode::kNone : KvScaleMode::kPerTokenHead;
  const int p = c.page_size;
  Case x{.k = {.layout = KvSectionLayout(p, Widths(c.k_dims, c), c.element, scales)},
         .v = {.layout = KvSectionLayout(p, Widths(c.v_dims, c), c.element, scales)}};
  x.k.stride = PagedKvCache::StrideOf(x.k.layout);
  x.v.stride = PagedKvCache::StrideOf(x.v.layout);
  int total_pages = 2;  // spares stay 0xFF (NaN): reading them poisons the output
  for (int start : c.start_pos) total_pages += (start + 1 + p - 1) / p;
  std::vector<int32_t> order(total_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  x.k.host.assign(total_pages * x.k.stride, 0xFF);
  x.v.host.assign(total_pages * x.v.stride, 0xFF);
  x.q_offsets = PackedOffsets(c.n_heads, c.n_kv_heads, x.k.layout.dims(), &x.q_floats);
  x.out_offsets = PackedOffsets(c.n_heads, c.n_kv_heads, x.v.layout.dims(), &x.out_floats);
  std::vector<float> row(c.head_dim);
  int next_page = 0;
  for (int start : c.start_pos) {
    const int tokens = start + 1, n_pages = (tokens + p - 1) / p;
    x.pages.emplace_back(order.begin() + next_page, order.begin() + next_page + n_pages);
    next_page += n_pages;
    for (int t = 0; t < tokens; ++t) {
      const int32_t page = x.pages.back()[t / p];
      for (int g = 0; g < c.n_kv_heads; ++g) {
        for (float& f : row) f = dist(rng);
        WriteKvRow(x.k.layout, x.k.host.data() + page * x.k.stride, g, t % p, row.data());
        for (float& f : row) f = dist(rng);
        WriteKvRow(x.v.layout, x.v.host.data() + page * x.v.stride, g, t % p, row.data());
      }
    }
    x.q.emplace_back(x.q_floats);
    for (float& f : x.q.back()) f = c.q_scale * dist(rng);
  }
  return x;
}

// The smallest relative gap, over sequences and KV heads, between the take-th and the next
// candidate's summed probability, computed in double from the stored (dequantized) keys; +∞ when
// no boundary falls between candidates.
double MinSelectionMargin(const Config& c, const Case& x) {
  const int group = c.n_heads / c.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  double margin = INFINITY;
  std::vector<float> key(c.head_dim);
  for (size_t s = 0; s < c.start_pos.size(); ++s) {
    const int n = c.start_pos[s] + 1;
    const int sink = std::clamp(c.options.sink, 0, n);
    const int recent_begin = std::max(sink, n - std::max(c.options.recent, 0));
    const int take = std::clamp(c.options.top_n, 0, recent_begin - sink);
    if (take == 0 || take == recent_begin - sink) continue;
    for (int g = 0; g < c.n_kv_heads; ++g) {
      const int dim = x.k.layout.dim(g);
      std::vector<double> total(n, 0.0), score(n);
      for (int j = 0; j < group; ++j) {
        const float* q = x.q[s].data() + x.q_offsets[g * group + j];
        for (int t = 0; t < n; ++t) {
          const int32_t page = x.pages[s][t / c.page_size];
          ReadKvRow(x.k.layout, x.k.host.data() + page * x.k.stride, g, t % c.page_size,
                    key.data());
          score[t] = std::inner_product(q, q + dim, key.begin(), 0.0) * scale;
        }
        const double max_score = *std::max_element(score.begin(), score.end());
        double sum = 0.0;
        for (double& v : score) sum += (v = std::exp(v - max_score));
        for (int t = 0; t < n; ++t) total[t] += score[t] / sum;
      }
      std::vector<double> candidates(total.begin() + sink, total.begin() + recent_begin);
      std::sort(candidates.begin(), candidates.end(), std::greater<>());
      margin = std::min(margin, (candidates[take - 1] - candidates[take]) / candidates[take - 1]);
    }
  }
  return margin;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  double norm = 0.0;
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == kUnwritten) {
      ASSERT_EQ(got[i], kUnwritten) << "wrote float " << i << ", which no head owns";
      continue;
    }
    ASSERT_TRUE(std::isfinite(got[i])) << "out[" << i << "] = " << got[i];
    norm += double{got[i]} * got[i];
    if (std::abs(double{got[i]} - want[i]) > kAbsTolerance + kRelTolerance * std::abs(want[i]) &&
        ++bad <= 5) {
      ADD_FAILURE() << what << ": out[" << i << "] = " << got[i] << ", reference " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what << ": floats out of tolerance";
  EXPECT_GT(norm, 0.0) << "all-zero output";
}

void CheckAgainstCpu(const Config& c) {
  uint32_t seed = c.seed;
  Case x = Build(c, seed);
  while (MinSelectionMargin(c, x) < kMinMargin) x = Build(c, ++seed);
  SCOPED_TRACE(absl::StrCat("data seed ", seed));

  AttentionShape shape{.n_heads = c.n_heads,
                       .n_kv_heads = c.n_kv_heads,
                       .head_dim = c.head_dim,
                       .q_offsets = x.q_offsets.data(),
                       .out_offsets = x.out_offsets.data()};
  const size_t n_seqs = c.start_pos.size();
  const int max_context = *std::max_element(c.start_pos.begin(), c.start_pos.end()) + 1;
  std::vector<AttentionSequence> host_seqs(n_seqs);
  std::vector<std::vector<float>> want(n_seqs, std::vector<float>(x.out_floats, kUnwritten));
  for (size_t s = 0; s < n_seqs; ++s) {
    host_seqs[s] = {.q = x.q[s].data(),
                    .q_row_stride = x.q_floats,
                    .out = want[s].data(),
                    .out_row_stride = x.out_floats,
                    .n_queries = 1,
                    .start_pos = c.start_pos[s],
                    .kv = {.k = x.k.HostView(),
                           .v = x.v.HostView(),
                           .pages = x.pages[s].data(),
                           .page_size = c.page_size}};
  }
  ThreadPool pool(1);
  std::vector<float> cpu_workspace(KCacheWorkspaceFloats(shape, 1, max_context));
  std::vector<int> want_selected(n_seqs * c.n_kv_heads, -1);
  const FetchValuePage fetch = [&](int sequence, int page_index, int) {
    return x.v.host.data() + x.pages[sequence][page_index] * x.v.stride;
  };
  KCacheAttention(pool, shape, host_seqs, c.options, fetch, cpu_workspace, want_selected);

  x.k.Upload();
  x.v.Upload();
  const DeviceBuffer<int> q_offsets = Upload<int>(x.q_offsets);
  const DeviceBuffer<int> out_offsets = Upload<int>(x.out_offsets);
  AttentionShape device_shape = shape;
  device_shape.q_offsets = q_offsets.data();
  device_shape.out_offsets = out_offsets.data();
  std::vector<DeviceBuffer<int32_t>> pages;
  std::vector<DeviceBuffer<float>> q, out;
  SequenceBatch batch;
  batch.n = static_cast<int>(n_seqs);
  for (size_t s = 0; s < n_seqs; ++s) {
    pages.push_back(Upload<int32_t>(x.pages[s]));
    q.push_back(Upload<float>(x.q[s]));
    out.push_back(Upload<float>(std::vector<float>(x.out_floats, kUnwritten)));
    batch.sequences[s] = host_seqs[s];
    batch.sequences[s].q = q[s].data();
    batch.sequences[s].out = out[s].data();
    batch.sequences[s].kv = {.k = x.k.DeviceView(),
                             .v = x.v.DeviceView(),
                             .pages = pages[s].data(),
                             .page_size = c.page_size};
  }
  auto workspace = DeviceBuffer<uint8_t>::Allocate(KCacheWorkspaceBytes(shape, max_context));
  auto selected = DeviceBuffer<int>::Allocate(n_seqs * c.n_kv_heads);
  ASSERT_TRUE(workspace.ok() && selected.ok());
  KCacheAttention(device_shape, batch, c.options, max_context, workspace->data(), selected->data(),
                  nullptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<int> got_selected(want_selected.size());
  ASSERT_TRUE(selected->CopyToHost(std::span<int>(got_selected)).ok());
  EXPECT_EQ(got_selected, want_selected) << "selected counts per (sequence, KV head)";
  for (size_t s = 0; s < n_seqs; ++s) {
    SCOPED_TRACE(absl::StrCat("sequence ", s, " start_pos ", c.start_pos[s]));
    std::vector<float> got(x.out_floats);
    ASSERT_TRUE(out[s].CopyToHost(std::span<float>(got)).ok());
    ExpectClose(got, want[s], "vs CPU KCacheAttention");
    const int n = c.start_pos[s] + 1;
    const bool all = int64_t{std::max(c.options.top_n, 0)} + std::max(c.options.sink, 0) +
                         std::max(c.options.recent, 0) >=
                     n;
    if (all && !c.options.renormalize) {
      std::vector<float> dense(x.out_floats, kUnwritten);
      AttentionSequence seq = host_seqs[s];
      seq.out = dense.data();
      AttentionReference(shape, seq);
      ExpectClose(got, dense, "everything selected, vs AttentionReference");
    }
  }
}

std::string Describe(const Config& c) {
  return absl::StrCat(c.n_heads, "/", c.n_kv_heads, " heads, ", KvElementName(c.element), ", page ",
                      c.page_size, ", top_n ", c.options.top_n, " sink ", c.options.sink,
                      " recent ", c.options.recent, c.options.renormalize ? " renormalized" : "",
                      c.k_dims.empty() ? "" : " zack widths");
}

TEST(CudaKCacheAttentionTest, SmallTopNAcrossGqaDtypesAndPages) {
  PDSERVE_REQUIRE_GPU();
  for (int n_heads : {2, 8}) {
    for (KvElement element : {KvElement::kF32, KvElement::kE4M3}) {
      for (int page_size : {16, 7}) {
        for (bool renormalize : {false, true}) {
          Config c{.n_heads = n_heads, .page_size = page_size, .element = element};
          c.options.renormalize = renormalize;
          c.seed = static_cast<uint32_t>(n_heads * 100 + page_size * 2 + renormalize);
          SCOPED_TRACE(Describe(c));
          CheckAgainstCpu(c);
        }
      }
    }
  }
}

TEST(CudaKCacheAttentionTest, ZackWidthsWithWindowsAndNoWindows) {
  PDSERVE_REQUIRE_GPU();
  for (KvElement element : {KvElement::kF32, KvElement::kE4M3}) {
    for (TopNOptions options :
         {TopNOptions{.top_n = 8}, TopNOptions{.top_n = 20, .sink = 5, .recent = 7},
          TopNOptions{.top_n = 8, .recent = 1, .renormalize = true}}) {
      Config c{.head_dim = 128,
               .page_size = 7,
               .k_dims = {45, 128},
               .v_dims = {33, 97},
               .element = element,
               .options = options};
      SCOPED_TRACE(Describe(c));
      CheckAgainstCpu(c);
    }
  }
}

TEST(CudaKCacheAttentionTest, GroupsWiderThanOneHeadTile) {
  PDSERVE_REQUIRE_GPU();
  for (int n_heads : {24, 32}) {  // groups of 12 and 16 query heads: two tiles of 8
    Config c{.n_heads = n_heads,
             .element = KvElement::kE4M3,
             .options = {.top_n = 16, .sink = 1, .recent = 3},
             .start_pos = {300, 31, 520}};
    SCOPED_TRACE(Describe(c));
    CheckAgainstCpu(c);
  }
}

TEST(CudaKCacheAttentionTest, EverythingSelectedEqualsDenseAttention) {
  PDSERVE_REQUIRE_GPU();
  for (KvElement element : {KvElement::kF32, KvElement::kE4M3}) {
    for (int page_size : {16, 7}) {
      for (bool renormalize : {false, true}) {
        Config c{.page_size = page_size,
                 .k_dims = {64, 50},
                 .v_dims = {61, 64},
                 .element = element,
                 .options = {.top_n = 590, .sink = 4, .recent = 8, .renormalize = renormalize},
                 .start_pos = {99, 250, 0, 600}};
        SCOPED_TRACE(Describe(c));
        CheckAgainstCpu(c);
      }
    }
  }
}

}  // namespace
}  // namespace pdserve::kernels::cuda
