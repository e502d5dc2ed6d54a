// KCache top-N decode attention (kernels/kcache_attention.h, research/algorithms.md §4.3–4.6):
//   - SelectTokens: sink, recent and top-n regions, ties to the lower index, NaN scores last,
//     counts min(sink + recent + top_n, n), against a brute-force oracle on random cases.
//   - Every token selected, unnormalized: bit-identical to Attention's decode path on the same
//     view (f32 and FP8 K/V, ragged widths, GQA 1/2/4, 1 and 2 threads).
//   - A strict subset: renormalized == dense attention over the selected set, unnormalized ==
//     Σ_S p·v with the full-softmax p (both in double), the bound ‖o − o_full‖ ≤ (1 − μ)·Vmax
//     (2(1 − μ)·Vmax renormalized), `selected` counts right.
//   - Values come only through the fetch callback, once per (sequence, page, KV head) and only for
//     pages holding a selected token; each fetched buffer holds that head's rows and scales only
//     (everything else NaN), the view's own V pool is NaN.
#include "kernels/kcache_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
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

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kGuard = 777.0f;

// ---------------------------------------------------------------------------------------------
// SelectTokens.

// Runs SelectTokens with exactly-sized scratch (so ASan sees overruns); returns the mask.
std::vector<uint8_t> Select(const std::vector<float>& scores, const TopNOptions& options,
                            int* kept) {
  const int n = static_cast<int>(scores.size());
  std::vector<uint8_t> keep(n, 0xAA);
  std::vector<int> order(n, -1);
  *kept = SelectTokens(scores.data(), n, options, keep.data(), order.data());
  for (int t = 0; t < n; ++t) EXPECT_TRUE(keep[t] == 0 || keep[t] == 1) << "keep[" << t << "]";
  return keep;
}

std::vector<uint8_t> Mask(int n, std::initializer_list<int> kept) {
  std::vector<uint8_t> mask(n, 0);
  for (int t : kept) mask[t] = 1;
  return mask;
}

TEST(SelectTokensTest, SinkRecentAndTopN) {
  //                           0     1     2     3     4     5     6     7     8     9    10   11
  const std::vector<float> s = {0.0f, 0.1f,  0.5f, 0.2f, 0.9f, 0.3f,
                                0.8f, 0.05f, 0.7f, 0.0f, 0.f,  0.f};
  int kept = 0;
  // Sink {0, 1}, recent {9, 10, 11}; of 2..8 the three largest: 4 (0.9), 6 (0.8), 8 (0.7).
  EXPECT_EQ(Select(s, {.top_n = 3, .sink = 2, .recent = 3}, &kept),
            Mask(12, {0, 1, 4, 6, 8, 9, 10, 11}));
  EXPECT_EQ(kept, 8);
  // Top-n alone ranks the sink and recent positions too.
  EXPECT_EQ(Select(s, {.top_n = 2}, &kept), Mask(12, {4, 6}));
  EXPECT_EQ(kept, 2);
  // Sink and recent alone, whatever the scores.
  EXPECT_EQ(Select(s, {.sink = 1, .recent = 1}, &kept), Mask(12, {0, 11}));
  EXPECT_EQ(kept, 2);
  // Nothing asked, nothing kept.
  EXPECT_EQ(Select(s, {}, &kept), Mask(12, {}));
  EXPECT_EQ(kept, 0);
}

TEST(SelectTokensTest, TiesGoToTheLowerIndex) {
  const std::vector<float> equal(10, 0.25f);
  int kept = 0;
  EXPECT_EQ(Select(equal, {.top_n = 3, .sink = 1, .recent = 2}, &kept),
            Mask(10, {0, 1, 2, 3, 8, 9}));
  EXPECT_EQ(kept, 6);
  // A tie at the cut: 0.5 at 2, 5 and 7 compete for the last of two places after 6 (0.9).
  const std::vector<float> s = {0.1f, 0.0f, 0.5f, 0.2f, 0.1f, 0.5f, 0.9f, 0.5f};
  EXPECT_EQ(Select(s, {.top_n = 2}, &kept), Mask(8, {2, 6}));
  EXPECT_EQ(Select(s, {.top_n = 3}, &kept), Mask(8, {2, 5, 6}));
  EXPECT_EQ(Select(s, {.top_n = 3, .sink = 3}, &kept), Mask(8, {0, 1, 2, 5, 6, 7}));
}

TEST(SelectTokensTest, NaNScoresRankLast) {
  const float inf = std::numeric_limits<float>::infinity();
  int kept = 0;
  // NaN below every finite score, negative ones and 0 included.
  const std::vector<float> s = {kNaN, -3.0f, kNaN, 0.0f, 2.0f, kNaN};
  EXPECT_EQ(Select(s, {.top_n = 3}, &kept), Mask(6, {1, 3, 4}));
  EXPECT_EQ(kept, 3);
  EXPECT_EQ(Select(s, {.top_n = 4}, &kept), Mask(6, {0, 1, 3, 4}));  // then NaNs, lower first
  // ... and below -∞: NaN is no score at all.
  const std::vector<float> t = {kNaN, -inf, 0.5f, kNaN};
  EXPECT_EQ(Select(t, {.top_n = 2}, &kept), Mask(4, {1, 2}));
  EXPECT_EQ(Select(t, {.top_n = 1}, &kept), Mask(4, {2}));
  // All NaN: lowest indices.
  EXPECT_EQ(Select(std::vector<float>(5, kNaN), {.top_n = 2}, &kept), Mask(5, {0, 1}));
}

// The specification of the top-n order: NaN last, larger first, lower index first.
bool Before(const std::vector<float>& s, int a, int b) {
  const bool na = std::isnan(s[a]), nb = std::isnan(s[b]);
  if (na != nb) return nb;
  if (!na && s[a] != s[b]) return s[a] > s[b];
  return a < b;
}

TEST(SelectTokensTest, RandomCasesMatchBruteForce) {
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int> small(-3, 12);
  std::uniform_int_distribution<int> value(0, 6);  // few distinct values: many ties
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    const TopNOptions options{.top_n = small(rng), .sink = small(rng), .recent = small(rng)};
    std::vector<float> s(n);
    for (float& x : s) {
      const int v = value(rng);
      x = v == 6   ? -std::numeric_limits<float>::infinity()
          : v == 5 ? kNaN
          : v == 4 ? -1.0f
                   : 0.25f * static_cast<float>(v);
    }
    SCOPED_TRACE(absl::StrCat("trial ", trial, " n ", n, " top_n ", options.top_n, " sink ",
                              options.sink, " recent ", options.recent));
    int kept = 0;
    const std::vector<uint8_t> got = Select(s, options, &kept);
    const int sink = std::clamp(options.sink, 0, n);
    const int recent = std::clamp(options.recent, 0, n);
    std::vector<uint8_t> want(n, 0);
    std::vector<int> candidates;
    for (int t = 0; t < n; ++t) {
      if (t < sink || t >= n - recent) {
        want[t] = 1;
      } else {
        candidates.push_back(t);
      }
    }
    std::sort(candidates.begin(), candidates.end(), [&](int a, int b) { return Before(s, a, b); });
    const int take = std::min<int>(std::max(options.top_n, 0), candidates.size());
    for (int i = 0; i < take; ++i) want[candidates[i]] = 1;
    ASSERT_EQ(got, want);
    ASSERT_EQ(kept, std::min(n, sink + recent + std::max(options.top_n, 0)));
    ASSERT_EQ(kept, std::count(got.begin(), got.end(), 1));
  }
}

// ---------------------------------------------------------------------------------------------
// KCacheAttention.

KvScaleMode ModeOf(KvElement element, KvScaleMode fp8_mode) {
  return element == KvElement::kF32 ? KvScaleMode::kNone : fp8_mode;
}

// Decode sequences (one query each, at position context − 1) in one K and one V pool, pages
// shuffled; the stored rows read back for the oracles.
class DecodeKv {
 public:
  DecodeKv(int group, int head_dim, int page_size, const KvSectionLayout& k,
           const KvSectionLayout& v, const std::vector<int>& contexts, uint32_t seed, float q_scale)
      : n_kv_(k.n_heads()),
        group_(group),
        head_dim_(head_dim),
        page_size_(page_size),
        contexts_(contexts),
        k_(k, TotalPages(contexts, page_size)),
        v_(v, TotalPages(contexts, page_size)),
        v_poison_(v_.bytes.size(), 0xFF) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int h = 0; h < n_kv_ * group; ++h) {
      q_offsets_.push_back(q_width_);
      out_offsets_.push_back(out_width_);
      q_width_ += k.dim(h / group);
      out_width_ += v.dim(h / group);
    }
    std::vector<int32_t> order(TotalPages(contexts, page_size));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    size_t next = 0;
    for (int context : contexts) {
      max_context_ = std::max(max_context_, context);
      const int n_pages = (context + page_size - 1) / page_size;
      pages_.emplace_back(order.begin() + next, order.begin() + next + n_pages);
      next += n_pages;
      for (int t = 0; t < context; ++t) {
        for (int g = 0; g < n_kv_; ++g) {
          std::vector<float> kr(k.dim(g)), vr(v.dim(g));
          for (float& x : kr) x = normal(rng);
          for (float& x : vr) x = normal(rng);
          const int32_t page = pages_.back()[t / page_size];
          WriteKvRow(k_.layout, k_.page(page), g, t % page_size, kr.data());
          WriteKvRow(v_.layout, v_.page(page), g, t % page_size, vr.data());
        }
      }
      std::vector<float> q(q_width_);
      for (float& x : q) x = q_scale * normal(rng);
      q_.push_back(std::move(q));
    }
    for (size_t s = 0; s < contexts.size(); ++s) {
      k_rows_.push_back(Stored(k_, s));
      v_rows_.push_back(Stored(v_, s));
    }
  }

  AttentionShape Shape() const {
    AttentionShape shape{n_kv_ * group_, n_kv_, head_dim_};
    shape.q_offsets = q_offsets_.data();
    shape.out_offsets = out_offsets_.data();
    return shape;
  }
  int n_kv() const { return n_kv_; }
  int group() const { return group_; }
  int page_size() const { return page_size_; }
  int max_context() const { return max_context_; }
  size_t num_sequences() const { return contexts_.size(); }
  int context(size_t s) const { return contexts_[s]; }
  int64_t out_width() const { return out_width_; }
  int out_offset(int h) const { return out_offsets_[h]; }
  int v_dim(int g) const { return v_.layout.dim(g); }
  const SectionPool& v_pool() const { return v_; }
  const std::vector<int32_t>& pages(size_t s) const { return pages_[s]; }

  // The sequences, outputs filled with kGuard plus one guard float after each. With
  // `poison_values` the view's V pool is a NaN pool (KCacheAttention must not read it).
  std::vector<AttentionSequence> Sequences(std::vector<std::vector<float>>& outs,
                                           bool poison_values) const {
    outs.assign(contexts_.size(), std::vector<float>(out_width_ + 1, kGuard));
    std::vector<AttentionSequence> seqs;
    for (size_t s = 0; s < contexts_.size(); ++s) {
      AttentionSequence seq;
      seq.q = q_[s].data();
      seq.q_row_stride = q_width_;
      seq.out = outs[s].data();
      seq.out_row_stride = out_width_;
      seq.n_queries = 1;
      seq.start_pos = contexts_[s] - 1;
      seq.kv.k = k_.View();
      seq.kv.v = v_.View();
      if (poison_values) seq.kv.v.pool = v_poison_.data();
      seq.kv.pages = pages_[s].data();
      seq.kv.page_size = page_size_;
      if (!biases_.empty()) seq.token_bias = biases_[s].data();
      seqs.push_back(seq);
    }
    return seqs;
  }

  // From now on sequence s's tokens have AttentionSequence::token_bias biases[s] (context(s) each).
  void SetTokenBiases(std::vector<std::vector<float>> biases) { biases_ = std::move(biases); }

  // Full-softmax probabilities in double of query head h of sequence s over its context.
  std::vector<double> Probabilities(size_t s, int h) const {
    const int g = h / group_, n = contexts_[s];
    const float* q = q_[s].data() + q_offsets_[h];
    std::vector<double> p(n);
    double max_score = -INFINITY;
    for (int t = 0; t < n; ++t) {
      const std::vector<float>& k = k_rows_[s][static_cast<size_t>(t) * n_kv_ + g];
      double dot = 0.0;
      for (size_t c = 0; c < k.size(); ++c) dot += double{q[c]} * k[c];
      p[t] = dot / std::sqrt(static_cast<double>(head_dim_));
      max_score = std::max(max_score, p[t]);
    }
    double sum = 0.0;
    for (double& x : p) sum += (x = std::exp(x - max_score));
    for (double& x : p) x /= sum;
    return p;
  }
  const std::vector<float>& v_row(size_t s, int t, int g) const {
    return v_rows_[s][static_cast<size_t>(t) * n_kv_ + g];
  }

 private:
  static int TotalPages(const std::vector<int>& contexts, int page_size) {
    int pages = 3;  // spare, poisoned
    for (int c : contexts) pages += (c + page_size - 1) / page_size;
    return pages;
  }
  std::vector<std::vector<float>> Stored(const SectionPool& pool, size_t s) const {
    std::vector<std::vector<float>> rows;
    for (int t = 0; t < contexts_[s]; ++t) {
      for (int g = 0; g < n_kv_; ++g) {
        std::vector<float> row(pool.layout.dim(g));
        ReadKvRow(pool.layout, pool.page(pages_[s][t / page_size_]), g, t % page_size_, row.data());
        rows.push_back(std::move(row));
      }
    }
    return rows;
  }

  int n_kv_, group_, head_dim_, page_size_;
  std::vector<int> contexts_;
  SectionPool k_, v_;
  std::vector<uint8_t> v_poison_;
  std::vector<int> q_offsets_, out_offsets_;
  int64_t q_width_ = 0, out_width_ = 0;
  int max_context_ = 1;
  std::vector<std::vector<int32_t>> pages_;
  std::vector<std::vector<float>> q_, biases_;
  std::vector<std::vector<std::vector<float>>> k_rows_, v_rows_;
};

// A fetch callback over the fixture's V pool that records its calls and hands out, per call, a
// copy of the page's section in which only KV head `head`'s rows and scales are real (the rest
// NaN bytes). Thread-safe; buffers live as long as the fetcher.
class Fetcher {
 public:
  explicit Fetcher(const DecodeKv& f) : f_(f) {}

  FetchValuePage Callback() {
    return [this](int sequence, int page_index, int head) -> const uint8_t* {
      std::lock_guard<std::mutex> lock(mu_);
      const auto key = std::make_tuple(sequence, page_index, head);
      ++calls_[key];
      std::vector<uint8_t>& buffer = buffers_[key];
      const SectionPool& v = f_.v_pool();
      if (sequence < 0 || sequence >= static_cast<int>(f_.num_sequences()) || page_index < 0 ||
          page_index >= static_cast<int>(f_.pages(sequence).size()) || head < 0 ||
          head >= f_.n_kv()) {
        bad_ = true;
        buffer.assign(v.stride, 0xFF);
        return buffer.data();
      }
      const uint8_t* page = v.page(f_.pages(sequence)[page_index]);
      buffer.assign(v.stride, 0xFF);
      const int64_t scales = int64_t{v.layout.scales_per_head()} * 4;
      std::memcpy(buffer.data() + v.layout.scale_offset(head), page + v.layout.scale_offset(head),
                  scales);
      const int64_t rows =
          int64_t{v.layout.page_size()} * v.layout.dim(head) * v.layout.element_bytes();
      std::memcpy(buffer.data() + v.layout.head_offset(head), page + v.layout.head_offset(head),
                  rows);
      return buffer.data();
    };
  }

  const std::map<std::tuple<int, int, int>, int>& calls() const { return calls_; }
  bool bad() const { return bad_; }

 private:
  const DecodeKv& f_;
  std::mutex mu_;
  std::map<std::tuple<int, int, int>, int> calls_;
  std::map<std::tuple<int, int, int>, std::vector<uint8_t>> buffers_;
  bool bad_ = false;
};

struct KCacheRun {
  std::vector<std::vector<float>> outs;
  std::vector<int> selected;
};

KCacheRun RunKCache(const DecodeKv& f, int threads, const TopNOptions& options, Fetcher& fetcher) {
  ThreadPool pool(threads);
  KCacheRun run;
  const AttentionShape shape = f.Shape();
  std::vector<AttentionSequence> seqs = f.Sequences(run.outs, /*poison_values=*/true);
  std::vector<float> workspace(KCacheWorkspaceFloats(shape, pool.size(), f.max_context()));
  run.selected.assign(f.num_sequences() * f.n_kv(), -1);
  KCacheAttention(pool, shape, seqs, options, fetcher.Callback(), workspace, run.selected);
  for (size_t s = 0; s < f.num_sequences(); ++s) {
    EXPECT_EQ(run.outs[s][f.out_width()], kGuard) << "sequence " << s << " wrote past its output";
    for (int64_t i = 0; i < f.out_width(); ++i) {
      EXPECT_TRUE(std::isfinite(run.outs[s][i]) && run.outs[s][i] != kGuard)
          << "sequence " << s << " out[" << i << "] = " << run.outs[s][i];
    }
  }
  EXPECT_FALSE(fetcher.bad()) << "fetch called with an out-of-range argument";
  return run;
}

int ExpectedCount(int n, const TopNOptions& o) {
  return std::min(n, std::max(o.sink, 0) + std::max(o.recent, 0) + std::max(o.top_n, 0));
}

struct FormatCase {
  int group;
  KvElement k_element;
  KvElement v_element;
  KvScaleMode fp8_mode;
  bool ragged;
  int threads;
};

std::string FormatName(const testing::TestParamInfo<FormatCase>& info) {
  const FormatCase& c = info.param;
  const std::string mode = c.fp8_mode == KvScaleMode::kPerPageHead ? "page" : "token";
  return absl::StrCat(
      "gqa", c.group, "_K", KvElementName(c.k_element), "_V", KvElementName(c.v_element),
      c.k_element == KvElement::kE4M3 || c.v_element == KvElement::kE4M3 ? "_per" + mode : "",
      c.ragged ? "_ragged" : "_full", "_threads", c.threads);
}

std::vector<FormatCase> FormatCases() {
  std::vector<FormatCase> cases;
  int i = 0;
  for (int group : {1, 2, 4}) {
    cases.push_back({group, KvElement::kF32, KvElement::kF32, KvScaleMode::kNone, false, 1});
    cases.push_back({group, KvElement::kF32, KvElement::kF32, KvScaleMode::kNone, true, 2});
    cases.push_back(
        {group, KvElement::kF32, KvElement::kE4M3, KvScaleMode::kPerTokenHead, i % 2 == 0, 2});
    cases.push_back({group, KvElement::kE4M3, KvElement::kE4M3, KvScaleMode::kPerPageHead,
                     i % 2 == 1, 1 + i % 2});
    ++i;
  }
  return cases;
}

DecodeKv MakeKv(const FormatCase& c, int page_size, const std::vector<int>& contexts, uint32_t seed,
                float q_scale) {
  const int head_dim = 16;
  const std::vector<int> k_dims =
      c.ragged ? std::vector<int>{16, 7, 12} : std::vector<int>{16, 16, 16};
  const std::vector<int> v_dims =
      c.ragged ? std::vector<int>{9, 16, 4} : std::vector<int>{16, 16, 16};
  return DecodeKv(c.group, head_dim, page_size,
                  Layout(page_size, k_dims, c.k_element, ModeOf(c.k_element, c.fp8_mode)),
                  Layout(page_size, v_dims, c.v_element, ModeOf(c.v_element, c.fp8_mode)), contexts,
                  seed, q_scale);
}

class KCacheFormatTest : public testing::TestWithParam<FormatCase> {};

// top_n + sink + recent ≥ every context: all tokens kept; unnormalized it is Attention's decode
// path bit for bit, renormalized within float rounding of it.
TEST_P(KCacheFormatTest, EverythingSelectedIsBitIdenticalToDenseDecode) {
  const FormatCase& c = GetParam();
  const std::vector<int> contexts = {1, 2, 17, 40, 100, 64, 2100};  // 2100: three decode chunks
  const DecodeKv f = MakeKv(c, 4, contexts, static_cast<uint32_t>(c.group * 7 + c.threads), 1.5f);
  ThreadPool pool(c.threads);
  const AttentionShape shape = f.Shape();
  std::vector<std::vector<float>> dense;
  std::vector<AttentionSequence> seqs = f.Sequences(dense, /*poison_values=*/false);
  std::vector<float> workspace(AttentionWorkspaceFloats(shape, pool.size(), seqs));
  Attention(pool, shape, seqs, workspace);
  // sink + recent + top_n == 2100 == the longest context exactly; and plain top-n over all.
  for (const TopNOptions& options :
       {TopNOptions{.top_n = 2088, .sink = 4, .recent = 8}, TopNOptions{.top_n = 10000},
        TopNOptions{.recent = 2100},
        TopNOptions{.top_n = 2088, .sink = 4, .recent = 8, .renormalize = true}}) {
    SCOPED_TRACE(absl::StrCat("top_n ", options.top_n, " sink ", options.sink, " recent ",
                              options.recent, " renormalize ", options.renormalize));
    Fetcher fetcher(f);
    const KCacheRun run = RunKCache(f, c.threads, options, fetcher);
    for (size_t s = 0; s < f.num_sequences(); ++s) {
      SCOPED_TRACE(absl::StrCat("context ", f.context(s)));
      for (int g = 0; g < f.n_kv(); ++g) {
        EXPECT_EQ(run.selected[s * f.n_kv() + g], f.context(s)) << "KV head " << g;
      }
      if (!options.renormalize) {
        EXPECT_EQ(
            std::memcmp(run.outs[s].data(), dense[s].data(), sizeof(float) * (f.out_width() + 1)),
            0);
      } else {
        for (int64_t i = 0; i < f.out_width(); ++i) {
          EXPECT_NEAR(run.outs[s][i], dense[s][i], 1e-6 + 4e-7 * std::abs(dense[s][i]))
              << "out[" << i << "]";
        }
      }
      // Every page of every KV head fetched exactly once.
      for (int p = 0; p < static_cast<int>(f.pages(s).size()); ++p) {
        for (int g = 0; g < f.n_kv(); ++g) {
          const auto it = fetcher.calls().find({static_cast<int>(s), p, g});
          ASSERT_NE(it, fetcher.calls().end()) << "page " << p << " head " << g << " not fetched";
          EXPECT_EQ(it->second, 1) << "page " << p << " head " << g;
        }
      }
    }
    EXPECT_EQ(fetcher.calls().size(), [&] {
      size_t pages = 0;
      for (size_t s = 0; s < f.num_sequences(); ++s) pages += f.pages(s).size();
      return pages * f.n_kv();
    }());
  }
}

// The oracle of one (sequence, KV head): selection from the group's summed full-softmax
// probabilities, in double.
struct GroupOracle {
  std::vector<uint8_t> keep;
  std::vector<std::vector<double>> p;  // per query head of the group
};

GroupOracle Oracle(const DecodeKv& f, size_t s, int g, const TopNOptions& o) {
  GroupOracle oracle;
  const int n = f.context(s);
  std::vector<double> total(n, 0.0);
  for (int j = 0; j < f.group(); ++j) {
    oracle.p.push_back(f.Probabilities(s, g * f.group() + j));
    for (int t = 0; t < n; ++t) total[t] += oracle.p.back()[t];
  }
  oracle.keep.assign(n, 0);
  const int sink = std::clamp(o.sink, 0, n);
  const int recent_begin = std::max(sink, n - std::max(o.recent, 0));
  std::vector<int> candidates;
  for (int t = 0; t < n; ++t) {
    if (t < sink || t >= recent_begin) {
      oracle.keep[t] = 1;
    } else {
      candidates.push_back(t);
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [&](int a, int b) { return total[a] > total[b] || (total[a] == total[b] && a < b); });
  const size_t take = std::min<size_t>(std::max(o.top_n, 0), candidates.size());
  for (size_t i = 0; i < take; ++i) oracle.keep[candidates[i]] = 1;
  // The kernel ranks float sums: the cut must not be a near tie, or the oracle would be ambiguous.
  if (take > 0 && take < candidates.size()) {
    const double last = total[candidates[take - 1]], next = total[candidates[take]];
    EXPECT_GT(last - next, 1e-5 * last) << "near tie at the top-n cut; change the seed";
  }
  return oracle;
}

// Subsets: renormalized == dense attention over the selected set, unnormalized == Σ_S p·v, the
// error bounds of research §4.3, fetches only of pages holding a selected token.
TEST_P(KCacheFormatTest, SubsetMatchesMaskedDenseAndFetchesOnlySelectedPages) {
  const FormatCase& c = GetParam();
  const std::vector<int> contexts = {1, 3, 10, 37, 64, 120, 97};
  const DecodeKv f = MakeKv(c, 4, contexts, static_cast<uint32_t>(c.group * 13 + c.threads), 1.0f);
  for (TopNOptions options :
       {TopNOptions{.top_n = 5, .sink = 2, .recent = 3}, TopNOptions{.top_n = 9},
        TopNOptions{.recent = 1}, TopNOptions{.top_n = 20, .sink = 1}}) {
    for (bool renormalize : {false, true}) {
      options.renormalize = renormalize;
      SCOPED_TRACE(absl::StrCat("top_n ", options.top_n, " sink ", options.sink, " recent ",
                                options.recent, " renormalize ", renormalize));
      Fetcher fetcher(f);
      const KCacheRun run = RunKCache(f, c.threads, options, fetcher);
      size_t expected_fetches = 0;
      for (size_t s = 0; s < f.num_sequences(); ++s) {
        SCOPED_TRACE(absl::StrCat("sequence ", s, " context ", f.context(s)));
        const int n = f.context(s);
        for (int g = 0; g < f.n_kv(); ++g) {
          SCOPED_TRACE(absl::StrCat("KV head ", g));
          const GroupOracle oracle = Oracle(f, s, g, options);
          EXPECT_EQ(run.selected[s * f.n_kv() + g], ExpectedCount(n, options));
          EXPECT_EQ(std::count(oracle.keep.begin(), oracle.keep.end(), 1),
                    ExpectedCount(n, options));
          // Fetches: exactly the pages holding a selected token, once each.
          for (int p = 0; p < static_cast<int>(f.pages(s).size()); ++p) {
            bool any = false;
            for (int t = p * f.page_size(); t < std::min(n, (p + 1) * f.page_size()); ++t) {
              any = any || oracle.keep[t];
            }
            const auto it = fetcher.calls().find({static_cast<int>(s), p, g});
            const int calls = it == fetcher.calls().end() ? 0 : it->second;
            EXPECT_EQ(calls, any ? 1 : 0) << "page " << p;
            expected_fetches += any ? 1 : 0;
          }
          const int dv = f.v_dim(g);
          double v_max = 0.0;
          for (int t = 0; t < n; ++t) {
            double norm = 0.0;
            for (float x : f.v_row(s, t, g)) norm += double{x} * x;
            v_max = std::max(v_max, std::sqrt(norm));
          }
          for (int j = 0; j < f.group(); ++j) {
            const int h = g * f.group() + j;
            const std::vector<double>& p = oracle.p[j];
            double mass = 0.0;
            for (int t = 0; t < n; ++t) mass += oracle.keep[t] ? p[t] : 0.0;
            std::vector<double> full(dv, 0.0), partial(dv, 0.0);
            for (int t = 0; t < n; ++t) {
              for (int c2 = 0; c2 < dv; ++c2) {
                full[c2] += p[t] * f.v_row(s, t, g)[c2];
                if (oracle.keep[t]) partial[c2] += p[t] * f.v_row(s, t, g)[c2];
              }
            }
            // Renormalized: softmax over the selected set only, i.e. dense attention with −∞
            // outside S (the same as partial / mass).
            std::vector<double> masked(dv, 0.0);
            {
              double max_p = 0.0;
              for (int t = 0; t < n; ++t) {
                if (oracle.keep[t]) max_p = std::max(max_p, p[t]);
              }
              double z = 0.0;
              for (int t = 0; t < n; ++t) z += oracle.keep[t] ? p[t] / max_p : 0.0;
              for (int t = 0; t < n; ++t) {
                if (!oracle.keep[t]) continue;
                for (int c2 = 0; c2 < dv; ++c2) {
                  masked[c2] += p[t] / max_p / z * f.v_row(s, t, g)[c2];
                }
              }
            }
            const float* got = run.outs[s].data() + f.out_offset(h);
            const std::vector<double>& want = renormalize ? masked : partial;
            double err_full = 0.0;
            for (int c2 = 0; c2 < dv; ++c2) {
              EXPECT_NEAR(got[c2], want[c2], 1e-6) << "query head " << h << " c " << c2;
              err_full += (got[c2] - full[c2]) * (got[c2] - full[c2]);
            }
            const double bound = (renormalize ? 2.0 : 1.0) * (1.0 - mass) * v_max;
            EXPECT_LE(std::sqrt(err_full), bound + 1e-6) << "query head " << h << " μ " << mass;
          }
        }
      }
      EXPECT_EQ(fetcher.calls().size(), expected_fetches);
      // The longest sequence selects at most 10 (or 21) of 120 tokens: pages are skipped.
      size_t all_pages = 0;
      for (size_t s = 0; s < f.num_sequences(); ++s) all_pages += f.pages(s).size() * f.n_kv();
      EXPECT_LT(expected_fetches, all_pages);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, KCacheFormatTest, testing::ValuesIn(FormatCases()), FormatName);

// Renormalized over one token: that token's value (the newest, with recent = 1), whatever its
// probability, to a few ulps (its weight e^(s − m) multiplies the value before the merge divides
// by it); unnormalized it is scaled by that probability, which is < 1.
TEST(KCacheAttentionTest, RecentOnlyGivesTheNewestValue) {
  const FormatCase c{2, KvElement::kF32, KvElement::kE4M3, KvScaleMode::kPerTokenHead, true, 2};
  const DecodeKv f = MakeKv(c, 5, {23, 8}, 99, 1.0f);
  for (bool renormalize : {true, false}) {
    Fetcher fetcher(f);
    const KCacheRun run = RunKCache(f, 2, {.recent = 1, .renormalize = renormalize}, fetcher);
    for (size_t s = 0; s < f.num_sequences(); ++s) {
      const int last = f.context(s) - 1;
      EXPECT_EQ(fetcher.calls().size(), f.num_sequences() * f.n_kv());
      for (int h = 0; h < f.n_kv() * f.group(); ++h) {
        const int g = h / f.group();
        const double p_last = f.Probabilities(s, h)[last];
        ASSERT_LT(p_last, 0.999);
        for (int c2 = 0; c2 < f.v_dim(g); ++c2) {
          const double v = f.v_row(s, last, g)[c2];
          const float got = run.outs[s][f.out_offset(h) + c2];
          if (renormalize) {
            EXPECT_FLOAT_EQ(got, static_cast<float>(v)) << "head " << h << " c " << c2;
          } else {
            EXPECT_NEAR(got, p_last * v, 1e-6) << "head " << h << " c " << c2;
          }
        }
      }
    }
  }
}

// An empty `selected` span is allowed; the result does not depend on it or on the thread count.
TEST(KCacheAttentionTest, ThreadsAndSelectedSpanDoNotChangeTheResult) {
  const FormatCase c{4, KvElement::kE4M3, KvElement::kE4M3, KvScaleMode::kPerPageHead, true, 1};
  const DecodeKv f = MakeKv(c, 8, {50, 9, 130}, 5, 2.0f);
  const TopNOptions options{.top_n = 7, .sink = 1, .recent = 4};
  Fetcher one(f);
  const KCacheRun a = RunKCache(f, 1, options, one);
  ThreadPool pool(2);
  std::vector<std::vector<float>> outs;
  std::vector<AttentionSequence> seqs = f.Sequences(outs, true);
  std::vector<float> workspace(KCacheWorkspaceFloats(f.Shape(), pool.size(), f.max_context()));
  Fetcher two(f);
  KCacheAttention(pool, f.Shape(), seqs, options, two.Callback(), workspace);
  for (size_t s = 0; s < f.num_sequences(); ++s) {
    EXPECT_EQ(std::memcmp(a.outs[s].data(), outs[s].data(), outs[s].size() * sizeof(float)), 0);
  }
  EXPECT_EQ(one.calls(), two.calls());
}

// The shapes of cuda_kv_test's dense-equivalence case, which found on a GPU that the CPU decode
// kernels skipped V columns past the last whole 4-vector block when the rest needed 4 vectors
// (widths 49-63 on AVX-512): head dim 64, GQA 4, ZACK widths {64, 50} / {61, 64}, contexts across
// pages and 256-key chunks, everything selected. KCache and Attention's decode against
// AttentionReference; then again with token biases (KVCrush's weights) on every third token.
TEST(KCacheAttentionTest, EverythingSelectedMatchesTheReferenceAtZackWidths) {
  for (int page_size : {16, 7}) {
    for (bool biased : {false, true}) {
      SCOPED_TRACE(absl::StrCat("page ", page_size, biased ? " biased" : ""));
      DecodeKv f(4, 64, page_size, Layout(page_size, {64, 50}, KvElement::kF32, KvScaleMode::kNone),
                 Layout(page_size, {61, 64}, KvElement::kF32, KvScaleMode::kNone),
                 {100, 251, 1, 601}, 1, 3.0f);
      if (biased) {
        std::vector<std::vector<float>> biases;
        for (size_t s = 0; s < f.num_sequences(); ++s) {
          std::vector<float>& b = biases.emplace_back(f.context(s), 0.0f);
          for (size_t t = 0; t < b.size(); t += 3) b[t] = 0.25f * static_cast<float>(t % 11);
        }
        f.SetTokenBiases(std::move(biases));
      }
      ThreadPool pool(1);
      std::vector<std::vector<float>> dense, reference;
      std::vector<AttentionSequence> seqs = f.Sequences(dense, /*poison_values=*/false);
      std::vector<float> workspace(AttentionWorkspaceFloats(f.Shape(), pool.size(), seqs));
      Attention(pool, f.Shape(), seqs, workspace);
      std::vector<AttentionSequence> reference_seqs = f.Sequences(reference, false);
      for (const AttentionSequence& seq : reference_seqs) AttentionReference(f.Shape(), seq);
      Fetcher fetcher(f);
      const KCacheRun run = RunKCache(f, 1, {.top_n = 590, .sink = 4, .recent = 8}, fetcher);
      for (size_t s = 0; s < f.num_sequences(); ++s) {
        for (int64_t i = 0; i < f.out_width(); ++i) {
          const float want = reference[s][i];
          ASSERT_NEAR(dense[s][i], want, 1e-5 + 1e-4 * std::abs(want))
              << "Attention, sequence " << s << " out[" << i << "]";
          ASSERT_EQ(run.outs[s][i], dense[s][i]) << "KCache, sequence " << s << " out[" << i << "]";
        }
      }
    }
  }
}

}  // namespace
}  // namespace pdserve::kernels
