// AttentionImportance (kernels/attention_importance.h) against a scalar double-precision oracle on
// a plain f32 paged cache with a shuffled page table: GQA groups 1, 2 and 4, queries starting
// mid-context, few queries (the row kernels) and 16 or more (the panels, in chunks of 32), 1 and 2
// threads, rows with room beyond the keys; each query adds exactly 1 to every KV head's row, and a
// token no query sees (or room beyond the keys) gets nothing. Each case runs without and with token
// biases (KVCrush representatives' weights, AttentionSequence::token_bias) on every third token.
#include "kernels/attention_importance.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/base/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/kv_view.h"

namespace pdserve::kernels {
namespace {

struct Case {
  int n_heads, n_kv_heads, head_dim, start_pos, n_queries, threads;
};

// One case, with a bias on every third token when `biased`.
void CheckAgainstTheOracle(const Case& c, bool biased) {
  SCOPED_TRACE(biased ? "biased" : "unbiased");
  const int page_size = 8, n_keys = c.start_pos + c.n_queries;
  const int pages = (n_keys + page_size - 1) / page_size;
  const int64_t page_floats = int64_t{c.n_kv_heads} * page_size * c.head_dim;
  std::mt19937 random(c.n_heads * 131 + c.start_pos);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(pages * page_floats), v(k.size(), 0.0f);
  std::vector<float> q(int64_t{c.n_queries} * c.n_heads * c.head_dim);
  for (float& x : k) x = normal(random);
  for (float& x : q) x = 2.0f * normal(random);
  std::vector<int32_t> table(pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), random);

  AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim};
  AttentionSequence seq;
  seq.q = q.data();
  seq.n_queries = c.n_queries;
  seq.start_pos = c.start_pos;
  seq.kv = PlainPagedKv(k.data(), v.data(), table.data(), page_size, page_floats, c.head_dim);
  std::vector<float> bias(n_keys, 0.0f);
  for (int t = 0; t < n_keys && biased; t += 3) bias[t] = 0.4f * static_cast<float>(t % 5);
  if (biased) seq.token_bias = bias.data();
  ThreadPool pool(c.threads);
  std::vector<float> workspace(
      AttentionImportanceWorkspaceFloats(shape, c.threads, n_keys, page_size));
  const int64_t ld = n_keys + 3;  // rows with room beyond the keys, which stays untouched
  std::vector<float> importance(c.n_kv_heads * ld, 0.5f);  // adds to what is there
  AttentionImportance(pool, shape, seq, importance, ld, workspace);

  const int group = c.n_heads / c.n_kv_heads;
  std::vector<double> expected(importance.size(), 0.5);  // [n_kv_heads, ld]
  for (int i = 0; i < c.n_queries; ++i) {
    const int n = c.start_pos + i + 1;
    for (int h = 0; h < c.n_heads; ++h) {
      const int g = h / group;
      std::vector<double> s(n);
      for (int t = 0; t < n; ++t) {
        const float* key = k.data() + table[t / page_size] * page_floats +
                           (int64_t{g} * page_size + t % page_size) * c.head_dim;
        const float* query = q.data() + (int64_t{i} * c.n_heads + h) * c.head_dim;
        double dot = 0.0;
        for (int d = 0; d < c.head_dim; ++d) dot += double{query[d]} * key[d];
        s[t] = dot / std::sqrt(double{1.0 * c.head_dim}) + bias[t];
      }
      const double top = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& x : s) sum += (x = std::exp(x - top));
      for (int t = 0; t < n; ++t) expected[g * ld + t] += s[t] / sum / group;
    }
  }
  for (int g = 0; g < c.n_kv_heads; ++g) {
    double row_sum = 0.0;
    for (int t = 0; t < ld; ++t) {
      const int64_t at = g * ld + t;
      EXPECT_NEAR(importance[at], expected[at], 2e-5) << "head " << g << " token " << t;
      row_sum += importance[at] - 0.5;
    }
    EXPECT_NEAR(row_sum, c.n_queries, 1e-3) << "head " << g;
  }
}

class AttentionImportanceTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionImportanceTest, MatchesTheOracle) {
  CheckAgainstTheOracle(GetParam(), /*biased=*/false);
  CheckAgainstTheOracle(GetParam(), /*biased=*/true);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionImportanceTest,
                         ::testing::Values(Case{4, 4, 16, 0, 5, 1}, Case{4, 2, 16, 37, 6, 2},
                                           Case{8, 2, 32, 70, 3, 2}, Case{6, 3, 8, 1, 1, 1},
                                           // 16 queries or more: the panel path, in chunks.
                                           Case{4, 4, 16, 0, 16, 1}, Case{6, 3, 8, 3, 17, 2},
                                           Case{8, 2, 32, 70, 33, 2}, Case{4, 4, 64, 45, 70, 2},
                                           Case{12, 12, 64, 200, 32, 2}));

}  // namespace
}  // namespace pdserve::kernels
