// Attention over a paged KV cache: the threaded fast path against AttentionReference and against a
// dense causal softmax attention computed in double, for several page sizes (pages handed out in
// shuffled order), GQA ratios, head dims, decode and prefill (start_pos > 0), several sequences
// per call and pools of 1 and 2 threads. Unused cache slots hold NaN, so any read outside a
// sequence's tokens poisons the result.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/thread_pool.h"
#include "gtest/gtest.h"

namespace pdserve::kernels {
namespace {

constexpr double kTolerance = 1e-5;
constexpr float kGuard = 777.0f;
constexpr int kGuardFloats = 8;

struct SequenceSpec {
  int start_pos;
  int n_queries;
};

double RelativeError(const float* got, const std::vector<double>& want) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    double d = got[i] - want[i];
    diff += d * d;
    ref += want[i] * want[i];
  }
  return std::sqrt(diff) / std::sqrt(ref);
}

double Norm(const float* v, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += double{v[i]} * v[i];
  return std::sqrt(sum);
}

// A shared paged K/V pool holding several sequences, each with its own shuffled pages, queries,
// outputs and a dense copy of its keys and values for the naive check.
class PagedFixture {
 public:
  PagedFixture(const AttentionShape& shape, int page_size, const std::vector<SequenceSpec>& specs,
               uint32_t seed, float q_scale = 1.0f)
      : shape_(shape), page_size_(page_size), specs_(specs), rng_(seed) {
    page_stride_ = int64_t{shape.n_kv_heads} * page_size * shape.head_dim;
    int total_pages = 0;
    for (const SequenceSpec& s : specs) total_pages += PagesFor(s);
    const int num_pages = total_pages + 5;  // spare pages stay NaN
    std::vector<int32_t> order(num_pages);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    k_.assign(static_cast<size_t>(num_pages * page_stride_),
              std::numeric_limits<float>::quiet_NaN());
    v_ = k_;

    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const int d = shape.head_dim;
    int next_page = 0;
    for (const SequenceSpec& s : specs) {
      const int tokens = s.start_pos + s.n_queries;
      max_context_ = std::max(max_context_, tokens);
      pages_.emplace_back(order.begin() + next_page, order.begin() + next_page + PagesFor(s));
      next_page += PagesFor(s);
      std::vector<float> dense_k(static_cast<size_t>(tokens) * shape.n_kv_heads * d);
      std::vector<float> dense_v(dense_k.size());
      for (int t = 0; t < tokens; ++t) {
        for (int g = 0; g < shape.n_kv_heads; ++g) {
          const int64_t at = pages_.back()[t / page_size] * page_stride_ +
                             (int64_t{g} * page_size + t % page_size) * d;
          for (int c = 0; c < d; ++c) {
            const size_t dense = (static_cast<size_t>(t) * shape.n_kv_heads + g) * d + c;
            dense_k[dense] = k_[at + c] = dist(rng_);
            dense_v[dense] = v_[at + c] = dist(rng_);
          }
        }
      }
      dense_k_.push_back(std::move(dense_k));
      dense_v_.push_back(std::move(dense_v));
      std::vector<float> q(static_cast<size_t>(s.n_queries) * shape.n_heads * d);
      for (float& x : q) x = q_scale * dist(rng_);
      q_.push_back(std::move(q));
    }
  }

  // From now on every sequence has a token bias (AttentionSequence::token_bias): a random
  // ln-weight in [0, 3) for about a third of its tokens, 0 for the others.
  void AddTokenBiases() {
    std::uniform_real_distribution<float> weight(0.0f, 3.0f);
    std::bernoulli_distribution biased(1.0 / 3.0);
    for (const SequenceSpec& s : specs_) {
      std::vector<float>& bias = biases_.emplace_back(s.start_pos + s.n_queries, 0.0f);
      for (float& b : bias) b = biased(rng_) ? weight(rng_) : 0.0f;
    }
  }

  int max_context() const { return max_context_; }
  int page_size() const { return page_size_; }
  // Channel c of the value of token 0, KV head 0, of the first sequence.
  float FirstValue(int c) const { return v_[pages_[0][0] * page_stride_ + c]; }
  size_t num_sequences() const { return specs_.size(); }
  size_t out_floats(size_t s) const { return q_[s].size(); }

  // Fresh outputs (NaN, then guard values) and the sequence list pointing at them.
  std::vector<AttentionSequence> Sequences(std::vector<std::vector<float>>& outs) const {
    outs.clear();
    std::vector<AttentionSequence> seqs;
    for (size_t s = 0; s < specs_.size(); ++s) {
      std::vector<float> out(q_[s].size() + kGuardFloats, std::numeric_limits<float>::quiet_NaN());
      std::fill(out.end() - kGuardFloats, out.end(), kGuard);
      outs.push_back(std::move(out));
    }
    for (size_t s = 0; s < specs_.size(); ++s) {
      AttentionSequence seq;
      seq.q = q_[s].data();
      seq.out = outs[s].data();
      seq.n_queries = specs_[s].n_queries;
      seq.start_pos = specs_[s].start_pos;
      seq.kv = PlainPagedKv(k_.data(), v_.data(), pages_[s].data(), page_size_, page_stride_,
                            shape_.head_dim);
      if (!biases_.empty()) seq.token_bias = biases_[s].data();
      seqs.push_back(seq);
    }
    return seqs;
  }

  // Causal softmax attention in double over the dense K/V of sequence `s`.
  std::vector<double> Naive(size_t s) const {
    const int d = shape_.head_dim, group = shape_.n_heads / shape_.n_kv_heads;
    const SequenceSpec& spec = specs_[s];
    std::vector<double> out(q_[s].size(), 0.0);
    for (int i = 0; i < spec.n_queries; ++i) {
      const int tokens = spec.start_pos + i + 1;
      for (int h = 0; h < shape_.n_heads; ++h) {
        const float* q = q_[s].data() + (static_cast<size_t>(i) * shape_.n_heads + h) * d;
        const int g = h / group;
        std::vector<double> scores(tokens);
        double max_score = -INFINITY;
        for (int t = 0; t < tokens; ++t) {
          const float* k =
              dense_k_[s].data() + (static_cast<size_t>(t) * shape_.n_kv_heads + g) * d;
          double dot = 0.0;
          for (int c = 0; c < d; ++c) dot += double{q[c]} * k[c];
          scores[t] =
              dot / std::sqrt(static_cast<double>(d)) + (biases_.empty() ? 0.0 : biases_[s][t]);
          max_score = std::max(max_score, scores[t]);
        }
        double sum = 0.0;
        for (double& score : scores) sum += (score = std::exp(score - max_score));
        double* o = out.data() + (static_cast<size_t>(i) * shape_.n_heads + h) * d;
        for (int t = 0; t < tokens; ++t) {
          const float* v =
              dense_v_[s].data() + (static_cast<size_t>(t) * shape_.n_kv_heads + g) * d;
          for (int c = 0; c < d; ++c) o[c] += scores[t] / sum * v[c];
        }
      }
    }
    return out;
  }

 private:
  int PagesFor(const SequenceSpec& s) const {
    return (s.start_pos + s.n_queries + page_size_ - 1) / page_size_;
  }

  AttentionShape shape_;
  int page_size_;
  std::vector<SequenceSpec> specs_;
  std::mt19937 rng_;
  int64_t page_stride_ = 0;
  int max_context_ = 1;
  std::vector<float> k_, v_;
  std::vector<std::vector<int32_t>> pages_;
  std::vector<std::vector<float>> q_, dense_k_, dense_v_, biases_;
};

// Runs the fast path over all sequences in one call and the reference per sequence; compares both
// with each other and with the double-precision naive attention.
void CheckAgainstReferences(const PagedFixture& f, const AttentionShape& shape, int threads,
                            double tolerance = kTolerance) {
  ThreadPool pool(threads);
  std::vector<std::vector<float>> fast_out, ref_out;
  std::vector<AttentionSequence> fast = f.Sequences(fast_out);
  std::vector<AttentionSequence> ref = f.Sequences(ref_out);
  int queries = 0;  // the workspace sized from the bounds, as the engine sizes it
  for (const AttentionSequence& seq : fast) queries += seq.n_queries;
  std::vector<float> workspace(
      AttentionWorkspaceFloats(shape, pool.size(), f.max_context(), f.page_size(), queries));
  Attention(pool, shape, fast, workspace);
  for (size_t s = 0; s < f.num_sequences(); ++s) {
    SCOPED_TRACE(absl::StrCat("sequence ", s, " start_pos ", fast[s].start_pos, " n_queries ",
                              fast[s].n_queries));
    AttentionReference(shape, ref[s]);
    const size_t n = f.out_floats(s);
    for (int g = 0; g < kGuardFloats; ++g) {
      ASSERT_EQ(fast_out[s][n + g], kGuard) << "fast path wrote past the output";
      ASSERT_EQ(ref_out[s][n + g], kGuard) << "reference wrote past the output";
    }
    if (n == 0) continue;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(fast_out[s][i])) << "fast out[" << i << "] = " << fast_out[s][i];
      ASSERT_TRUE(std::isfinite(ref_out[s][i])) << "reference out[" << i << "] = " << ref_out[s][i];
    }
    ASSERT_GT(Norm(fast_out[s].data(), n), 0.0);
    std::vector<double> ref_as_double(ref_out[s].begin(), ref_out[s].begin() + n);
    std::vector<double> naive = f.Naive(s);
    ASSERT_GT(Norm(ref_out[s].data(), n), 0.0);
    EXPECT_LT(RelativeError(fast_out[s].data(), ref_as_double), tolerance) << "fast vs reference";
    EXPECT_LT(RelativeError(fast_out[s].data(), naive), tolerance) << "fast vs naive double";
    EXPECT_LT(RelativeError(ref_out[s].data(), naive), tolerance) << "reference vs naive double";
  }
}

struct AttentionCase {
  int page_size;
  int group;  // query heads per KV head
  int head_dim;
  int threads;
};

class AttentionTest : public testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionTest, MatchesReferenceAndNaive) {
  const AttentionCase& c = GetParam();
  AttentionShape shape{2 * c.group, 2, c.head_dim};
  const std::vector<SequenceSpec> specs = {
      {0, 1},    // decode, first token
      {37, 1},   // decode deep into the context
      {5, 19},   // prefill continuing a cached prefix
      {0, 33},   // prefill from scratch
      {100, 1},  // decode
      {16, 4},   // chunked prefill starting on a page boundary
      {3, 150},  // prefill over three query blocks of the GEMM path, the last one partial
  };
  PagedFixture f(shape, c.page_size, specs,
                 static_cast<uint32_t>(c.page_size * 1000 + c.group * 100 + c.head_dim));
  CheckAgainstReferences(f, shape, c.threads);
}

std::vector<AttentionCase> AllCases() {
  std::vector<AttentionCase> cases;
  for (int page_size : {1, 3, 16}) {
    for (int group : {1, 2, 4}) {
      for (int head_dim : {8, 48, 64}) {
        for (int threads : {1, 2}) cases.push_back({page_size, group, head_dim, threads});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Paged, AttentionTest, testing::ValuesIn(AllCases()),
                         [](const testing::TestParamInfo<AttentionCase>& info) {
                           return absl::StrCat("page", info.param.page_size, "_gqa",
                                               info.param.group, "_d", info.param.head_dim,
                                               "_threads", info.param.threads);
                         });

TEST(AttentionLongTest, LongContextDecodeAndPrefill) {
  AttentionShape shape{12, 4, 64};
  PagedFixture f(shape, 16, {{1000, 1}, {900, 7}, {511, 1}, {700, 130}}, 99);
  CheckAgainstReferences(f, shape, 2);
}

// Token biases (KVCrush representatives' weights) on the decode path, across chunks, and on the
// GEMM path: each token's scores shift by its bias, as in the reference and the naive softmax.
TEST(AttentionBiasTest, TokenBiasOnEveryPath) {
  for (int group : {1, 4}) {
    SCOPED_TRACE(absl::StrCat("group ", group));
    AttentionShape shape{2 * group, 2, 32};
    PagedFixture f(shape, 16, {{0, 1}, {37, 1}, {1100, 1}, {5, 19}, {3, 150}, {40, 7}},
                   static_cast<uint32_t>(500 + group));
    f.AddTokenBiases();
    CheckAgainstReferences(f, shape, 2);
  }
}

TEST(AttentionLongTest, ThreeThreadsManySequences) {
  AttentionShape shape{8, 2, 32};
  std::vector<SequenceSpec> specs;
  for (int s = 0; s < 9; ++s) specs.push_back({s * 11, 1 + (s % 3) * 5});
  PagedFixture f(shape, 3, specs, 123);
  CheckAgainstReferences(f, shape, 3);
}

// Decode rows longer than a chunk (kernels/cpu/decode_chunks.h: 1024 tokens, rounded up to whole
// pages) merge their chunks' partial softmaxes: rows just below, at and past a chunk boundary, the
// rows of one sequence straddling one, several chunks, and a page size that does not divide 1024.
TEST(AttentionLongTest, DecodeRowsAcrossChunks) {
  for (int page_size : {3, 16}) {
    SCOPED_TRACE(absl::StrCat("page size ", page_size));
    AttentionShape shape{8, 2, 32};
    PagedFixture f(shape, page_size,
                   {{1022, 1}, {1023, 1}, {1024, 1}, {1020, 9}, {2047, 1}, {3000, 3}},
                   static_cast<uint32_t>(41 + page_size));
    CheckAgainstReferences(f, shape, 2);
  }
}

// A decode row's result depends on its own sequence only, bit for bit: the same on 1, 2 and 3
// threads, and alone as beside other sequences (the chunks follow the row's length, not the load).
TEST(AttentionLongTest, DecodeResultDoesNotDependOnThreadsOrBatch) {
  AttentionShape shape{8, 2, 32};
  PagedFixture f(shape, 16, {{2500, 1}, {1100, 2}, {40, 1}, {3000, 1}}, 77);
  auto run = [&](int threads, int only) {  // only < 0: every sequence in one call
    ThreadPool pool(threads);
    std::vector<std::vector<float>> outs;
    std::vector<AttentionSequence> seqs = f.Sequences(outs);
    std::span<const AttentionSequence> call(seqs);
    if (only >= 0) call = call.subspan(only, 1);
    std::vector<float> workspace(AttentionWorkspaceFloats(shape, pool.size(), call));
    Attention(pool, shape, call, workspace);
    return outs;
  };
  const std::vector<std::vector<float>> want = run(1, -1);
  for (int threads : {2, 3}) EXPECT_EQ(run(threads, -1), want) << threads << " threads";
  for (size_t s = 0; s < f.num_sequences(); ++s) {
    EXPECT_EQ(run(2, static_cast<int>(s))[s], want[s]) << "sequence " << s << " alone";
  }
}

// A sequence with no queries contributes no work and does not disturb its neighbours.
TEST(AttentionEdgeTest, EmptySequenceIsSkipped) {
  AttentionShape shape{4, 2, 16};
  PagedFixture f(shape, 4, {{3, 2}, {5, 0}, {0, 3}}, 7);
  CheckAgainstReferences(f, shape, 2);
}

// Scores far beyond expf's range (q scaled by 200) stay finite thanks to the max subtraction. The
// tolerance is looser: an fp32 score of magnitude ~100 carries ~1e-5 absolute rounding, which the
// exponential turns into relative error of the weights.
TEST(AttentionEdgeTest, LargeScoresStayFinite) {
  AttentionShape shape{4, 2, 64};
  PagedFixture f(shape, 16, {{40, 3}, {0, 1}}, 11, /*q_scale=*/200.0f);
  CheckAgainstReferences(f, shape, 2, /*tolerance=*/1e-3);
}

// The first query attends to token 0 only: its output is exactly V[0] of its KV head.
TEST(AttentionEdgeTest, SingleTokenReturnsItsValue) {
  AttentionShape shape{4, 1, 8};
  PagedFixture f(shape, 2, {{0, 1}}, 5);
  ThreadPool pool(2);
  std::vector<std::vector<float>> outs;
  std::vector<AttentionSequence> seqs = f.Sequences(outs);
  std::vector<float> workspace(AttentionWorkspaceFloats(shape, pool.size(), seqs));
  Attention(pool, shape, seqs, workspace);
  std::vector<double> naive = f.Naive(0);
  for (int h = 0; h < shape.n_heads; ++h) {
    for (int c = 0; c < shape.head_dim; ++c) {
      // With one token the softmax weight is exactly 1.
      const float v = f.FirstValue(c);
      EXPECT_EQ(outs[0][h * shape.head_dim + c], v) << "head " << h << " c " << c;
      EXPECT_EQ(naive[h * shape.head_dim + c], double{v});
    }
  }
}

}  // namespace
}  // namespace pdserve::kernels
