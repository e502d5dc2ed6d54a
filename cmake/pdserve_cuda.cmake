# Optional CUDA: PDSERVE_CUDA=AUTO enables the CUDA language when a toolkit is found
# (/usr/local/cuda on the build machines), ON requires it, OFF skips it. No GPU is ever required
# to build; GPU tests (ctest label `gpu`) skip without a device. Every CUDA target is compiled for
# sm_90 (H100/H200) unless PDSERVE_CUDA_ARCHITECTURES says otherwise.
set(PDSERVE_HAVE_CUDA OFF)
set(PDSERVE_CUDA_ARCHITECTURES 90 CACHE STRING "CUDA architectures of every CUDA target")
if(NOT PDSERVE_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # One CUDA runtime in a process: the shared one, as cuBLAS and CUDA::cudart use.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    # CMake 3.25 does not know that nvcc 13 speaks C++20; tell it.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(PDSERVE_HAVE_CUDA ON)
    message(STATUS "pdserve: CUDA toolkit ${CUDAToolkit_VERSION} found; CUDA targets enabled "
                   "for sm_${PDSERVE_CUDA_ARCHITECTURES}")
  elseif(PDSERVE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "PDSERVE_CUDA=ON but no CUDA compiler was found")
  else()
    message(STATUS "pdserve: no CUDA toolkit; CUDA targets disabled")
  endif()
endif()

# Flags of CUDA sources: warnings are errors as in C++, line info for compute-sanitizer and
# profilers. Host C++ sources of a CUDA target get the project's usual flags.
set(PDSERVE_CUDA_FLAGS --Werror all-warnings -Xcompiler=-Wall,-Wextra -lineinfo
                       --expt-relaxed-constexpr)

# pdserve_cuda_library(NAME name SRCS ... [HDRS ...] [DEPS ...]): .cu sources through nvcc, .cc
# through g++; links the CUDA runtime. Only call when PDSERVE_HAVE_CUDA.
function(pdserve_cuda_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;HDRS;DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SRCS} ${ARG_HDRS})
  target_compile_options(${ARG_NAME} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${PDSERVE_BASE_ARCH_FLAGS} ${PDSERVE_WARNING_FLAGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:${PDSERVE_CUDA_FLAGS}>)
  target_include_directories(${ARG_NAME} PUBLIC ${PROJECT_SOURCE_DIR})
  set_target_properties(${ARG_NAME} PROPERTIES CUDA_ARCHITECTURES "${PDSERVE_CUDA_ARCHITECTURES}"
                                               POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS} CUDA::cudart)
  add_library(pdserve::${ARG_NAME} ALIAS ${ARG_NAME})
endfunction()
