#!/usr/bin/env bash
# The CUDA backend, verified in one call on a machine with an NVIDIA GPU (docs/gpu.md):
#   1. builds pdserve with PDSERVE_CUDA=ON for sm_90 (unless --prebuilt DIR names a bundle made by
#      tests/gpu/bundle.sh on a build machine, for GPU machines without the build dependencies);
#   2. runs every GPU test (ctest label `gpu`: kernels against the CPU reference, the exhaustive
#      FP8 sweep, the CUDA engine against the CPU engine);
#   3. runs each GPU test binary under compute-sanitizer memcheck and racecheck;
#   4. runs the kernel benchmarks (decode attention bandwidth, prefill attention TFLOP/s, ZACK
#      rank scaling, cuBLAS GEMM) against the device's peaks, PyTorch's scaled_dot_product_attention
#      on the same shapes as the peer, and `pdserve bench` on the CPU and the GPU for a
#      stories110M-shaped model (SwiftKV on/off for prefill, ZACK+FP8 on/off for decode) and a
#      larger shape;
#   5. serves on the GPU: `pdserve up --device cuda` (prefill and decode workers on the GPU, KV
#      pages through their pinned host mirrors) must answer a greedy request as the CPU does
#      (tests/gpu/cluster_smoke.sh), before the whole-engine benchmarks of step 4;
#   6. writes everything to a report directory (default gpu-report/): summary.md, logs, JSON.
# Exits non-zero when a test, a sanitizer or the cluster check fails; benchmarks only report.
# Usage: tests/gpu/run.sh [--report DIR] [--prebuilt DIR] [--no-setup] [--quick]
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
root=$(pwd)

report=gpu-report
prebuilt=""
setup=1
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --report) report=$2; shift 2 ;;
    --prebuilt) prebuilt=$2; shift 2 ;;
    --no-setup) setup=0; shift ;;
    --quick) quick=1; shift ;;
    *) echo "tests/gpu/run.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$report"
report=$(cd "$report" && pwd)
summary=$report/summary.md
failures=0

note() { echo "$*" | tee -a "$summary"; }
step() { echo; echo "== $* ==" | tee -a "$report/steps.log"; }

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "tests/gpu/run.sh: no NVIDIA GPU here (nvidia-smi -L fails); nothing to verify" >&2
  exit 77
fi

: >"$summary"
note "# pdserve CUDA backend report"
note ""
note "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
note "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
note "- device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
note "- nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo absent)"
nvidia-smi >"$report/nvidia-smi.txt" 2>&1

# --- 1. build ---------------------------------------------------------------------------------
if [ -n "$prebuilt" ]; then
  bin=$(cd "$prebuilt" && pwd)
  export LD_LIBRARY_PATH="$bin/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PDSERVE_SHARED_DIR="$bin/shared"
  note "- build: prebuilt bundle $bin"
else
  step build
  [ "$setup" = 1 ] && scripts/setup.sh >"$report/setup.log" 2>&1
  if ! { cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPDSERVE_CUDA=ON \
    -DPDSERVE_BUILD_BENCHMARKS=ON >"$report/configure.log" 2>&1 &&
    cmake --build build/gpu -j "$(nproc)" >"$report/build.log" 2>&1; }; then
    note "- build: FAILED (see build.log)"
    exit 1
  fi
  bin=$root/build/gpu
  note "- build: build/gpu (Release, sm_90)"
fi
find_binary() { find "$bin" -name "$1" -type f -perm -u+x | head -1; }
gpu_tests="cuda_ops_test cuda_attention_test cuda_kv_test cuda_engine_test"

# --- 2. GPU tests -----------------------------------------------------------------------------
step "GPU tests"
note ""
note "## GPU tests"
note ""
note "| test binary | result | passed | skipped | failed |"
note "| --- | --- | --- | --- | --- |"
for t in $gpu_tests; do
  exe=$(find_binary "$t")
  if [ -z "$exe" ]; then note "| $t | MISSING | | | |"; failures=$((failures + 1)); continue; fi
  (cd "$(dirname "$exe")" && "$exe" --gtest_output="json:$report/$t.json") >"$report/$t.log" 2>&1
  rc=$?
  passed=$(grep -c '^\[       OK \]' "$report/$t.log")
  skipped=$(grep -c '^\[  SKIPPED \]' "$report/$t.log")
  failed=$(grep -c '^\[  FAILED  \]' "$report/$t.log")
  if [ $rc -eq 0 ]; then
    result=pass
  else
    result=FAIL
    failures=$((failures + 1))
  fi
  note "| $t | $result | $passed | $skipped | $failed |"
done

# --- 3. compute-sanitizer ---------------------------------------------------------------------
step compute-sanitizer
note ""
note "## compute-sanitizer"
note ""
# The exhaustive FP8 sweep (2^32 conversions) is far too slow under the sanitizer; it runs above.
sanitizer_filter='-*Exhaustive*:*LongContext*'
# racecheck reports shared-memory hazards inside cuBLAS's own Hopper GEMM kernels (nvjet_sm90_*,
# synchronized by TMA and mbarriers); excluding them with --kernel-name-exclude crashed the tool
# (docs/gpu-report/summary.md). A run whose every hazard lies in those kernels is reported as
# such, apart from hazards in pdserve's own kernels, which fail the step.
# The runs go in parallel (one GPU serves them all), each bounded so one slow tool cannot eat the
# device time the later steps need.
sanitizer_seconds=${PDSERVE_SANITIZER_SECONDS:-240}
if command -v compute-sanitizer >/dev/null; then
  note "- $(compute-sanitizer --version | tail -1)"
  note ""
  note "| test binary | tool | result |"
  note "| --- | --- | --- |"
  declare -A sanitizer_pid=()
  for t in $gpu_tests; do
    exe=$(find_binary "$t")
    [ -z "$exe" ] && continue
    for tool in memcheck racecheck; do
      (cd "$(dirname "$exe")" && timeout "$sanitizer_seconds" compute-sanitizer --tool "$tool" \
        --error-exitcode 99 "$exe" --gtest_filter="$sanitizer_filter") \
        >"$report/sanitizer-$tool-$t.log" 2>&1 &
      sanitizer_pid[$t.$tool]=$!
    done
  done
  for t in $gpu_tests; do
    for tool in memcheck racecheck; do
      [ -z "${sanitizer_pid[$t.$tool]:-}" ] && continue
      wait "${sanitizer_pid[$t.$tool]}"
      rc=$?
      result=""
      log=$report/sanitizer-$tool-$t.log
      races=$(grep -c 'Race reported between' "$log")
      if [ $rc -eq 99 ] && [ "$races" -gt 0 ] && grep -q '^\[  PASSED  \]' "$log" &&
        ! grep -q '^\[  FAILED  \]' "$log" &&
        ! grep 'Race reported between' "$log" | grep -qv 'nvjet_sm90'; then
        rc=0
        result="clean in pdserve's kernels ($races hazard reports, all inside cuBLAS's nvjet kernels)"
      fi
      case $rc in
        0) result=${result:-clean} ;;
        124) result="NOT FINISHED in ${sanitizer_seconds} s"; failures=$((failures + 1)) ;;
        *) result="FAIL ($rc)"; failures=$((failures + 1)) ;;
      esac
      note "| $t | $tool | $result |"
    done
  done
else
  note "compute-sanitizer not found: NOT RUN"
  failures=$((failures + 1))
fi

# --- 4. benchmarks ----------------------------------------------------------------------------
step benchmarks
note ""
note "## Benchmarks"
min_time=0.5  # seconds, as a plain number: Debian's Google Benchmark 1.7 takes no unit
[ "$quick" = 1 ] && min_time=0.1
for b in cuda_attention_benchmark cuda_gemm_benchmark; do
  exe=$(find_binary "$b")
  [ -z "$exe" ] && { note "- $b: MISSING"; continue; }
  "$exe" --benchmark_min_time="$min_time" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_out="$report/$b.json" \
    --benchmark_out_format=json >"$report/$b.log" 2>&1 || note "- $b: exit $?"
  note ""
  note "### $b (medians of 3)"
  note '```'
  grep -E "_median|Benchmark|----" "$report/$b.log" | tee -a "$summary" >/dev/null
  note '```'
done

step "PyTorch SDPA peer"
note ""
note "### PyTorch scaled_dot_product_attention (peer, same shapes)"
note '```'
python3 tests/gpu/sdpa_peer.py 2>&1 | tee "$report/sdpa_peer.jsonl" | tee -a "$summary" >/dev/null
note '```'

# --- 5. disaggregated serving on the GPU (before the engine benchmarks: correctness first) ---
step "cluster on the GPU"
pdserve=$(find_binary pdserve)
note ""
note "## Disaggregated serving on the GPU"
note ""
shared=${PDSERVE_SHARED_DIR:-$root/../shared}
if [ -z "$pdserve" ]; then
  note "pdserve binary missing: cluster check NOT RUN"
  failures=$((failures + 1))
elif ! tests/gpu/cluster_smoke.sh "$pdserve" "$shared" "$report" cuda 2>&1 | tee -a "$summary"; then
  note "cluster check FAILED (see cluster-*.err)"
  failures=$((failures + 1))
fi

# --- 6. whole-engine throughput, CPU vs GPU ----------------------------------------------------
step "engine bench"
if [ -n "$pdserve" ]; then
  tests/gpu/engine_bench.sh "$pdserve" "$report" "$quick" 2>&1 | tee -a "$summary"
else
  note "pdserve binary missing: engine bench NOT RUN"
fi

note ""
if [ "$failures" -eq 0 ]; then
  note "**Result: every GPU test passed and compute-sanitizer is clean.**"
else
  note "**Result: $failures failing step(s); see the logs in $report.**"
fi
echo "report: $report"
[ "$failures" -eq 0 ]
