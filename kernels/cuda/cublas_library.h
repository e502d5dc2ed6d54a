// cuBLAS, loaded on first use: the functions pdserve calls, resolved with dlopen from the toolkit's
// libcublas.so.<major>. A process that never creates a CUDA engine never loads cuBLAS, which with
// its cublasLt would otherwise cost every pdserve process ~145 MB of resident memory at start.
#ifndef PDSERVE_KERNELS_CUDA_CUBLAS_LIBRARY_H_
#define PDSERVE_KERNELS_CUDA_CUBLAS_LIBRARY_H_

#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace pdserve::kernels::cuda {

struct CublasLibrary {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  // cublasGemmEx's 32-bit signature (C++ also declares an int64_t overload).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t);
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
};

// The library, loaded once per process (thread-safe) and never unloaded. FailedPrecondition
// naming the library and the loader's reason when it or one of its functions cannot be found.
absl::StatusOr<const CublasLibrary*> LoadCublas();

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_CUBLAS_LIBRARY_H_
