// CPU kernel benchmarks: Matmul as GEMM (prefill, n = 512) and GEMV (decode, n = 1 and 4) on the
// projection shapes of stories15M/42M/110M-class models in f32/f16/bf16, paged attention (decode
// at context 512/1024, prefill 512; 12 heads of 64), RmsNorm and RoPE. Thread counts are an
// argument and use pdserve's ThreadPool. Counters: "FLOPS" (floating-point operations per second,
// wall time) and bytes_per_second (weights or KV streamed).
//
// The default minimum time per benchmark is 0.2 s (about 40 s for the whole suite); pass
// --benchmark_min_time=N to change it and --benchmark_filter=REGEX to select.
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/base/thread_pool.h"
#include "core/tensor/tensor.h"
#include "kernels/attention.h"
#include "kernels/attention_importance.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/panel_matrix.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"

namespace pdserve::kernels {
namespace {

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Seeded random weights, built once per (rows, cols, dtype) and shared by the benchmarks.
const Tensor& Weights(int64_t rows, int64_t cols, DType dtype) {
  static auto* cache = new std::map<std::tuple<int64_t, int64_t, DType>, Tensor>();
  auto key = std::make_tuple(rows, cols, dtype);
  auto it = cache->find(key);
  if (it == cache->end()) {
    Tensor f32 =
        MakeF32Tensor(RandomVector(rows * cols, static_cast<uint32_t>(rows + cols)), {rows, cols});
    it = cache->emplace(key, ConvertTensor(f32, dtype)).first;
  }
  return it->second;
}

// Times multiply(pool, x, n, y) on seeded x: args rows, cols, n (activation rows), dtype, threads;
// bytes processed are `w`'s; the label names w's dtype, the SIMD level and label_suffix.
template <typename Multiply>
void TimeMatmul(benchmark::State& state, const Tensor& w, Multiply multiply,
                const char* label_suffix = "") {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  ThreadPool pool(static_cast<int>(state.range(4)));
  std::vector<float> x = RandomVector(n * cols, 1);
  std::vector<float> y(n * rows);
  for (auto _ : state) {
    multiply(pool, x.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * n * rows * cols, benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.NumBytes()));
  state.SetLabel(std::string(DTypeName(w.dtype)) + " " + SimdLevelName(ActiveSimdLevel()) +
                 label_suffix);
}

// Matmul on the weights as stored.
void BM_Matmul(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(3));
  const Tensor& w = Weights(state.range(0), state.range(1), dtype);
  std::vector<float> workspace(MatmulWorkspaceFloats(static_cast<int>(state.range(4)), w.cols()));
  TimeMatmul(state, w, [&](ThreadPool& pool, const float* x, int64_t n, float* y) {
    Matmul(pool, x, n, w, y, workspace);
  });
}

// Matmul on the weights packed once (outside the timing) into a PanelMatrix, as the engine
// multiplies by them.
void BM_PanelMatmul(benchmark::State& state) {
  const auto dtype = static_cast<DType>(state.range(3));
  const Tensor& source = Weights(state.range(0), state.range(1), dtype);
  const PanelMatrix w(source);
  std::vector<float> workspace(MatmulWorkspaceFloats(static_cast<int>(state.range(4)), w.cols()));
  TimeMatmul(
      state, source,
      [&](ThreadPool& pool, const float* x, int64_t n, float* y) {
        Matmul(pool, x, n, w, y, w.rows(), workspace);
      },
      w.bf16_dot() ? " bf16-dot" : "");
}

// Projection shapes [rows, cols]: attention (768x768), FFN up/gate (2048x768), FFN down
// (768x2048) and the classifier (32000x768).
const std::vector<std::pair<int64_t, int64_t>> kProjections = {
    {768, 768}, {2048, 768}, {768, 2048}, {32000, 768}};

void GemmBenchArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "cols", "n", "dtype", "threads"});
  for (auto [rows, cols] : kProjections) {
    for (int threads : {1, 2}) {
      b->Args({rows, cols, 512, static_cast<int64_t>(DType::kF32), threads});
    }
  }
  // 16-bit weights widen block by block before SGEMM.
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    b->Args({2048, 768, 512, static_cast<int64_t>(dtype), 2});
  }
}

void GemvBenchArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "cols", "n", "dtype", "threads"});
  for (auto [rows, cols] : kProjections) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int threads : {1, 2}) b->Args({rows, cols, 1, static_cast<int64_t>(dtype), threads});
    }
  }
  // Quantized weights (integer dot products against int8 activations), one activation row.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{2048, 768}, {768, 2048}, {32000, 768}}) {
    for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
      for (int threads : {1, 2}) b->Args({rows, cols, 1, static_cast<int64_t>(dtype), threads});
    }
  }
  for (DType dtype : {DType::kQ4_K, DType::kQ6_K}) {  // from memory: 70-110 MiB
    for (int threads : {1, 2}) b->Args({32000, 4096, 1, static_cast<int64_t>(dtype), threads});
  }
  // A full GEMV batch: each weight row streamed once for 4 activation rows.
  for (DType dtype : {DType::kF32, DType::kF16}) {
    b->Args({2048, 768, 4, static_cast<int64_t>(dtype), 2});
  }
  // Decode batches of many sequences: blocks of weight rows serve every batch of 4 in turn.
  b->Args({2048, 768, 16, static_cast<int64_t>(DType::kF16), 1});
  b->Args({32000, 768, 16, static_cast<int64_t>(DType::kF16), 1});
  for (int64_t n : {16, 32, 63}) {
    b->Args({2048, 768, n, static_cast<int64_t>(DType::kF16), 2});
    b->Args({32000, 768, n, static_cast<int64_t>(DType::kF16), 2});
  }
}

BENCHMARK(BM_Matmul)
    ->Name("BM_Gemm")
    ->Apply(GemmBenchArgs)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Matmul)
    ->Name("BM_Gemv")
    ->Apply(GemvBenchArgs)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Packed once: one decode row, a 16-sequence decode step and a prefill, each weight dtype.
void PanelBenchArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "cols", "n", "dtype", "threads"});
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{2048, 768}, {768, 2048}}) {
    for (int64_t n : {1, 16, 512}) {
      for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        b->Args({rows, cols, n, static_cast<int64_t>(dtype), 2});
      }
    }
  }
  // Quantized panels (the level's int8 tile; K-quants with AVX512-VNNI only), one decode row and a
  // prefill: against BM_Gemv's and BM_Gemm's rows of the same shapes on the weights as stored.
  std::vector<DType> quantized;
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) {
    if (PanelMatrix::Takes(dtype)) quantized.push_back(dtype);
  }
  for (DType dtype : quantized) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{2048, 768}, {32000, 768}}) {
      for (int threads : {1, 2}) b->Args({rows, cols, 1, static_cast<int64_t>(dtype), threads});
    }
    b->Args({2048, 768, 512, static_cast<int64_t>(dtype), 2});
  }
  for (DType dtype : quantized) {  // from memory
    for (int threads : {1, 2}) b->Args({32000, 4096, 1, static_cast<int64_t>(dtype), threads});
  }
  // One decode row streaming a matrix from memory (250 MiB of f32, past any last-level cache).
  for (DType dtype : {DType::kF32, DType::kF16}) {
    for (int threads : {1, 2}) b->Args({32000, 2048, 1, static_cast<int64_t>(dtype), threads});
  }
}
BENCHMARK(BM_PanelMatmul)
    ->Name("BM_PanelMatmul")
    ->Apply(PanelBenchArgs)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Paged attention, 12 heads (no GQA) of 64, page size 16, pages in order.
constexpr int kHeads = 12;
constexpr int kHeadDim = 64;
constexpr int kPageSize = 16;

struct AttentionSetup {
  AttentionSetup(int n_sequences, int context, int n_queries) {
    const int pages_per_seq = (context + kPageSize - 1) / kPageSize;
    page_stride = int64_t{kHeads} * kPageSize * kHeadDim;
    k = RandomVector(n_sequences * pages_per_seq * page_stride, 2);
    v = RandomVector(static_cast<int64_t>(k.size()), 3);
    pages.resize(static_cast<size_t>(n_sequences) * pages_per_seq);
    for (size_t p = 0; p < pages.size(); ++p) pages[p] = static_cast<int32_t>(p);
    const int64_t row = int64_t{n_queries} * kHeads * kHeadDim;
    q = RandomVector(n_sequences * row, 4);
    out.resize(q.size());
    for (int s = 0; s < n_sequences; ++s) {
      AttentionSequence seq;
      seq.q = q.data() + s * row;
      seq.out = out.data() + s * row;
      seq.n_queries = n_queries;
      seq.start_pos = context - n_queries;
      seq.kv = PlainPagedKv(k.data(), v.data(), pages.data() + s * pages_per_seq, kPageSize,
                            page_stride, kHeadDim);
      sequences.push_back(seq);
    }
  }

  int64_t page_stride;
  std::vector<float> k, v, q, out;
  std::vector<int32_t> pages;
  std::vector<AttentionSequence> sequences;
};

// Args: context, n_queries (1 = decode, context = prefill), sequences, threads.
void BM_Attention(benchmark::State& state) {
  const int context = static_cast<int>(state.range(0));
  const int n_queries = static_cast<int>(state.range(1));
  const int n_sequences = static_cast<int>(state.range(2));
  ThreadPool pool(static_cast<int>(state.range(3)));
  AttentionSetup setup(n_sequences, context, n_queries);
  const AttentionShape shape{kHeads, kHeads, kHeadDim};
  std::vector<float> workspace(AttentionWorkspaceFloats(shape, pool.size(), setup.sequences));
  for (auto _ : state) {
    Attention(pool, shape, setup.sequences, workspace);
    benchmark::DoNotOptimize(setup.out.data());
    benchmark::ClobberMemory();
  }
  // Per query head and attended token: q·k and p·v, 2·head_dim FLOPs each.
  double attended = 0.0;
  for (int i = 0; i < n_queries; ++i) attended += context - n_queries + i + 1;
  state.counters["FLOPS"] = benchmark::Counter(4.0 * kHeadDim * kHeads * attended * n_sequences,
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(state.iterations() * n_sequences * 2 * int64_t{context} * kHeads *
                          kHeadDim * static_cast<int64_t>(sizeof(float)));
}

// Token retention's scoring of one layer (kernels/attention_importance.h): the prompt's last
// `window` queries against its `context` keys, 12 heads of 64. Args: context, window, threads.
void BM_AttentionImportance(benchmark::State& state) {
  const int context = static_cast<int>(state.range(0));
  const int window = static_cast<int>(state.range(1));
  ThreadPool pool(static_cast<int>(state.range(2)));
  AttentionSetup setup(1, context, window);
  const AttentionShape shape{kHeads, kHeads, kHeadDim};
  std::vector<float> workspace(
      AttentionImportanceWorkspaceFloats(shape, pool.size(), context, kPageSize));
  std::vector<float> importance(int64_t{kHeads} * context);
  for (auto _ : state) {
    AttentionImportance(pool, shape, setup.sequences[0], importance, context, workspace);
    benchmark::DoNotOptimize(importance.data());
    benchmark::ClobberMemory();
  }
}

BENCHMARK(BM_AttentionImportance)
    ->ArgNames({"context", "window", "threads"})
    ->ArgsProduct({{1000}, {32}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_Attention)
    ->Name("BM_AttentionDecode")
    ->ArgNames({"context", "queries", "seqs", "threads"})
    ->ArgsProduct({{512, 1024}, {1}, {1, 8}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Attention)
    ->Name("BM_AttentionPrefill")
    ->ArgNames({"context", "queries", "seqs", "threads"})
    ->ArgsProduct({{512}, {512}, {1}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Decode over a compressed cache: `dim` stored elements per head (64 = full, 32 = ZACK half),
// f32, FP8 E4M3 codes with per-token or per-page scales, or f16 (format 0, 1, 2, 3), pages in
// order. Like the engine's pool the cache lives on transparent huge pages, and it is copied until
// it outgrows any last-level cache (2 GiB in all): iteration i reads copy i mod copies, so every
// read comes from memory, as a decode step's do after its weights streamed past. `resident`: one
// copy, read again every iteration (from the caches, as far as they hold it) — the kernels'
// compute without the wait on memory, for telling the two apart.
struct CompressedDecodeSetup {
  CompressedDecodeSetup(int n_sequences, int context, int dim, int format, bool resident,
                        int group) {
    const int pages_per_seq = (context + kPageSize - 1) / kPageSize;
    const bool fp8 = format == 1 || format == 2, f16 = format == 3;
    const int element_bytes = fp8 ? 1 : f16 ? 2 : 4;
    const int scales = format == 1 ? kPageSize : format == 2 ? 1 : 0;
    for (int g = 0; g < kHeads; ++g) {
      offsets.push_back(int64_t{kHeads} * scales * 4 +
                        int64_t{g} * kPageSize * dim * element_bytes);
    }
    const int64_t page_bytes = offsets.back() + int64_t{kPageSize} * dim * element_bytes;
    const int64_t pages_per_copy = int64_t{n_sequences} * pages_per_seq;
    bytes = 2 * pages_per_copy * page_bytes;
    const int copies =
        resident ? 1 : static_cast<int>(std::max<int64_t>(1, (int64_t{2} << 30) / bytes));
    const size_t pool_bytes = static_cast<size_t>(copies * pages_per_copy * page_bytes);
    uint32_t x = 5;  // xorshift32: fast enough to fill gigabytes
    auto next = [&x] { return x ^= x << 13, x ^= x >> 17, x ^= x << 5; };
    for (auto* pool : {&k, &v}) {
      *pool = HugePageBuffer(pool_bytes);
      for (int64_t p = 0; p < copies * pages_per_copy; ++p) {
        uint8_t* page = pool->get() + p * page_bytes;
        for (int i = 0; i < kHeads * scales; ++i) reinterpret_cast<float*>(page)[i] = 0.01f;
        uint8_t* rows = page + offsets[0];
        const int64_t n = page_bytes - offsets[0];
        if (fp8) {
          // Codes of magnitude below 0x77 (no NaNs); every sign and exponent.
          for (int64_t i = 0; i < n; ++i) rows[i] = next() % 0xEF & 0xF7;
        } else if (f16) {
          // Halves of magnitude below 2 (exponent ≤ 15), either sign.
          auto* h = reinterpret_cast<uint16_t*>(rows);
          for (int64_t i = 0; i < n / 2; ++i) h[i] = next() & 0xBFFF;
        } else {
          auto* f = reinterpret_cast<float*>(rows);
          for (int64_t i = 0; i < n / 4; ++i) f[i] = static_cast<float>(next() % 2001) / 1000 - 1;
        }
      }
    }
    pages.resize(static_cast<size_t>(copies * pages_per_copy));
    for (size_t p = 0; p < pages.size(); ++p) pages[p] = static_cast<int32_t>(p);
    const int64_t q_row = int64_t{kHeads} * group * kHeadDim;  // a sequence's query heads
    q = RandomVector(n_sequences * q_row, 4);
    out.resize(q.size());
    sequences.resize(copies);
    for (int c = 0; c < copies; ++c) {
      for (int s = 0; s < n_sequences; ++s) {
        AttentionSequence seq;
        seq.q = q.data() + s * q_row;
        seq.out = out.data() + s * q_row;
        seq.n_queries = 1;
        seq.start_pos = context - 1;
        for (KvSectionView* view : {&seq.kv.k, &seq.kv.v}) {
          view->pool = (view == &seq.kv.k ? k : v).get();
          view->page_stride = page_bytes;
          view->uniform_dim = dim;
          view->head_offsets = offsets.data();
          view->e4m3 = fp8;
          view->f16 = f16;
          view->scales_per_head = scales;
        }
        seq.kv.pages = pages.data() + c * pages_per_copy + int64_t{s} * pages_per_seq;
        seq.kv.page_size = kPageSize;
        sequences[c].push_back(seq);
      }
    }
  }

  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<uint8_t, Free>;
  static Buffer HugePageBuffer(size_t bytes) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
    Buffer buffer(static_cast<uint8_t*>(std::aligned_alloc(kHuge, rounded)));
    ::madvise(buffer.get(), rounded, MADV_HUGEPAGE);
    return buffer;
  }

  std::vector<int64_t> offsets;
  Buffer k, v;
  std::vector<float> q, out;
  std::vector<int32_t> pages;
  std::vector<std::vector<AttentionSequence>> sequences;  // per copy
  int64_t bytes = 0;                                      // K and V of one copy
};

// Args: context, sequences, stored dim, format (0 f32, 1 FP8 per token, 2 FP8 per page, 3 f16),
// threads, resident (CompressedDecodeSetup), group (query heads per KV head: 4 as in Llama 3 and
// Mistral). bytes_per_second counts the K and V bytes read (codes and scales).
void BM_CompressedDecode(benchmark::State& state) {
  const int context = static_cast<int>(state.range(0));
  const int n_sequences = static_cast<int>(state.range(1));
  const int dim = static_cast<int>(state.range(2));
  const int format = static_cast<int>(state.range(3));
  ThreadPool pool(static_cast<int>(state.range(4)));
  const bool resident = state.range(5) != 0;
  const int group = static_cast<int>(state.range(6));
  CompressedDecodeSetup setup(n_sequences, context, dim, format, resident, group);
  const AttentionShape shape{kHeads * group, kHeads, kHeadDim};
  std::vector<float> workspace(AttentionWorkspaceFloats(shape, pool.size(), setup.sequences[0]));
  size_t copy = 0;
  for (auto _ : state) {
    Attention(pool, shape, setup.sequences[copy], workspace);
    copy = (copy + 1) % setup.sequences.size();
    benchmark::DoNotOptimize(setup.out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * setup.bytes);
  const char* const kLabels[] = {"f32", "fp8 per-token", "fp8 per-page", "f16"};
  state.SetLabel(std::string(kLabels[format]) + (resident ? ", resident" : ""));
}

BENCHMARK(BM_CompressedDecode)
    ->ArgNames({"context", "seqs", "dim", "format", "threads", "resident", "group"})
    ->ArgsProduct({{2048}, {16}, {64, 37, 32}, {0, 3, 1, 2}, {2}, {0}, {1}})
    // One copy: as far as L3 holds it.
    ->ArgsProduct({{2048}, {16}, {64, 32}, {0, 2}, {2}, {1}, {1}})
    // Issue 18's single long sequence (two threads), and its kernels' compute on one thread with
    // one, four and eight query heads a KV head.
    ->ArgsProduct({{8192}, {1}, {64, 32}, {0, 2}, {2}, {0, 1}, {1}})
    ->ArgsProduct({{8192}, {1}, {64, 32}, {2}, {1}, {1}, {1, 4, 8}})
    // Grouped queries from memory.
    ->ArgsProduct({{2048}, {16}, {64, 32}, {2}, {2}, {0}, {4}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Args: n rows of dim 768.
void BM_RmsNorm(benchmark::State& state) {
  const int64_t n = state.range(0), dim = 768;
  std::vector<float> x = RandomVector(n * dim, 5), weight = RandomVector(dim, 6);
  std::vector<float> out(x.size());
  for (auto _ : state) {
    RmsNorm(x.data(), weight.data(), n, dim, 1e-5f, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] =
      benchmark::Counter(4.0 * n * dim, benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(state.iterations() * n * dim * 2 * static_cast<int64_t>(sizeof(float)));
}

BENCHMARK(BM_RmsNorm)->ArgName("n")->Arg(1)->Arg(512)->UseRealTime();

// Args: tokens (consecutive positions), pairing. 12 heads of 64 per token, as for q.
void BM_Rope(benchmark::State& state) {
  const int tokens = static_cast<int>(state.range(0));
  const auto pairing = static_cast<RopePairing>(state.range(1));
  RopeTable table(kHeadDim, 2048, 10000.0f);
  std::vector<float> x = RandomVector(int64_t{tokens} * kHeads * kHeadDim, 7);
  for (auto _ : state) {
    for (int t = 0; t < tokens; ++t) {
      ApplyRope(x.data() + int64_t{t} * kHeads * kHeadDim, kHeads, table, t, pairing);
    }
    benchmark::DoNotOptimize(x.data());
    benchmark::ClobberMemory();
  }
  // Per pair: four multiplies and two adds.
  state.counters["FLOPS"] = benchmark::Counter(6.0 * tokens * kHeads * kHeadDim / 2,
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetBytesProcessed(state.iterations() * tokens * kHeads * kHeadDim * 2 *
                          static_cast<int64_t>(sizeof(float)));
  state.SetLabel(pairing == RopePairing::kAdjacent ? "adjacent" : "split-half");
}

BENCHMARK(BM_Rope)
    ->ArgNames({"tokens", "pairing"})
    ->ArgsProduct({{1, 512},
                   {static_cast<int64_t>(RopePairing::kAdjacent),
                    static_cast<int64_t>(RopePairing::kSplitHalf)}})
    ->UseRealTime();

}  // namespace
}  // namespace pdserve::kernels

// The machine's read bandwidth: threads sum disjoint halves of a 2 GiB buffer with AVX2 loads —
// larger than any last-level cache here (the Xeon VMs report 480 MiB of L3), so it reads memory.
// The ceiling for decode, which streams every weight once per token.
void BM_MemoryRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  static std::vector<float>* buffer = new std::vector<float>(size_t{512} << 20, 1.0f);
  pdserve::ThreadPool pool(threads);
  std::vector<float> sums(threads);
  for (auto _ : state) {
    pool.ParallelFor(
        static_cast<int64_t>(buffer->size()), 1 << 16, [&](int64_t begin, int64_t end, int thread) {
          __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
          const float* p = buffer->data();
          for (int64_t i = begin; i < end; i += 32) {
            a = _mm256_add_ps(a, _mm256_loadu_ps(p + i));
            b = _mm256_add_ps(b, _mm256_loadu_ps(p + i + 8));
            c = _mm256_add_ps(c, _mm256_loadu_ps(p + i + 16));
            d = _mm256_add_ps(d, _mm256_loadu_ps(p + i + 24));
          }
          float lanes[8];
          _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
          sums[thread] = lanes[0];
        });
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(buffer->size() * sizeof(float)));
}
BENCHMARK(BM_MemoryRead)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// The machine's fp32 FMA peak, the ceiling for prefill: per thread, kFmaChains independent chains
// of register-only FMAs (enough to keep both FMA ports busy through their latency) in the vectors
// of the active level (PDSERVE_SIMD forces AVX2).
constexpr int kFmaChains = 12;
constexpr int64_t kFmaSteps = 1 << 16;

// The chains' sum's first lane, so that no chain is optimized away. One function per vector width,
// each compiled for its instruction set.
__attribute__((target("avx2,fma"))) float FmaChains256() {
  __m256 acc[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (int64_t i = 0; i < kFmaSteps; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  for (int j = 1; j < kFmaChains; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  return _mm256_cvtss_f32(acc[0]);
}

__attribute__((target("avx512f"))) float FmaChains512() {
  __m512 acc[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int64_t i = 0; i < kFmaSteps; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kFmaChains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  for (int j = 1; j < kFmaChains; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return _mm512_cvtss_f32(acc[0]);
}

void BM_FmaPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const bool avx512 = pdserve::kernels::ActiveSimdLevel() == pdserve::kernels::SimdLevel::kAvx512;
  pdserve::ThreadPool pool(threads);
  std::vector<float> sums(threads);
  for (auto _ : state) {
    pool.ParallelFor(threads, 1, [&](int64_t, int64_t, int thread) {
      sums[thread] = avx512 ? FmaChains512() : FmaChains256();
    });
    benchmark::DoNotOptimize(sums.data());
  }
  const double lanes = avx512 ? 16 : 8;
  state.counters["FLOPS"] = benchmark::Counter(2.0 * lanes * kFmaChains * kFmaSteps * threads,
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(pdserve::kernels::SimdLevelName(pdserve::kernels::ActiveSimdLevel()));
}
BENCHMARK(BM_FmaPeak)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// Like BENCHMARK_MAIN(), with a default --benchmark_min_time of 0.2 s unless one is given.
int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  bool has_min_time = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--benchmark_min_time", 20) == 0) has_min_time = true;
  }
  static char default_min_time[] = "--benchmark_min_time=0.2";
  if (!has_min_time) args.insert(args.begin() + 1, default_min_time);
  int count = static_cast<int>(args.size());
  args.push_back(nullptr);  // argv[argc] is null by convention
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::AddCustomContext("simd",
                              pdserve::kernels::SimdLevelName(pdserve::kernels::ActiveSimdLevel()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
