#!/usr/bin/env bash
# Packs what tests/gpu/run.sh --prebuilt needs into one archive, for GPU machines that can run
# CUDA programs but lack pdserve's build dependencies (e.g. a lent device machine with no package
# registry): the GPU test binaries, the CUDA benchmarks and `pdserve`, built here for sm_90, plus
# every shared library they load that is not part of the C runtime or the CUDA toolkit, plus the
# stories260K model the engine test reads. The GPU machine needs the CUDA 13 runtime and cuBLAS
# (/usr/local/cuda/lib64) and a glibc at least as new as this one.
# Usage: tests/gpu/bundle.sh [BUILD_DIR (default build/gpu)] [OUT (default gpu-bundle.tar.xz)]
# On the GPU machine: tar xf gpu-bundle.tar.xz && tests/gpu/run.sh --prebuilt gpu-bundle
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/gpu}
out=${2:-gpu-bundle.tar.xz}
shared=${PDSERVE_SHARED_DIR:-$(cd .. && pwd)/shared}

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPDSERVE_CUDA=ON \
  -DPDSERVE_BUILD_BENCHMARKS=ON >/dev/null
targets="cuda_ops_test cuda_attention_test cuda_kv_test cuda_engine_test cuda_attention_benchmark
  cuda_gemm_benchmark pdserve"
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" --target $targets

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
dir=$stage/gpu-bundle
mkdir -p "$dir/lib" "$dir/shared/models"
for t in $targets; do
  exe=$(find "$build" -name "$t" -type f -perm -u+x | head -1)
  cp "$exe" "$dir/"
  # Shared libraries outside glibc, the compiler runtime and the CUDA toolkit.
  ldd "$exe" | awk '/=> \// {print $3}' |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/cuda' |
    xargs -r -I{} cp -nL {} "$dir/lib/"
done
# UCX loads its transport modules from ucx/ beside libucs; shared memory through CMA is one
# (tcp and posix/sysv shared memory are built into libuct).
pdserve_exe=$(find "$build" -name pdserve -type f -perm -u+x | head -1)
ucx_modules=$(dirname "$(ldd "$pdserve_exe" | awk '/libucs\.so/ {print $3; exit}')")/ucx
if [ -d "$ucx_modules" ]; then
  mkdir -p "$dir/lib/ucx"
  cp -L "$ucx_modules"/libuct_cma.so.0 "$dir/lib/ucx/" 2>/dev/null || true
fi
# The tokenizer's sentencepiece shim is dlopen'ed by path; pdserve looks beside itself too.
find "$build" -name 'libpdserve_spm_shim.so' -exec cp {} "$dir/lib/" \;
cp -r "$shared/models/stories260K" "$dir/shared/models/"
tar -C "$stage" -cJf "$out" gpu-bundle
echo "bundle: $out ($(du -h "$out" | cut -f1))"
