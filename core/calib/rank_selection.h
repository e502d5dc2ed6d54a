// ZACK rank selection: how many leading basis dimensions of a KV head to keep for a removal rate ρ
// (the fraction of the spectrum's singular-value mass allowed to be dropped), and the ρ that meets
// a target kept fraction of the cache over all heads. Pure functions; thread-safe.
#ifndef PDSERVE_CORE_CALIB_RANK_SELECTION_H_
#define PDSERVE_CORE_CALIB_RANK_SELECTION_H_

#include <span>

#include "absl/status/statusor.h"

namespace pdserve {

// The rank r ∈ [1, d] to keep of a spectrum of d = eigenvalues.size() Gram eigenvalues, sorted
// descending (eigenvalue = squared singular value; negative and non-finite ones count as 0). With
// singular values s_i = √λ_i, r is the smallest r ≥ 1 whose dropped mass Σ_{i≥r} s_i / Σ_i s_i ≤ ρ
// (0-based i). Special cases: ρ ≤ 0 (or NaN) keeps every dimension, r = d, even when trailing s_i
// are exactly zero (so ρ = 0 means no compression); for ρ > 0, ρ ≥ 1 and an all-zero spectrum
// give 1; an empty spectrum gives 0.
// Non-increasing in ρ.
int RankForRemovalRate(std::span<const double> eigenvalues, double rho);

// `rank` rounded up to a multiple of `multiple`, at most d: a head's rank in whole vectors of
// `multiple` elements, which the decode kernels read without a partial last vector, and never below
// `rank`, so the head drops no more of its mass than the rank allowed. `multiple` ≤ 1 returns rank.
int RoundRankUpToMultiple(int rank, int d, int multiple);

// One head's spectrum and the cost of one kept dimension (e.g. bytes per token; equal weights
// count dimensions).
struct WeightedSpectrum {
  std::span<const double> eigenvalues;  // descending, d ≥ 1
  double weight = 1.0;                  // > 0
};

// Σ_h weight_h·r_h / Σ_h weight_h·d_h with r_h = RoundRankUpToMultiple(RankForRemovalRate(h, ρ),
// d_h, multiple): the kept fraction of the cache at ρ. Non-increasing in ρ; 1 at ρ = 0. Requires
// non-empty spectra with positive weights.
double KeptFraction(std::span<const WeightedSpectrum> spectra, double rho, int multiple = 1);

// The smallest ρ ∈ [0, 1] with KeptFraction(spectra, ρ, multiple) ≤ kept_fraction. Exact: the kept
// fraction only changes where some head's dropped mass equals ρ, so this is a binary search over
// those breakpoints (ρ = the smallest positive double where dropping exactly-zero tails is what is
// needed). InvalidArgument when kept_fraction ∉ (0, 1], the list or a spectrum is empty, an
// eigenvalue or weight is not finite, a weight is ≤ 0, or the target is unattainable (the smallest
// rank, 1 rounded up to `multiple`, in every head keeps more than kept_fraction; the message says
// how much).
absl::StatusOr<double> RemovalRateForTarget(std::span<const WeightedSpectrum> spectra,
                                            double kept_fraction, int multiple = 1);

}  // namespace pdserve

#endif  // PDSERVE_CORE_CALIB_RANK_SELECTION_H_
