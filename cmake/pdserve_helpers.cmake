# pdserve_cc_library / pdserve_cc_test / pdserve_cc_benchmark: one declarative target per concept.
#
# The whole project targets x86-64-v3 (AVX2, FMA, F16C): the binaries require AVX2. Kernels that
# use AVX-512 live in their own sources compiled with PDSERVE_AVX512_FLAGS (PDSERVE_AVX512_VNNI_FLAGS
# for those that also need VNNI and VBMI, PDSERVE_AVX512_BF16_FLAGS for AVX512_BF16, PDSERVE_AMX_FLAGS
# for AMX tiles) and are chosen
# at run time (kernels/cpu/cpu_features.h).

set(PDSERVE_BASE_ARCH_FLAGS -march=x86-64-v3 -mtune=generic)
# gcc 12 warns falsely inside its own avx512fintrin.h (_mm512_undefined_*), hence the -Wno-s.
set(PDSERVE_AVX512_FLAGS -march=x86-64-v4 -mtune=generic -Wno-uninitialized
    $<$<CXX_COMPILER_ID:GNU>:-Wno-maybe-uninitialized>)
set(PDSERVE_AVX512_VNNI_FLAGS ${PDSERVE_AVX512_FLAGS} -mavx512vnni -mavx512vbmi)
set(PDSERVE_AVX512_BF16_FLAGS ${PDSERVE_AVX512_FLAGS} -mavx512bf16)
set(PDSERVE_AMX_FLAGS ${PDSERVE_AVX512_BF16_FLAGS} -mamx-tile -mamx-bf16 -mamx-int8)
set(PDSERVE_WARNING_FLAGS -Wall -Wextra -Werror)
# Clang checks every ABSL_GUARDED_BY field and lock requirement (core/base/mutex.h).
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  list(APPEND PDSERVE_WARNING_FLAGS -Wthread-safety)
endif()

if(PDSERVE_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
if(PDSERVE_TSAN)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()

function(_pdserve_common target)
  target_compile_options(${target} PRIVATE ${PDSERVE_BASE_ARCH_FLAGS} ${PDSERVE_WARNING_FLAGS})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
endfunction()

# pdserve_cc_library(NAME name SRCS ... [HDRS ...] [DEPS ...] [AVX512_SRCS ...]
#                    [AVX512_VNNI_SRCS ...] [AVX512_BF16_SRCS ...] [AMX_SRCS ...])
function(pdserve_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;HDRS;DEPS;AVX512_SRCS;AVX512_VNNI_SRCS;AVX512_BF16_SRCS;AMX_SRCS" ${ARGN})
  if(ARG_SRCS OR ARG_AVX512_SRCS)
    add_library(${ARG_NAME} STATIC ${ARG_SRCS} ${ARG_AVX512_SRCS} ${ARG_AVX512_VNNI_SRCS}
                ${ARG_AVX512_BF16_SRCS} ${ARG_AMX_SRCS} ${ARG_HDRS})
    _pdserve_common(${ARG_NAME})
    target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS})
    if(ARG_AVX512_SRCS)
      set_source_files_properties(${ARG_AVX512_SRCS} TARGET_DIRECTORY ${ARG_NAME}
        PROPERTIES COMPILE_OPTIONS "${PDSERVE_AVX512_FLAGS}")
    endif()
    if(ARG_AVX512_VNNI_SRCS)
      set_source_files_properties(${ARG_AVX512_VNNI_SRCS} TARGET_DIRECTORY ${ARG_NAME}
        PROPERTIES COMPILE_OPTIONS "${PDSERVE_AVX512_VNNI_FLAGS}")
    endif()
    if(ARG_AVX512_BF16_SRCS)
      set_source_files_properties(${ARG_AVX512_BF16_SRCS} TARGET_DIRECTORY ${ARG_NAME}
        PROPERTIES COMPILE_OPTIONS "${PDSERVE_AVX512_BF16_FLAGS}")
    endif()
    if(ARG_AMX_SRCS)
      set_source_files_properties(${ARG_AMX_SRCS} TARGET_DIRECTORY ${ARG_NAME}
        PROPERTIES COMPILE_OPTIONS "${PDSERVE_AMX_FLAGS}")
    endif()
  else()
    add_library(${ARG_NAME} INTERFACE ${ARG_HDRS})
    target_include_directories(${ARG_NAME} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${ARG_NAME} INTERFACE ${ARG_DEPS})
  endif()
  add_library(pdserve::${ARG_NAME} ALIAS ${ARG_NAME})
endfunction()

# What the tsan preset builds and runs (label "tsan"): the concurrent code — the services, the
# transports, the thread pool and locks — and clusters of real processes built with TSan.
set(PDSERVE_TSAN_TESTS base_test admission_queue_test http_server_test service_server_test
    kvstore_test prefill_test
    decode_worker_test remote_value_tier_test worker_registry_test api_key_gate_test
    router_service_test openai_api_test fake_transport_test ucx_transport_test cluster_test
    fail_closed_test drain_test tls_integration_test overload_test loadgen_integration_test)

# What every test source compiles with: the common flags, where the sources and shared data are,
# -pthread (which defines _REENTRANT: one macro set for the precompiled header and every test),
# and with GCC -Og (Release and ASan alike): the code under test is in the libraries, built at
# their own level; a test's own code gains little from -O3 (or from ASan's -O1) and took twice as
# long to compile. (Clang, the tsan preset, keeps its -O1, which is what its -Og means.)
function(_pdserve_test_common target)
  _pdserve_common(${target})
  target_compile_options(${target} PRIVATE -pthread
    $<$<AND:$<CXX_COMPILER_ID:GNU>,$<NOT:$<CONFIG:Debug>>>:-Og>)
  target_compile_definitions(${target} PRIVATE
    PDSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    PDSERVE_SHARED_DIR="${PDSERVE_SHARED_DIR}"
    PDSERVE_BINARY_DIR="${PROJECT_BINARY_DIR}")
endfunction()

# pdserve_test_pch(): the one precompiled header (tests/pch/test_pch.h) every test reuses, built
# with the tests' flags. GCC only: GCC ignores a consumer's extra macros the header never names,
# where Clang refuses them, and the Clang (tsan) build compiles few tests. The -Winvalid-pch CMake
# adds says when GCC cannot use it (a warning: the build is then only slower, never different).
function(pdserve_test_pch)
  if(NOT PDSERVE_BUILD_TESTS OR NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    return()
  endif()
  add_library(pdserve_test_pch STATIC ${PROJECT_SOURCE_DIR}/tests/pch/test_pch.cc)
  _pdserve_test_common(pdserve_test_pch)
  target_link_libraries(pdserve_test_pch PRIVATE GTest::gmock GTest::gtest absl::status
    absl::statusor absl::strings absl::synchronization absl::time)
  target_precompile_headers(pdserve_test_pch PRIVATE ${PROJECT_SOURCE_DIR}/tests/pch/test_pch.h)
endfunction()

# pdserve_cc_test(NAME name SRCS ... [DEPS ...] [LABELS ...])
function(pdserve_cc_test)
  if(NOT PDSERVE_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  if(PDSERVE_TSAN AND NOT ARG_NAME IN_LIST PDSERVE_TSAN_TESTS)
    return()
  endif()
  add_executable(${ARG_NAME} ${ARG_SRCS})
  _pdserve_test_common(${ARG_NAME})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  if(TARGET pdserve_test_pch)
    target_precompile_headers(${ARG_NAME} REUSE_FROM pdserve_test_pch)
    target_compile_options(${ARG_NAME} PRIVATE -Wno-error=invalid-pch)
  endif()
  # One label per test (a list would be split into separate properties by gtest_discover_tests):
  # "unit" unless the caller names another (e.g. integration).
  # TSan's options travel with each test, so that a plain `ctest` in the tree applies them too.
  set(_label unit)
  set(_environment "")
  if(PDSERVE_TSAN)
    set(_label tsan)
    set(_environment ENVIRONMENT
      "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp")
  elseif(ARG_LABELS)
    list(GET ARG_LABELS 0 _label)
  endif()
  gtest_discover_tests(${ARG_NAME} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS ${_label} ${_environment})
endfunction()

# pdserve_cc_benchmark(NAME name SRCS ... [DEPS ...])
function(pdserve_cc_benchmark)
  if(NOT PDSERVE_BUILD_BENCHMARKS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  _pdserve_common(${ARG_NAME})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()
