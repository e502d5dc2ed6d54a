// Attention over compressed paged K/V (kernels/kv_view.h): caches written row by row through
// KvSectionLayout + WriteKvRow into byte pools, read by Attention (threaded; decode and the GEMM
// prefill path) and AttentionReference.
//   - f32 at full width is the plain layout: bit-for-bit the same outputs as PlainPagedKv.
//   - Ragged per-KV-head widths (ZACK ranks, K and V independent) with packed q/out rows
//     (q_offsets/out_offsets): fast == reference == naive double on the stored rows, and the
//     softmax scale is 1/√head_dim of the model, not of the stored width.
//   - FP8 e4m3 with per-token and per-page scales: fast == reference == naive on the dequantized
//     rows, and close to f32 attention on the original data.
//   - Heads of width 0 (K, V or both) yield finite results and write nothing for a zero-width
//     output; with K width 0 every score is 0 (uniform attention) on every path.
//   - Unused slots and spare pages hold NaN bytes (0x7F codes for e4m3), so any read outside a
//     sequence's tokens poisons the output; outputs are checked finite and guards intact.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "core/kv/kv_layout.h"
#include "core/kv/kv_row_codec.h"
#include "core/kv/section_pool_testing.h"
#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/kv_view.h"

namespace pdserve::kernels {
namespace {

constexpr float kGuard = 777.0f;
constexpr int kGuardFloats = 8;
constexpr int kSparePages = 4;

struct SequenceSpec {
  int start_pos;
  int n_queries;
};

// Several sequences in one K and one V pool, pages handed out shuffled. Keeps the original rows
// and, once everything is written, the rows as stored (dequantized by ReadKvRow: per-page FP8
// re-encodes earlier rows, so they are read back last).
class CompressedKv {
 public:
  CompressedKv(int n_heads, int head_dim, int page_size, const KvSectionLayout& k,
               const KvSectionLayout& v, const std::vector<SequenceSpec>& specs, uint32_t seed,
               float q_scale = 1.0f)
      : n_heads_(n_heads),
        n_kv_heads_(k.n_heads()),
        head_dim_(head_dim),
        page_size_(page_size),
        specs_(specs),
        k_(k, TotalPages(specs, page_size)),
        v_(v, TotalPages(specs, page_size)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int group = n_heads / n_kv_heads_;
    for (int h = 0; h < n_heads; ++h) {
      q_offsets_.push_back(q_stride_);
      out_offsets_.push_back(out_stride_);
      q_stride_ += k.dim(h / group);
      out_stride_ += v.dim(h / group);
    }
    std::vector<int32_t> order(TotalPages(specs, page_size));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    size_t next = 0;
    for (const SequenceSpec& spec : specs) {
      const int tokens = spec.start_pos + spec.n_queries;
      max_context_ = std::max(max_context_, tokens);
      const int n_pages = (tokens + page_size - 1) / page_size;
      pages_.emplace_back(order.begin() + next, order.begin() + next + n_pages);
      next += n_pages;
      std::vector<std::vector<float>> k_rows, v_rows;
      for (int t = 0; t < tokens; ++t) {
        for (int g = 0; g < n_kv_heads_; ++g) {
          std::vector<float> kr(k.dim(g)), vr(v.dim(g));
          for (float& x : kr) x = normal(rng);
          for (float& x : vr) x = normal(rng);
          const int32_t page = pages_.back()[t / page_size];
          WriteKvRow(k_.layout, k_.page(page), g, t % page_size, kr.data());
          WriteKvRow(v_.layout, v_.page(page), g, t % page_size, vr.data());
          k_rows.push_back(std::move(kr));
          v_rows.push_back(std::move(vr));
        }
      }
      k_orig_.push_back(std::move(k_rows));
      v_orig_.push_back(std::move(v_rows));
      std::vector<float> q(static_cast<size_t>(spec.n_queries) * q_stride_);
      for (float& x : q) x = q_scale * normal(rng);
      q_.push_back(std::move(q));
    }
    for (size_t s = 0; s < specs.size(); ++s) {
      k_stored_.push_back(Stored(k_, s));
      v_stored_.push_back(Stored(v_, s));
    }
  }

  // Packed rows: head h's query slice at Σ_{h'<h} k.dim, its output slice at Σ_{h'<h} v.dim.
  AttentionShape Shape() const {
    AttentionShape shape{n_heads_, n_kv_heads_, head_dim_};
    shape.q_offsets = q_offsets_.data();
    shape.out_offsets = out_offsets_.data();
    return shape;
  }
  int max_context() const { return max_context_; }
  int page_size() const { return page_size_; }
  size_t num_sequences() const { return specs_.size(); }
  const SequenceSpec& spec(size_t s) const { return specs_[s]; }
  int64_t out_stride() const { return out_stride_; }
  int64_t out_offset(int h) const { return out_offsets_[h]; }
  int k_dim(int g) const { return k_.layout.dim(g); }
  int v_dim(int g) const { return v_.layout.dim(g); }
  int n_heads() const { return n_heads_; }
  int group() const { return n_heads_ / n_kv_heads_; }
  const std::vector<int32_t>& pages(size_t s) const { return pages_[s]; }
  const SectionPool& k_pool() const { return k_; }
  const SectionPool& v_pool() const { return v_; }
  const std::vector<float>& q(size_t s) const { return q_[s]; }
  const std::vector<float>& k_orig(size_t s, int t, int g) const {
    return k_orig_[s][static_cast<size_t>(t) * n_kv_heads_ + g];
  }
  const std::vector<float>& v_orig(size_t s, int t, int g) const {
    return v_orig_[s][static_cast<size_t>(t) * n_kv_heads_ + g];
  }
  const std::vector<float>& v_stored(size_t s, int t, int g) const {
    return Row(v_stored_, s, t, g);
  }

  PagedKvView View(size_t s) const {
    PagedKvView view;
    view.k = k_.View();
    view.v = v_.View();
    view.pages = pages_[s].data();
    view.page_size = page_size_;
    return view;
  }

  // Fresh outputs (guard values everywhere, so untouched floats are recognizable) and the
  // sequences pointing at them.
  std::vector<AttentionSequence> Sequences(std::vector<std::vector<float>>& outs) const {
    outs.clear();
    for (const SequenceSpec& spec : specs_) {
      outs.emplace_back(static_cast<size_t>(spec.n_queries) * out_stride_ + kGuardFloats, kGuard);
    }
    std::vector<AttentionSequence> seqs;
    for (size_t s = 0; s < specs_.size(); ++s) {
      AttentionSequence seq;
      seq.q = q_[s].data();
      seq.q_row_stride = q_stride_;
      seq.out = outs[s].data();
      seq.out_row_stride = out_stride_;
      seq.n_queries = specs_[s].n_queries;
      seq.start_pos = specs_[s].start_pos;
      seq.kv = View(s);
      seqs.push_back(seq);
    }
    return seqs;
  }

  // Causal softmax attention in double, packed like the outputs. `stored`: over the rows as the
  // cache holds them (else the original floats). Scores are divided by √scale_dim(g).
  template <typename ScaleDim>
  std::vector<double> Naive(size_t s, bool stored, ScaleDim scale_dim) const {
    const SequenceSpec& spec = specs_[s];
    std::vector<double> out(static_cast<size_t>(spec.n_queries) * out_stride_, 0.0);
    for (int i = 0; i < spec.n_queries; ++i) {
      const int tokens = spec.start_pos + i + 1;
      for (int h = 0; h < n_heads_; ++h) {
        const int g = h / group();
        const float* q = q_[s].data() + i * q_stride_ + q_offsets_[h];
        std::vector<double> p(tokens);
        double max_score = -INFINITY;
        for (int t = 0; t < tokens; ++t) {
          const std::vector<float>& k = stored ? Row(k_stored_, s, t, g) : k_orig(s, t, g);
          double dot = 0.0;
          for (int c = 0; c < k_dim(g); ++c) dot += double{q[c]} * k[c];
          p[t] = dot / std::sqrt(static_cast<double>(scale_dim(g)));
          max_score = std::max(max_score, p[t]);
        }
        double sum = 0.0;
        for (double& x : p) sum += (x = std::exp(x - max_score));
        double* o = out.data() + i * out_stride_ + out_offsets_[h];
        for (int t = 0; t < tokens; ++t) {
          const std::vector<float>& v = stored ? Row(v_stored_, s, t, g) : v_orig(s, t, g);
          for (int c = 0; c < v_dim(g); ++c) o[c] += p[t] / sum * v[c];
        }
      }
    }
    return out;
  }
  std::vector<double> Naive(size_t s, bool stored = true) const {
    return Naive(s, stored, [this](int) { return head_dim_; });
  }

 private:
  static int TotalPages(const std::vector<SequenceSpec>& specs, int page_size) {
    int pages = kSparePages;
    for (const SequenceSpec& s : specs) {
      pages += (s.start_pos + s.n_queries + page_size - 1) / page_size;
    }
    return pages;
  }

  std::vector<std::vector<float>> Stored(const SectionPool& pool, size_t s) const {
    std::vector<std::vector<float>> rows;
    const int tokens = specs_[s].start_pos + specs_[s].n_queries;
    for (int t = 0; t < tokens; ++t) {
      for (int g = 0; g < n_kv_heads_; ++g) {
        std::vector<float> row(pool.layout.dim(g));
        ReadKvRow(pool.layout, pool.page(pages_[s][t / page_size_]), g, t % page_size_, row.data());
        for (float x : row) EXPECT_TRUE(std::isfinite(x)) << "stored row of token " << t;
        rows.push_back(std::move(row));
      }
    }
    return rows;
  }
  const std::vector<float>& Row(const std::vector<std::vector<std::vector<float>>>& rows, size_t s,
                                int t, int g) const {
    return rows[s][static_cast<size_t>(t) * n_kv_heads_ + g];
  }

  int n_heads_, n_kv_heads_, head_dim_, page_size_;
  std::vector<SequenceSpec> specs_;
  SectionPool k_, v_;
  std::vector<int> q_offsets_, out_offsets_;
  int64_t q_stride_ = 0, out_stride_ = 0;
  int max_context_ = 1;
  std::vector<std::vector<int32_t>> pages_;
  std::vector<std::vector<std::vector<float>>> k_orig_, v_orig_, k_stored_, v_stored_;
  std::vector<std::vector<float>> q_;
};

// ‖got − want‖ / ‖want‖ over head h's output slices of every query of sequence s.
double HeadRelativeError(const CompressedKv& f, size_t s, int h, const float* got,
                         const std::vector<double>& want) {
  double diff = 0.0, ref = 0.0;
  const int dv = f.v_dim(h / f.group());
  for (int i = 0; i < f.spec(s).n_queries; ++i) {
    for (int c = 0; c < dv; ++c) {
      const size_t at = static_cast<size_t>(i * f.out_stride() + f.out_offset(h) + c);
      const double d = got[at] - want[at];
      diff += d * d;
      ref += want[at] * want[at];
    }
  }
  return ref == 0.0 ? std::sqrt(diff) : std::sqrt(diff / ref);
}

std::vector<double> AsDouble(const std::vector<float>& v, size_t n) {
  return std::vector<double>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
}

// Every float of the packed output written and finite, the guard after it intact.
void ExpectFiniteAndGuarded(const CompressedKv& f, size_t s, const std::vector<float>& out,
                            const char* what) {
  const size_t n = static_cast<size_t>(f.spec(s).n_queries * f.out_stride());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(out[i]) && out[i] != kGuard)
        << what << " out[" << i << "] = " << out[i];
  }
  for (int i = 0; i < kGuardFloats; ++i) {
    ASSERT_EQ(out[n + i], kGuard) << what << " wrote past its output";
  }
}

struct Outputs {
  std::vector<std::vector<float>> fast, ref;
};

// Attention over all sequences in one call on `threads` threads, AttentionReference per sequence.
Outputs RunBoth(const CompressedKv& f, int threads) {
  ThreadPool pool(threads);
  Outputs o;
  const AttentionShape shape = f.Shape();
  std::vector<AttentionSequence> fast = f.Sequences(o.fast);
  std::vector<AttentionSequence> ref = f.Sequences(o.ref);
  std::vector<float> workspace(AttentionWorkspaceFloats(shape, pool.size(), fast));
  Attention(pool, shape, fast, workspace);
  for (const AttentionSequence& seq : ref) AttentionReference(shape, seq);
  return o;
}

// fast vs reference vs naive double on the stored rows, per sequence and head.
void CheckFastReferenceNaive(const CompressedKv& f, const Outputs& o, double tolerance) {
  for (size_t s = 0; s < f.num_sequences(); ++s) {
    SCOPED_TRACE(absl::StrCat("sequence ", s, " start_pos ", f.spec(s).start_pos, " n_queries ",
                              f.spec(s).n_queries));
    ExpectFiniteAndGuarded(f, s, o.fast[s], "fast");
    ExpectFiniteAndGuarded(f, s, o.ref[s], "reference");
    const std::vector<double> naive = f.Naive(s);
    const std::vector<double> ref = AsDouble(o.ref[s], naive.size());
    for (int h = 0; h < f.n_heads(); ++h) {
      EXPECT_LT(HeadRelativeError(f, s, h, o.fast[s].data(), ref), tolerance)
          << "fast vs reference, head " << h;
      EXPECT_LT(HeadRelativeError(f, s, h, o.fast[s].data(), naive), tolerance)
          << "fast vs naive, head " << h;
      EXPECT_LT(HeadRelativeError(f, s, h, o.ref[s].data(), naive), tolerance)
          << "reference vs naive, head " << h;
    }
  }
}

const std::vector<SequenceSpec> kMixedSpecs = {
    {0, 1},    // decode, first token
    {37, 1},   // decode deep into the context
    {5, 19},   // prefill (GEMM path) continuing a cached prefix
    {3, 70},   // prefill over two query blocks, the second partial
    {16, 4},   // chunked prefill below the GEMM threshold, on a page boundary
    {100, 1},  // decode
    {0, 16},   // prefill from scratch, exactly the GEMM threshold
};

// ---------------------------------------------------------------------------------------------
// (a) f32 at full width through the layout == the plain layout, bit for bit.

struct PlainCase {
  int page_size, group, head_dim, threads;
};

class FullWidthF32Test : public testing::TestWithParam<PlainCase> {};

TEST_P(FullWidthF32Test, BitIdenticalToPlainPagedKv) {
  const PlainCase& c = GetParam();
  const int n_kv = 2, d = c.head_dim;
  const std::vector<int> dims(n_kv, d);
  const KvSectionLayout layout = Layout(c.page_size, dims, KvElement::kF32, KvScaleMode::kNone);
  CompressedKv f(n_kv * c.group, d, c.page_size, layout, layout, kMixedSpecs,
                 static_cast<uint32_t>(c.page_size * 100 + c.group * 10 + d));
  // The same floats in the plain layout [pages, n_kv_heads, page_size, head_dim], same page ids.
  const int64_t plain_stride = int64_t{n_kv} * c.page_size * d;
  const size_t num_pages = f.k_pool().bytes.size() / f.k_pool().stride;
  std::vector<float> plain_k(num_pages * plain_stride, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> plain_v = plain_k;
  for (size_t s = 0; s < f.num_sequences(); ++s) {
    for (int t = 0; t < f.spec(s).start_pos + f.spec(s).n_queries; ++t) {
      for (int g = 0; g < n_kv; ++g) {
        const int64_t at = f.pages(s)[t / c.page_size] * plain_stride +
                           (int64_t{g} * c.page_size + t % c.page_size) * d;
        std::copy_n(f.k_orig(s, t, g).data(), d, plain_k.data() + at);
        std::copy_n(f.v_orig(s, t, g).data(), d, plain_v.data() + at);
      }
    }
  }
  ThreadPool pool(c.threads);
  // Full width: the packed offsets are h·head_dim, the defaults; pass them explicitly on the
  // compressed side and leave them null on the plain side.
  const AttentionShape shape = f.Shape();
  const AttentionShape plain_shape{shape.n_heads, shape.n_kv_heads, d};
  for (int h = 0; h < shape.n_heads; ++h) ASSERT_EQ(shape.q_offset(h), plain_shape.q_offset(h));
  std::vector<std::vector<float>> outs, plain_outs;
  std::vector<AttentionSequence> seqs = f.Sequences(outs);
  std::vector<AttentionSequence> plain_seqs = f.Sequences(plain_outs);
  for (size_t s = 0; s < plain_seqs.size(); ++s) {
    plain_seqs[s].q_row_stride = plain_seqs[s].out_row_stride = 0;
    plain_seqs[s].kv = PlainPagedKv(plain_k.data(), plain_v.data(), f.pages(s).data(), c.page_size,
                                    plain_stride, d);
  }
  std::vector<float> workspace(AttentionWorkspaceFloats(shape, pool.size(), seqs));
  Attention(pool, shape, seqs, workspace);
  Attention(pool, plain_shape, plain_seqs, workspace);
  for (size_t s = 0; s < seqs.size(); ++s) {
    SCOPED_TRACE(absl::StrCat("sequence ", s));
    ExpectFiniteAndGuarded(f, s, outs[s], "compressed");
    ASSERT_EQ(std::memcmp(outs[s].data(), plain_outs[s].data(), outs[s].size() * sizeof(float)), 0)
        << "Attention through the layout differs from the plain path";
    // The reference too.
    std::vector<float> ref(outs[s].size(), kGuard), plain_ref(outs[s].size(), kGuard);
    AttentionSequence a = seqs[s], b = plain_seqs[s];
    a.out = ref.data();
    b.out = plain_ref.data();
    AttentionReference(shape, a);
    AttentionReference(plain_shape, b);
    ASSERT_EQ(std::memcmp(ref.data(), plain_ref.data(), ref.size() * sizeof(float)), 0)
        << "AttentionReference through the layout differs from the plain path";
    EXPECT_LT(HeadRelativeError(f, s, 0, outs[s].data(), f.Naive(s)), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Paged, FullWidthF32Test,
                         testing::Values(PlainCase{16, 4, 64, 2}, PlainCase{3, 1, 8, 1},
                                         PlainCase{1, 2, 48, 2}, PlainCase{5, 2, 16, 1}),
                         [](const testing::TestParamInfo<PlainCase>& info) {
                           return absl::StrCat("page", info.param.page_size, "_gqa",
                                               info.param.group, "_d", info.param.head_dim,
                                               "_threads", info.param.threads);
                         });

// ---------------------------------------------------------------------------------------------
// (b) Ragged f32 widths per KV head.

struct RaggedCase {
  int page_size, threads;
};

class RaggedF32Test : public testing::TestWithParam<RaggedCase> {};

TEST_P(RaggedF32Test, MatchesReferenceAndNaiveWithModelSoftmaxScale) {
  const RaggedCase& c = GetParam();
  const int head_dim = 8;
  const std::vector<int> k_dims = {8, 3, 5, 1}, v_dims = {2, 8, 5, 7};
  // q scaled up so the softmax is far from uniform and its scale matters.
  CompressedKv f(8, head_dim, c.page_size,
                 Layout(c.page_size, k_dims, KvElement::kF32, KvScaleMode::kNone),
                 Layout(c.page_size, v_dims, KvElement::kF32, KvScaleMode::kNone), kMixedSpecs,
                 static_cast<uint32_t>(31 * c.page_size + c.threads), /*q_scale=*/2.0f);
  const Outputs o = RunBoth(f, c.threads);
  CheckFastReferenceNaive(f, o, 1e-5);
  // The oracle discriminates: with 1/√width the heads narrower than head_dim come out different.
  for (size_t s = 0; s < f.num_sequences(); ++s) {
    if (f.spec(s).start_pos + f.spec(s).n_queries < 8) continue;  // too few keys to matter
    const std::vector<double> wrong = f.Naive(s, true, [&](int g) { return k_dims[g]; });
    for (int h = 0; h < f.n_heads(); ++h) {
      if (k_dims[h / f.group()] == head_dim) continue;
      EXPECT_GT(HeadRelativeError(f, s, h, o.fast[s].data(), wrong), 1e-3)
          << "sequence " << s << " head " << h << " looks scaled by its stored width";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, RaggedF32Test,
                         testing::Values(RaggedCase{1, 1}, RaggedCase{3, 1}, RaggedCase{3, 2},
                                         RaggedCase{16, 1}, RaggedCase{16, 2}),
                         [](const testing::TestParamInfo<RaggedCase>& info) {
                           return absl::StrCat("page", info.param.page_size, "_threads",
                                               info.param.threads);
                         });

// Wider ragged heads exercise the 8-wide vector paths of the score and value loops (widths that
// are and are not multiples of 8, beyond 64), GQA 4.
TEST(RaggedF32WideTest, MatchesReferenceAndNaive) {
  const std::vector<int> k_dims = {128, 24, 57}, v_dims = {72, 128, 8};
  CompressedKv f(12, 128, 16, Layout(16, k_dims, KvElement::kF32, KvScaleMode::kNone),
                 Layout(16, v_dims, KvElement::kF32, KvScaleMode::kNone),
                 {{0, 1}, {50, 1}, {20, 40}, {0, 66}}, 77, /*q_scale=*/0.3f);
  CheckFastReferenceNaive(f, RunBoth(f, 2), 1e-5);
}

// ---------------------------------------------------------------------------------------------
// (c) FP8 e4m3, per-token and per-page scales.

struct Fp8Case {
  KvScaleMode mode;
  bool ragged;
  int threads;
};

class Fp8AttentionTest : public testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8AttentionTest, MatchesReferenceAndStaysCloseToF32) {
  const Fp8Case& c = GetParam();
  const int head_dim = 64, page_size = 16;
  const std::vector<int> k_dims =
      c.ragged ? std::vector<int>{64, 40, 17, 64} : std::vector<int>{64, 64, 64, 64};
  const std::vector<int> v_dims =
      c.ragged ? std::vector<int>{33, 64, 48, 8} : std::vector<int>{64, 64, 64, 64};
  CompressedKv f(8, head_dim, page_size, Layout(page_size, k_dims, KvElement::kE4M3, c.mode),
                 Layout(page_size, v_dims, KvElement::kE4M3, c.mode),
                 {{0, 1}, {37, 1}, {100, 1}, {5, 19}, {3, 70}, {40, 5}},
                 static_cast<uint32_t>(static_cast<int>(c.mode) * 10 + c.ragged));
  const Outputs o = RunBoth(f, c.threads);
  CheckFastReferenceNaive(f, o, 1e-5);
  // Against attention on the original (unquantized) floats.
  for (size_t s = 0; s < f.num_sequences(); ++s) {
    const std::vector<double> exact = f.Naive(s, /*stored=*/false);
    double dot = 0.0, a2 = 0.0, b2 = 0.0;
    for (size_t i = 0; i < exact.size(); ++i) {
      dot += o.fast[s][i] * exact[i];
      a2 += double{o.fast[s][i]} * o.fast[s][i];
      b2 += exact[i] * exact[i];
    }
    const double cosine = dot / std::sqrt(a2 * b2);
    EXPECT_GT(cosine, 0.999) << "sequence " << s;
    EXPECT_LT(cosine, 1.0 - 1e-9) << "sequence " << s << ": the FP8 cache looks unquantized";
  }
}

INSTANTIATE_TEST_SUITE_P(Scales, Fp8AttentionTest,
                         testing::Values(Fp8Case{KvScaleMode::kPerTokenHead, false, 1},
                                         Fp8Case{KvScaleMode::kPerTokenHead, true, 2},
                                         Fp8Case{KvScaleMode::kPerPageHead, false, 2},
                                         Fp8Case{KvScaleMode::kPerPageHead, true, 1}),
                         [](const testing::TestParamInfo<Fp8Case>& info) {
                           return absl::StrCat(
                               KvScaleModeName(info.param.mode) == std::string("per-token")
                                   ? "PerToken"
                                   : "PerPage",
                               info.param.ragged ? "_ragged" : "_full", "_threads",
                               info.param.threads);
                         });

// FP8 K with f32 V and the other way round: the two sections are independent.
TEST(Fp8AttentionMixedTest, FP8KeysF32ValuesAndBack) {
  const int page_size = 4;
  for (bool fp8_keys : {true, false}) {
    SCOPED_TRACE(fp8_keys ? "e4m3 K, f32 V" : "f32 K, e4m3 V");
    const KvSectionLayout fp8 =
        Layout(page_size, {16, 5}, KvElement::kE4M3, KvScaleMode::kPerPageHead);
    const KvSectionLayout f32 = Layout(page_size, {16, 5}, KvElement::kF32, KvScaleMode::kNone);
    CompressedKv f(4, 16, page_size, fp8_keys ? fp8 : f32, fp8_keys ? f32 : fp8,
                   {{0, 1}, {9, 1}, {2, 17}}, fp8_keys ? 5 : 6);
    CheckFastReferenceNaive(f, RunBoth(f, 2), 1e-5);
  }
}

// Decode at contexts up to 8k in one batch with short neighbours (GQA 4, ragged FP8 ranks per
// page scales): the fused row kernels against the reference, on both threads.
TEST(Fp8AttentionLongTest, MixedLengthsUpTo8k) {
  const int page_size = 16;
  CompressedKv f(8, 64, page_size,
                 Layout(page_size, {64, 33}, KvElement::kE4M3, KvScaleMode::kPerPageHead),
                 Layout(page_size, {32, 64}, KvElement::kE4M3, KvScaleMode::kPerPageHead),
                 {{8191, 1}, {0, 1}, {2999, 1}, {16, 1}, {4000, 3}}, 8);
  CheckFastReferenceNaive(f, RunBoth(f, 2), 1e-5);
}

// ---------------------------------------------------------------------------------------------
// (d) Heads of width 0.

TEST(ZeroWidthHeadTest, FiniteAndConsistentOnEveryPath) {
  for (KvElement element : {KvElement::kF32, KvElement::kE4M3}) {
    SCOPED_TRACE(KvElementName(element));
    const KvScaleMode mode =
        element == KvElement::kF32 ? KvScaleMode::kNone : KvScaleMode::kPerTokenHead;
    // KV head 0 normal; 1 dropped entirely; 2 K only; 3 V only (every score 0: uniform weights).
    const std::vector<int> k_dims = {8, 0, 5, 0}, v_dims = {8, 0, 0, 3};
    CompressedKv f(8, 8, 4, Layout(4, k_dims, element, mode), Layout(4, v_dims, element, mode),
                   kMixedSpecs, 21);
    const Outputs o = RunBoth(f, 2);
    // Packed outputs: dropped heads own no floats, and every float owned is written and finite.
    EXPECT_EQ(f.out_stride(), 2 * (8 + 0 + 0 + 3));
    CheckFastReferenceNaive(f, o, 1e-5);
    // KV head 3 (query heads 6, 7): K width 0 ⇒ the plain mean of the values seen.
    for (size_t s = 0; s < f.num_sequences(); ++s) {
      for (int i = 0; i < f.spec(s).n_queries; ++i) {
        const int tokens = f.spec(s).start_pos + i + 1;
        for (int c = 0; c < 3; ++c) {
          double mean = 0.0;
          for (int t = 0; t < tokens; ++t) mean += f.v_stored(s, t, 3)[c];
          mean /= tokens;
          for (int h : {6, 7}) {
            const size_t at = static_cast<size_t>(i * f.out_stride() + f.out_offset(h) + c);
            EXPECT_NEAR(o.fast[s][at], mean, 1e-5) << "sequence " << s << " query " << i;
            EXPECT_NEAR(o.ref[s][at], mean, 1e-5) << "sequence " << s << " query " << i;
          }
        }
      }
    }
  }
}

// With default (h·head_dim) output offsets, a head whose V width is 0 leaves its slice alone and
// the others write exactly their v.dim(g) floats.
TEST(ZeroWidthHeadTest, WritesOnlyTheStoredWidthWithDefaultOffsets) {
  const std::vector<int> k_dims = {8, 0, 8}, v_dims = {8, 0, 3};
  CompressedKv f(3, 8, 4, Layout(4, k_dims, KvElement::kF32, KvScaleMode::kNone),
                 Layout(4, v_dims, KvElement::kF32, KvScaleMode::kNone), {{6, 1}, {2, 20}}, 8);
  ThreadPool pool(2);
  AttentionShape shape{3, 3, 8};  // default offsets: h · 8 in q and out
  std::vector<std::vector<float>> q(f.num_sequences()), fast(f.num_sequences()),
      ref(f.num_sequences());
  std::vector<AttentionSequence> seqs, ref_seqs;
  for (size_t s = 0; s < f.num_sequences(); ++s) {
    const int n = f.spec(s).n_queries;
    q[s].assign(static_cast<size_t>(n) * 24, std::numeric_limits<float>::quiet_NaN());
    // Copy the packed queries into the padded rows; the padding stays NaN and must not be read.
    const AttentionShape packed = f.Shape();
    for (int i = 0; i < n; ++i) {
      for (int h = 0; h < 3; ++h) {
        std::copy_n(f.q(s).data() + i * (8 + 0 + 8) + packed.q_offset(h), k_dims[h],
                    q[s].data() + i * 24 + h * 8);
      }
    }
    fast[s].assign(static_cast<size_t>(n) * 24, kGuard);
    ref[s].assign(static_cast<size_t>(n) * 24, kGuard);
    AttentionSequence seq;
    seq.q = q[s].data();
    seq.out = fast[s].data();
    seq.n_queries = n;
    seq.start_pos = f.spec(s).start_pos;
    seq.kv = f.View(s);
    seqs.push_back(seq);
    seq.out = ref[s].data();
    ref_seqs.push_back(seq);
  }
  std::vector<float> workspace(AttentionWorkspaceFloats(shape, pool.size(), seqs));
  Attention(pool, shape, seqs, workspace);
  for (const AttentionSequence& seq : ref_seqs) AttentionReference(shape, seq);
  for (size_t s = 0; s < f.num_sequences(); ++s) {
    const std::vector<double> naive = f.Naive(s);  // packed: head 0 at 0, head 2 at 8
    for (int i = 0; i < f.spec(s).n_queries; ++i) {
      for (int h = 0; h < 3; ++h) {
        for (int c = 0; c < 8; ++c) {
          const size_t at = static_cast<size_t>(i * 24 + h * 8 + c);
          SCOPED_TRACE(absl::StrCat("sequence ", s, " query ", i, " head ", h, " c ", c));
          if (c >= v_dims[h]) {
            EXPECT_EQ(fast[s][at], kGuard);
            EXPECT_EQ(ref[s][at], kGuard);
            continue;
          }
          const double want = naive[i * f.out_stride() + f.out_offset(h) + c];
          EXPECT_NEAR(fast[s][at], want, 1e-5);
          EXPECT_NEAR(ref[s][at], want, 1e-5);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// (e) Poisoned unused slots.

// The poison is real: an unused slot of a partly filled page reads back NaN, in both formats, so
// the finite outputs of the tests above prove it was never read.
TEST(PoisonTest, UnusedSlotsReadBackNaN) {
  for (KvScaleMode mode :
       {KvScaleMode::kNone, KvScaleMode::kPerTokenHead, KvScaleMode::kPerPageHead}) {
    const KvElement element = mode == KvScaleMode::kNone ? KvElement::kF32 : KvElement::kE4M3;
    CompressedKv f(2, 8, 4, Layout(4, {8, 3}, element, mode), Layout(4, {8, 3}, element, mode),
                   {{5, 1}}, 3);  // 6 tokens: the second page holds slots 0, 1 only
    for (int g = 0; g < 2; ++g) {
      std::vector<float> row(f.k_dim(g));
      ReadKvRow(f.k_pool().layout, f.k_pool().page(f.pages(0)[1]), g, 2, row.data());
      for (float x : row) EXPECT_TRUE(std::isnan(x)) << KvScaleModeName(mode) << " head " << g;
    }
  }
}

// Sequences ending mid-page, surrounded by spare NaN pages, in every format and on both paths.
TEST(PoisonTest, PartialPagesAndSparePagesNeverRead) {
  for (KvScaleMode mode :
       {KvScaleMode::kNone, KvScaleMode::kPerTokenHead, KvScaleMode::kPerPageHead}) {
    SCOPED_TRACE(KvScaleModeName(mode));
    const KvElement element = mode == KvScaleMode::kNone ? KvElement::kF32 : KvElement::kE4M3;
    CompressedKv f(4, 16, 5, Layout(5, {16, 7}, element, mode), Layout(5, {9, 16}, element, mode),
                   {{0, 1}, {6, 1}, {1, 22}, {12, 2}, {4, 17}}, 13);
    CheckFastReferenceNaive(f, RunBoth(f, 2), 1e-5);
  }
}

}  // namespace
}  // namespace pdserve::kernels
