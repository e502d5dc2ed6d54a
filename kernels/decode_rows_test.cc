// The fused decode row kernels (kernels/cpu/decode_rows.h), each instruction set's directly,
// against a double-precision sum of the exactly decoded elements: f32 and f16 rows and FP8 codes
// with per-row and per-page scales, widths around every vector boundary (masked and scalar tails),
// row counts around the 8-row score blocks, query counts around each set's register passes, and
// pages holding NaN codes (the scalar path).
#include "kernels/cpu/decode_rows.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tensor/float16.h"
#include "gtest/gtest.h"
#include "kernels/cpu_features.h"
#include "kernels/fp8.h"

namespace pdserve::kernels {
namespace {

struct Kernels {
  std::string name;
  const DecodeRowKernels* set;
};

std::vector<Kernels> AvailableKernels() {
  std::vector<Kernels> sets = {{"avx2", &avx2::kDecodeRows}};
  if (GetCpuFeatures().avx512) sets.push_back({"avx512", &avx512::kDecodeRows});
  return sets;
}

// One page's rows with their exact values, and nq query rows with weights.
struct Page {
  Page(int count, int dim, RowFormat format, int scale_step, int nq, uint32_t seed)
      : count(count), dim(dim), nq(nq) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    exact.resize(static_cast<size_t>(count) * dim);
    const bool e4m3 = format == RowFormat::kE4M3;
    if (e4m3) {
      codes.resize(exact.size());
      scales.resize(static_cast<size_t>(count));
      for (int r = 0; r < count; ++r) scales[r] = 0.001f + 0.01f * (r % 5);
      for (size_t i = 0; i < codes.size(); ++i) {
        // Every finite code, subnormals (exponent 0) included.
        do {
          codes[i] = static_cast<uint8_t>(rng());
        } while ((codes[i] & 0x7F) == 0x7F);
        const int r = static_cast<int>(i) / dim;
        exact[i] = double{E4M3ToFloat(codes[i])} * scales[scale_step == 0 ? 0 : r];
      }
    } else if (format == RowFormat::kF16) {
      halves.resize(exact.size());
      for (size_t i = 0; i < halves.size(); ++i) {
        halves[i] = F32ToF16(unit(rng));
        exact[i] = F16ToF32(halves[i]);
      }
    } else {
      floats.resize(exact.size());
      for (size_t i = 0; i < floats.size(); ++i) exact[i] = floats[i] = unit(rng);
    }
    rows.data = e4m3                        ? codes.data()
                : format == RowFormat::kF16 ? reinterpret_cast<const uint8_t*>(halves.data())
                                            : reinterpret_cast<const uint8_t*>(floats.data());
    rows.count = count;
    rows.dim = dim;
    rows.format = format;
    rows.scales = e4m3 ? scales.data() : nullptr;
    rows.scale_step = scale_step;
    q.resize(static_cast<size_t>(nq) * dim);
    for (float& x : q) x = unit(rng);
    w.resize(static_cast<size_t>(nq) * ld());
    for (float& x : w) x = (unit(rng) + 1.0f) / 2.0f;
  }

  int64_t ld() const { return count + 3; }  // rows of scores and weights, with a gap
  std::vector<const float*> QueryRows() const {
    std::vector<const float*> p;
    for (int j = 0; j < nq; ++j) p.push_back(q.data() + int64_t{j} * dim);
    return p;
  }

  int count, dim, nq;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> halves;
  std::vector<float> floats, scales, q, w;
  std::vector<double> exact;
  PageRows rows;
};

// fp32 rounding of a sum of `terms` products (and the scale products) whose magnitudes add up
// to `mag`.
double Tolerance(int terms, double mag) { return 1.2e-7 * (terms + 4) * mag + 1e-30; }

struct Shape {
  int count, dim, nq;
};

std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  for (int count : {1, 7, 8, 9, 16}) {
    // Whole vectors of either lane width (8, 16, 24, 32, 48, 64, 128) take the kernels compiled
    // for that many vectors; the others read the dimension at run time.
    for (int dim : {1, 7, 8, 9, 16, 17, 24, 25, 31, 32, 33, 48, 49, 61, 63, 64, 70, 125, 128}) {
      for (int nq : {1, 2, 3, 4, 5, 7, 16}) shapes.push_back({count, dim, nq});
    }
  }
  return shapes;
}

// (format, scale_step): f32, f16, FP8 per row, FP8 per page.
const std::pair<RowFormat, int> kFormats[] = {
    {RowFormat::kF32, 0}, {RowFormat::kF16, 0}, {RowFormat::kE4M3, 1}, {RowFormat::kE4M3, 0}};

// Calls check(kernels, shape, page) for every kernel set, format and shape, on a page seeded
// from the shape and `seed`.
template <typename Check>
void ForEveryCase(uint32_t seed, Check check) {
  for (const Kernels& k : AvailableKernels()) {
    for (auto [format, step] : kFormats) {
      for (const Shape& s : Shapes()) {
        SCOPED_TRACE(absl::StrCat(k.name, " format ", static_cast<int>(format), " step ", step,
                                  " count ", s.count, " dim ", s.dim, " nq ", s.nq));
        Page page(s.count, s.dim, format, step, s.nq, seed + s.count * 1000 + s.dim * 10 + s.nq);
        check(k, s, page);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(DecodeRowsTest, ScoresMatchExactDots) {
  ForEveryCase(0, [](const Kernels& k, const Shape& s, Page& page) {
    const float scale = 0.125f;
    std::vector<float> scores(page.w.size(), -7.0f);
    k.set->score(page.QueryRows().data(), s.nq, page.rows, scale, scores.data(), page.ld());
    for (int j = 0; j < s.nq; ++j) {
      for (int r = 0; r < page.ld(); ++r) {
        const float got = scores[j * page.ld() + r];
        if (r >= s.count) {
          ASSERT_EQ(got, -7.0f) << "wrote past the page's rows";
          continue;
        }
        double dot = 0.0, mag = 0.0;
        for (int c = 0; c < s.dim; ++c) {
          dot += double{page.q[j * s.dim + c]} * page.exact[r * s.dim + c];
          mag += std::abs(double{page.q[j * s.dim + c]} * page.exact[r * s.dim + c]);
        }
        ASSERT_NEAR(got, dot * scale, Tolerance(s.dim, mag * scale))
            << "query " << j << " row " << r;
      }
    }
  });
}

TEST(DecodeRowsTest, AccumulationMatchesExactWeightedSums) {
  ForEveryCase(7, [](const Kernels& k, const Shape& s, Page& page) {
    // Output rows start non-zero (the kernel adds) and have a guard float after them.
    std::vector<float> out(static_cast<size_t>(s.nq) * (s.dim + 1));
    for (size_t i = 0; i < out.size(); ++i) out[i] = 0.5f * static_cast<float>(i % 3);
    const std::vector<float> before = out;
    std::vector<float*> rows_out;
    for (int j = 0; j < s.nq; ++j) rows_out.push_back(out.data() + int64_t{j} * (s.dim + 1));
    k.set->accumulate(page.w.data(), page.ld(), s.nq, page.rows, rows_out.data());
    for (int j = 0; j < s.nq; ++j) {
      for (int c = 0; c < s.dim; ++c) {
        double sum = before[j * (s.dim + 1) + c], mag = std::abs(sum);
        for (int r = 0; r < s.count; ++r) {
          const double term = double{page.w[j * page.ld() + r]} * page.exact[r * s.dim + c];
          sum += term;
          mag += std::abs(term);
        }
        ASSERT_NEAR(rows_out[j][c], sum, Tolerance(s.count, mag)) << "query " << j << " col " << c;
      }
      ASSERT_EQ(rows_out[j][s.dim], before[j * (s.dim + 1) + s.dim]) << "wrote past the row";
    }
  });
}

// A NaN code poisons exactly the scores of its row and every output it is weighted into, as the
// table decoding does; the page's other rows still score exactly. The code sits first, inside the
// page, and last (in the tail a whole vector does not cover, on either instruction set), in rows
// read a vector at a time (40 dimensions) and in whole pairs of vectors (32 and 64), in blocks of
// 8 rows and alone (17 rows), for one query and for several.
TEST(DecodeRowsTest, NanCodesPropagate) {
  constexpr int kRows = 17;
  for (const Kernels& k : AvailableKernels()) {
    for (int dim : {40, 32, 64}) {
      for (int nq : {1, 2}) {
        for (uint8_t nan : {uint8_t{0x7F}, uint8_t{0xFF}}) {
          for (int at : {0, 3 * dim + 17, 9 * dim + 5, kRows * dim - 1}) {
            SCOPED_TRACE(absl::StrCat(k.name, " dim ", dim, " queries ", nq, " code ", int{nan},
                                      " at ", at));
            Page page(kRows, dim, RowFormat::kE4M3, 1, nq, 5);
            page.codes[at] = nan;
            std::vector<float> scores(page.w.size());
            k.set->score(page.QueryRows().data(), nq, page.rows, 1.0f, scores.data(), page.ld());
            for (int j = 0; j < nq; ++j) {
              for (int r = 0; r < kRows; ++r) {
                ASSERT_EQ(std::isnan(scores[j * page.ld() + r]), r == at / dim)
                    << "query " << j << " row " << r;
              }
            }
            std::vector<float> out(static_cast<size_t>(nq) * dim, 0.0f);
            std::vector<float*> rows_out;
            for (int j = 0; j < nq; ++j) rows_out.push_back(out.data() + int64_t{j} * dim);
            k.set->accumulate(page.w.data(), page.ld(), nq, page.rows, rows_out.data());
            for (int j = 0; j < nq; ++j) {
              for (int c = 0; c < dim; ++c) {
                ASSERT_EQ(std::isnan(rows_out[j][c]), c == at % dim)
                    << "query " << j << " col " << c;
              }
            }
          }
        }
      }
    }
  }
}

// Both sets compute the same values (they may round differently, never more than the format).
TEST(DecodeRowsTest, InstructionSetsAgree) {
  if (!GetCpuFeatures().avx512) GTEST_SKIP() << "CPU lacks AVX-512 F/BW/VL/DQ";
  Page page(16, 64, RowFormat::kE4M3, 1, 4, 11);
  std::vector<float> a(page.w.size()), b(page.w.size());
  avx2::kDecodeRows.score(page.QueryRows().data(), 4, page.rows, 1.0f, a.data(), page.ld());
  avx512::kDecodeRows.score(page.QueryRows().data(), 4, page.rows, 1.0f, b.data(), page.ld());
  for (int j = 0; j < 4; ++j) {
    for (int r = 0; r < 16; ++r) {
      EXPECT_NEAR(a[j * page.ld() + r], b[j * page.ld() + r],
                  1e-5 * std::abs(a[j * page.ld() + r]) + 1e-7);
    }
  }
}

}  // namespace
}  // namespace pdserve::kernels
