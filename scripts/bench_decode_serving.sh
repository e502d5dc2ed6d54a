#!/usr/bin/env bash
# Serving decode at long context (issue 18): `pdserve loadgen` at a fixed concurrency against the
# disaggregated cluster with the default profile (ZACK half + FP8 per page, calibrated as in
# scripts/bench_batched_decode.sh) and against monolithic workers running the plain model, on
# the stories110M-shaped f16 GGUF that script makes. Prints TTFT/TPOT/ITL medians and the ratio
# of TPOT p50s.
# Usage: scripts/bench_decode_serving.sh [build/release]
#   CONCURRENCY=16 REQUESTS=32 PROMPT=1536 GEN=256 BENCH_DIR=/tmp/pdserve-bench
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
PDSERVE=$BUILD/tools/pdserve
DIR=${BENCH_DIR:-/tmp/pdserve-bench}
CONCURRENCY=${CONCURRENCY:-16}
REQUESTS=${REQUESTS:-32}
PROMPT=${PROMPT:-1536}
GEN=${GEN:-256}
model=$DIR/stories110M-8k-f16.gguf
calibration=$DIR/stories110M-8k-zack-half-whole-vectors.cal  # as bench_batched_decode.sh makes it
if [ ! -f "$model" ] || [ ! -f "$calibration" ]; then
  echo "run scripts/bench_batched_decode.sh first (it makes $model and $calibration)" >&2
  exit 1
fi
context=$((PROMPT + GEN + 64))

# shellcheck source=scripts/cluster_lib.sh
source scripts/cluster_lib.sh
trap cleanup EXIT

run() {  # name, up flags...
  local name=$1; shift
  start_cluster "$DIR/serving-$name.log" --model "$model" --weights f16 --max-context "$context" \
    --max-sequences "$CONCURRENCY" "$@"
  echo "=== $name: $REQUESTS requests, $CONCURRENCY at a time, $PROMPT + $GEN tokens ($(date +%T))" >&2
  "$PDSERVE" loadgen --router "$ROUTER" --concurrency "$CONCURRENCY" --requests "$REQUESTS" \
    --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --seed 1 --json "$DIR/serving-$name.json" \
    --log-level warn > /dev/null
  cleanup
}
run default --zack --calibration "$calibration" --fp8 per-page --pool-mib 2048
run plain --monolithic

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
python3 - "$DIR" "$cpu" <<'EOF'
import json, sys
d, cpu = sys.argv[1], sys.argv[2]
rows = {n: json.load(open(f"{d}/serving-{n}.json")) for n in ["default", "plain"]}
print(f"CPU: {cpu}\n")
print("| cluster | TTFT p50 s | TPOT p50 ms | TPOT p99 ms | ITL p50 ms | output tok/s | completed |")
print("|---|---|---|---|---|---|---|")
for n, r in rows.items():
    print(f"| {n} | {r['ttft_s']['p50']:.2f} | {r['tpot_s']['p50']*1e3:.1f} | "
          f"{r['tpot_s']['p99']*1e3:.1f} | {r['itl_s']['p50']*1e3:.1f} | "
          f"{r['output_tokens_per_s']:.1f} | {r['requests']['completed']} |")
ratio = rows["default"]["tpot_s"]["p50"] / rows["plain"]["tpot_s"]["p50"]
print(f"\nTPOT p50, default / plain: {ratio:.2f}")
EOF
