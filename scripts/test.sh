#!/usr/bin/env bash
# Sets up dependencies, builds pdserve (Release) and runs the whole CPU test suite, then builds
# and runs it again under ASan+UBSan. GPU tests (ctest label `gpu`) are excluded here; they skip
# cleanly without a device anyway. Usage: scripts/test.sh [--no-sanitizers]
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
fi
echo "scripts/test.sh: all tests passed"
