#include "kernels/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace pdserve::kernels::cuda {
namespace {

absl::StatusOr<CublasLibrary> Load() {
  // The soname first (found through the binary's run path or the loader's paths), then the
  // toolkit the build used.
  void* handle = nullptr;
  std::string errors;
  for (const char* path : {PDSERVE_CUBLAS_SONAME, PDSERVE_CUBLAS_PATH}) {
    handle = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", ::dlerror());
  }
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load cuBLAS (", PDSERVE_CUBLAS_SONAME, "): ", errors));
  }
  CublasLibrary lib;
  absl::Status missing;
  auto resolve = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
    if (fn == nullptr && missing.ok()) {
      missing = absl::FailedPreconditionError(
          absl::StrCat(PDSERVE_CUBLAS_SONAME, " has no ", name, ": ", ::dlerror()));
    }
  };
  resolve(lib.create, "cublasCreate_v2");
  resolve(lib.destroy, "cublasDestroy_v2");
  resolve(lib.set_stream, "cublasSetStream_v2");
  resolve(lib.set_workspace, "cublasSetWorkspace_v2");
  resolve(lib.gemm_ex, "cublasGemmEx");
  resolve(lib.status_name, "cublasGetStatusName");
  resolve(lib.status_string, "cublasGetStatusString");
  if (!missing.ok()) return missing;
  return lib;
}

}  // namespace

absl::StatusOr<const CublasLibrary*> LoadCublas() {
  static const absl::StatusOr<CublasLibrary>* const library =
      new absl::StatusOr<CublasLibrary>(Load());
  if (!library->ok()) return library->status();
  return &library->value();
}

}  // namespace pdserve::kernels::cuda
