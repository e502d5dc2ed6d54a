// Test-only: how far an engine's logits are from a reference's, as engine tests measure it.
#ifndef PDSERVE_CORE_ENGINE_LOGITS_TESTING_H_
#define PDSERVE_CORE_ENGINE_LOGITS_TESTING_H_

#include <algorithm>
#include <cmath>
#include <span>

#include "gtest/gtest.h"

namespace pdserve {

// The largest |got − want| relative to the largest |want|. Fails the current test when the sizes
// differ or `want` is all zeros (which would make any comparison pass).
inline double MaxRelativeError(std::span<const float> got, std::span<const float> want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    diff = std::max(diff, std::abs(double{got[i]} - want[i]));
    scale = std::max(scale, std::abs(double{want[i]}));
  }
  EXPECT_GT(scale, 0.0) << "all-zero reference logits";
  return diff / std::max(scale, 1e-30);
}

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_LOGITS_TESTING_H_
