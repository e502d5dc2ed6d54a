// ProjectRows: coordinates of a vector in an orthonormal basis, out[i] = basis_i · x — how ZACK
// compresses post-RoPE queries and keys (one basis of `rank` rows of `dim` floats per KV head).
#ifndef PDSERVE_KERNELS_BASIS_PROJECTION_H_
#define PDSERVE_KERNELS_BASIS_PROJECTION_H_

namespace pdserve::kernels {

// basis: [rank, dim] row-major; x: dim floats; out: rank floats (must not alias x).
void ProjectRows(const float* basis, int rank, int dim, const float* x, float* out);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_BASIS_PROJECTION_H_
