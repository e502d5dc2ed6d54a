#include "kernels/cuda/gemm.h"

#include <climits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"

namespace pdserve::kernels::cuda {
namespace {

// cuBLAS's workspace, set once at Create so that no call allocates: 32 MiB, what the cuBLAS
// documentation recommends for Hopper.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

absl::Status CublasStatus(const CublasLibrary& cublas, cublasStatus_t status, const char* call,
                          const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, " failed at ", file, ":", line, ": ",
                                          cublas.status_name(status), " (",
                                          cublas.status_string(status), ")"));
}

// `expr` calls a function of the CublasLibrary `cublas` in scope.
#define PDSERVE_CUBLAS_RETURN_IF_ERROR(expr)                         \
  do {                                                               \
    const absl::Status pdserve_cublas_status_ =                      \
        CublasStatus(cublas, (expr), #expr, __FILE__, __LINE__);     \
    if (!pdserve_cublas_status_.ok()) return pdserve_cublas_status_; \
  } while (0)

cudaDataType_t CudaType(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF32:
    default:  // the GPU runs plain dtypes only
      break;
  }
  return CUDA_R_32F;
}

}  // namespace

struct Gemm::State {
  const CublasLibrary* cublas = nullptr;
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
  int64_t max_n = 0;
  int64_t max_cols = 0;
  DeviceBuffer<uint16_t> x16;  // [max_n, max_cols]: x narrowed to a 16-bit weight's dtype
  DeviceBuffer<std::byte> cublas_workspace;

  ~State() {
    if (handle != nullptr) cublas->destroy(handle);  // before the workspace it uses is freed
  }
};

Gemm::Gemm(std::unique_ptr<State> state) : state_(std::move(state)) {}
Gemm::~Gemm() = default;

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::Create(cudaStream_t stream, int64_t max_n,
                                                   int64_t max_cols) {
  if (max_n < 0 || max_cols < 0 || max_n > INT_MAX || max_cols > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm sizes out of range: max_n ", max_n, ", max_cols ", max_cols));
  }
  absl::StatusOr<const CublasLibrary*> library = LoadCublas();
  if (!library.ok()) return library.status();
  const CublasLibrary& cublas = **library;
  auto state = std::make_unique<State>();
  state->cublas = &cublas;
  state->stream = stream;
  state->max_n = max_n;
  state->max_cols = max_cols;
  auto x16 = DeviceBuffer<uint16_t>::Allocate(static_cast<size_t>(max_n * max_cols));
  if (!x16.ok()) return x16.status();
  state->x16 = *std::move(x16);
  auto workspace = DeviceBuffer<std::byte>::Allocate(kCublasWorkspaceBytes);
  if (!workspace.ok()) return workspace.status();
  state->cublas_workspace = *std::move(workspace);
  PDSERVE_CUBLAS_RETURN_IF_ERROR(cublas.create(&state->handle));
  // cublasSetStream resets the workspace to cuBLAS's own pool, so the workspace comes after it.
  PDSERVE_CUBLAS_RETURN_IF_ERROR(cublas.set_stream(state->handle, stream));
  PDSERVE_CUBLAS_RETURN_IF_ERROR(cublas.set_workspace(state->handle, state->cublas_workspace.data(),
                                                      state->cublas_workspace.bytes()));
  return std::unique_ptr<Gemm>(new Gemm(std::move(state)));
}

// Row-major y[n, rows] = x[n, cols] · Wᵀ is column-major C (rows × n) = op(A) · B with A = W seen
// column-major (cols × rows, lda = cols, op = transpose) and B = x seen column-major (cols × n,
// ldb = cols); ldc = rows.
absl::Status Gemm::Run(const float* x, int64_t n, const DeviceMatrix& w, float* y) {
  State& s = *state_;
  const CublasLibrary& cublas = *s.cublas;
  if (n < 0 || n > s.max_n || w.cols <= 0 || w.cols > s.max_cols || w.rows <= 0 ||
      w.rows > INT_MAX || w.data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm::Run: n ", n, " of at most ", s.max_n,
                                                   ", matrix [", w.rows, ", ", w.cols,
                                                   "] with at most ", s.max_cols, " columns"));
  }
  if (n == 0) return absl::OkStatus();
  const int m = static_cast<int>(w.rows), k = static_cast<int>(w.cols);
  const int batch = static_cast<int>(n);
  const float alpha = 1.0f, beta = 0.0f;
  const void* b = x;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F_PEDANTIC;  // f32: no TF32, no reduced precision
  if (w.dtype != DType::kF32) {
    ConvertF32To16(x, n * w.cols, w.dtype, s.x16.data(), s.stream);
    PDSERVE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    b = s.x16.data();
    compute = CUBLAS_COMPUTE_32F;  // 16-bit inputs on tensor cores, fp32 accumulation
  }
  const cudaDataType_t type = CudaType(w.dtype);
  PDSERVE_CUBLAS_RETURN_IF_ERROR(cublas.gemm_ex(s.handle, CUBLAS_OP_T, CUBLAS_OP_N, m, batch, k,
                                                &alpha, w.data, type, k, b, type, k, &beta, y,
                                                CUDA_R_32F, m, compute, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace pdserve::kernels::cuda
