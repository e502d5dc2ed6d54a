#!/usr/bin/env bash
# Sets up dependencies, builds pdserve (Release, with the CUDA backend for sm_90 when the CUDA
# toolkit is present) and runs the whole test suite, then builds and runs it again under
# ASan+UBSan (CPU only), then builds the concurrent code (services, transports, clusters of real
# processes) with Clang under ThreadSanitizer and its thread-safety analysis and runs those tests
# (the tsan preset; suppressions for uninstrumented prebuilt libraries in tests/tsan.supp). GPU
# tests (ctest label `gpu`) run too and skip without a device; on a machine with a GPU,
# tests/gpu/run.sh verifies the backend. Usage: scripts/test.sh [--no-sanitizers]
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
jobs=$(nproc)

cmake --preset release
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

if [ "${1:-}" != "--no-sanitizers" ]; then
  cmake --preset asan
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan -j "$jobs"
  cmake --preset tsan
  cmake --build --preset tsan -j "$jobs"
  ctest --preset tsan -j "$jobs"
fi
echo "scripts/test.sh: all tests passed"
