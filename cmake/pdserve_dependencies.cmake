# Third-party dependencies, all from Debian packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
# Metrics types, registry and text exposition (prometheus-cpp-dev; only its core library is linked).
find_package(prometheus-cpp CONFIG REQUIRED)
# SHA-256 for the prefix cache's page names (libssl-dev).
find_package(OpenSSL REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)

if(PDSERVE_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(PDSERVE_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# Where the shared models, references and evaluation text live (tests read them).
# Default: $PDSERVE_SHARED_DIR from the environment, else the shared/ folder beside the checkout.
if(DEFINED ENV{PDSERVE_SHARED_DIR})
  set(_pdserve_default_shared "$ENV{PDSERVE_SHARED_DIR}")
else()
  get_filename_component(_pdserve_default_shared "${PROJECT_SOURCE_DIR}/../shared" ABSOLUTE)
endif()
set(PDSERVE_SHARED_DIR "${_pdserve_default_shared}" CACHE PATH "The shared/ folder with models and references")
if(NOT EXISTS "${PDSERVE_SHARED_DIR}/models/stories260K/stories260K.bin")
  message(WARNING "pdserve: ${PDSERVE_SHARED_DIR} has no models/stories260K; the golden and CLI "
                  "tests will fail. Set -DPDSERVE_SHARED_DIR=/path/to/shared.")
endif()

# Services: gRPC/protobuf for control, UCX for KV bytes.
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
pkg_check_modules(UCX REQUIRED IMPORTED_TARGET ucx)
find_program(PDSERVE_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# HTTP (/metrics on every service, the router's OpenAI API, loadgen's HTTP client): Debian's
# cpp-httplib, a compiled library whose header must see the same feature macros (from its .pc).
pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
add_library(pdserve_httplib INTERFACE)
target_link_libraries(pdserve_httplib INTERFACE PkgConfig::CPP_HTTPLIB Threads::Threads)
