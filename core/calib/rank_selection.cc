#include "core/calib/rank_selection.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

// dropped[r] = Σ_{i≥r} s_i / Σ_i s_i for r ∈ [0, d] (so dropped[0] = 1, dropped[d] = 0), with
// s_i = √λ_i; empty when every s_i is 0. Non-increasing in r: the suffix sums add non-negative
// terms. RankForRemovalRate and the breakpoints of RemovalRateForTarget both come from here, so
// comparing a breakpoint with itself is exact.
std::vector<double> DroppedMass(std::span<const double> eigenvalues) {
  const size_t d = eigenvalues.size();
  std::vector<double> tail(d + 1, 0.0);
  for (size_t i = d; i-- > 0;) {
    const double lambda = eigenvalues[i];
    const double s = lambda > 0.0 && std::isfinite(lambda) ? std::sqrt(lambda) : 0.0;
    tail[i] = tail[i + 1] + s;
  }
  const double total = tail[0];
  if (!(total > 0.0)) return {};
  for (double& t : tail) t /= total;
  return tail;
}

int RankOf(const std::vector<double>& dropped, int d, double rho) {
  if (d == 0) return 0;
  if (!(rho > 0.0)) return d;
  if (rho >= 1.0 || dropped.empty()) return 1;
  for (int r = 1; r < d; ++r) {
    if (dropped[r] <= rho) return r;
  }
  return d;
}

absl::Status CheckSpectra(std::span<const WeightedSpectrum> spectra) {
  if (spectra.empty()) return absl::InvalidArgumentError("rank selection: no spectra");
  for (size_t h = 0; h < spectra.size(); ++h) {
    const WeightedSpectrum& spectrum = spectra[h];
    if (spectrum.eigenvalues.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("rank selection: spectrum ", h, " is empty"));
    }
    if (!(spectrum.weight > 0.0) || !std::isfinite(spectrum.weight)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank selection: spectrum ", h, " has weight ", spectrum.weight));
    }
    for (double lambda : spectrum.eigenvalues) {
      if (!std::isfinite(lambda)) {
        return absl::InvalidArgumentError(
            absl::StrCat("rank selection: spectrum ", h, " has a non-finite eigenvalue"));
      }
    }
  }
  return absl::OkStatus();
}

// Every ρ where some head's rank changes, plus 0 and 1, sorted and unique.
std::vector<double> Breakpoints(std::span<const WeightedSpectrum> spectra) {
  std::vector<double> rhos = {0.0, 1.0};
  for (const WeightedSpectrum& spectrum : spectra) {
    const std::vector<double> dropped = DroppedMass(spectrum.eigenvalues);
    if (dropped.empty()) {
      rhos.push_back(std::numeric_limits<double>::denorm_min());  // all-zero: any ρ > 0 → 1
      continue;
    }
    for (size_t r = 1; r < spectrum.eigenvalues.size(); ++r) {
      rhos.push_back(std::max(dropped[r], std::numeric_limits<double>::denorm_min()));
    }
  }
  std::sort(rhos.begin(), rhos.end());
  rhos.erase(std::unique(rhos.begin(), rhos.end()), rhos.end());
  return rhos;
}

}  // namespace

int RankForRemovalRate(std::span<const double> eigenvalues, double rho) {
  return RankOf(DroppedMass(eigenvalues), static_cast<int>(eigenvalues.size()), rho);
}

int RoundRankUpToMultiple(int rank, int d, int multiple) {
  if (multiple <= 1) return rank;
  const int64_t up = (int64_t{rank} + multiple - 1) / multiple * multiple;
  return static_cast<int>(std::min<int64_t>(up, d));
}

double KeptFraction(std::span<const WeightedSpectrum> spectra, double rho, int multiple) {
  double kept = 0.0;
  double total = 0.0;
  for (const WeightedSpectrum& spectrum : spectra) {
    const int d = static_cast<int>(spectrum.eigenvalues.size());
    kept += spectrum.weight *
            RoundRankUpToMultiple(RankForRemovalRate(spectrum.eigenvalues, rho), d, multiple);
    total += spectrum.weight * d;
  }
  return total > 0.0 ? kept / total : 1.0;
}

absl::StatusOr<double> RemovalRateForTarget(std::span<const WeightedSpectrum> spectra,
                                            double kept_fraction, int multiple) {
  if (!(kept_fraction > 0.0 && kept_fraction <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank selection: kept fraction ", kept_fraction, " not in (0, 1]"));
  }
  absl::Status status = CheckSpectra(spectra);
  if (!status.ok()) return status;
  const double floor = KeptFraction(spectra, 1.0, multiple);
  if (floor > kept_fraction) {
    return absl::InvalidArgumentError(absl::StrCat("rank selection: kept fraction ", kept_fraction,
                                                   " unattainable; rank ", std::max(1, multiple),
                                                   " in every head keeps ", floor));
  }
  const std::vector<double> rhos = Breakpoints(spectra);
  // KeptFraction is non-increasing in ρ: find the first breakpoint that meets the target.
  auto first = std::partition_point(rhos.begin(), rhos.end(), [&](double rho) {
    return KeptFraction(spectra, rho, multiple) > kept_fraction;
  });
  return first == rhos.end() ? 1.0 : *first;
}

}  // namespace pdserve
