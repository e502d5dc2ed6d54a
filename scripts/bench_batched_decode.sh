#!/usr/bin/env bash
# Batched long-context decode (issue 18), pdserve against llama.cpp's llama-batched-bench on the
# very same GGUF, in one run: B sequences decoding together after CONTEXT-token prompts, for every
# KV format — f32 (the plain model), f16 (what every peer stores by default), FP8 per page, and
# the default profile (ZACK keeping half the dimensions + FP8 per page) — and llama.cpp with its
# default f16 KV and with flash attention + q8_0 KV. Prints a table with tokens/s, step time, the
# bytes a step reads (weights + K + V), the byte bound (those bytes over the machine's measured
# read bandwidth, kernels_benchmark's BM_MemoryRead at the same thread count) and how close each
# comes to it.
#
# The model: the stories110M shape with random weights in f16 (make-model, seeded), its context
# raised to cover the longest run; ZACK's bases are calibrated on it (half the dimensions kept, in
# calibrate's default whole-vector ranks; the file's name changed when that default came in).
# Usage: scripts/bench_batched_decode.sh [build/release]
#   RUNS="16x2048 1x8192" (B x context) GEN=32 ROUNDS=3 THREADS=2 BENCH_DIR=/tmp/pdserve-bench
#   PEER_BIN=DIR: a llama.cpp bin folder (default: ../shared/peers/build-llama-server.sh's)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
PDSERVE=$BUILD/tools/pdserve
DIR=${BENCH_DIR:-/tmp/pdserve-bench}
RUNS=${RUNS:-16x2048 1x8192}
GEN=${GEN:-32}
ROUNDS=${ROUNDS:-3}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "bench_batched_decode.sh: ROUNDS=$ROUNDS must be ≥ 1" >&2; exit 2; }
THREADS=${THREADS:-2}
shared=${PDSERVE_SHARED_DIR:-../shared}
peer=${PEER_BIN:-$("$shared/peers/build-llama-server.sh" | tail -1)}
mkdir -p "$DIR"
model=$DIR/stories110M-8k-f16.gguf
calibration=$DIR/stories110M-8k-zack-half-whole-vectors.cal
log=$DIR/bench_batched_decode.log
: > "$log"

[ -f "$model" ] || "$PDSERVE" make-model --shape stories110M --seq-len 8704 --dtype f16 \
  --format gguf --out "$model" --log-level warn
if [ ! -f "$calibration" ]; then
  echo "calibrating ZACK (half the dimensions) on $model at ctx 2048 ..." >&2
  "$PDSERVE" calibrate --model "$model" --text "$shared/data/stories260K-eval.txt" --ctx 2048 \
    --zack --zack-kept-fraction 0.5 --out "$calibration" --log-level warn > /dev/null
fi

bandwidth=$("$BUILD/kernels/kernels_benchmark" --benchmark_filter="BM_MemoryRead/threads:$THREADS/" \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_format=json |
  python3 -c "import json,sys; b=json.load(sys.stdin)['benchmarks']; print(next(x['bytes_per_second'] for x in b if x['aggregate_name']=='median'))")

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "CPU: $cpu, $THREADS threads; read bandwidth $(python3 -c "print(f'{$bandwidth/1e9:.1f}')") GB/s (BM_MemoryRead); peer: $peer"
echo
echo "| B × context | engine, KV | decode tok/s | step ms, median (rounds) | GB a step reads (W + K + V) | byte bound ms | of bound |"
echo "|---|---|---|---|---|---|---|"

declare -A PROFILES=(
  [f32]=""
  [f16]="--kv-dtype f16"
  [fp8]="--fp8 per-page"
  [default]="--zack --calibration $calibration --fp8 per-page"
)
for run in $RUNS; do
  batch=${run%x*}
  context=${run#*x}
  # The configurations take turns, ROUNDS times, so that the VM's drift spreads over all of them;
  # each row is the median step of its rounds. llama-batched-bench runs once (it prefills every
  # sequence: minutes per run).
  for kv in f32 f16 fp8 default; do : > "$DIR/steps-$kv.jsonl"; done
  for round in $(seq "$ROUNDS"); do
    for kv in f32 f16 fp8 default; do
      echo "pdserve $run $kv, round $round of $ROUNDS ..." >&2
      # shellcheck disable=SC2086
      "$PDSERVE" bench --model "$model" --weights f16 --threads "$THREADS" \
        --prompt-tokens "$context" --decode-context "$context" --gen-tokens "$GEN" \
        --batch "$batch" --repetitions 1 ${PROFILES[$kv]} 2>> "$log" | tail -1 >> "$DIR/steps-$kv.jsonl"
    done
  done
  for kv in f32 f16 fp8 default; do
    python3 - "$DIR/steps-$kv.jsonl" "$run" "$kv" "$bandwidth" <<'EOF'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
run, kv, bw = sys.argv[2], sys.argv[3], float(sys.argv[4])
steps = [d["decode_step_ms"] for d in runs]
step_ms = statistics.median(steps)
b = runs[0]["decode_step_bytes"]
total = b["weights"] + b["k"] + b["v"]
bound_ms = total / bw * 1e3
print(f"| {run.replace('x', ' × ')} | pdserve, {kv} | {runs[0]['batch'] * 1e3 / step_ms:.1f} | "
      f"{step_ms:.1f} ({', '.join(f'{s:.1f}' for s in steps)}) | "
      f"{b['weights']/1e9:.2f} + {b['k']/1e9:.2f} + {b['v']/1e9:.2f} | "
      f"{bound_ms:.1f} | {bound_ms / step_ms:.0%} |")
EOF
  done
  for peer_kv in "f16:" "fa-q8_0:-fa on -ctk q8_0 -ctv q8_0"; do
    name=${peer_kv%%:*}
    flags=${peer_kv#*:}
    echo "llama.cpp $run $name ..." >&2
    # shellcheck disable=SC2086
    line=$(LD_LIBRARY_PATH=$peer "$peer/llama-batched-bench" -m "$model" \
      -c $((batch * (context + GEN) + 64)) -b 2048 -ub 512 -npp "$context" -ntg "$GEN" \
      -npl "$batch" -t "$THREADS" $flags 2>> "$log" | grep -E "^\|\s+$context\s+\|" | tail -1)
    # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
    python3 - "$line" "$run" "$name" "$GEN" <<'EOF'
import sys
cols = [c.strip() for c in sys.argv[1].strip().strip("|").split("|")]
run, name, gen = sys.argv[2], sys.argv[3], int(sys.argv[4])
t_tg, s_tg = float(cols[6]), float(cols[7])
print(f"| {run.replace('x', ' × ')} | llama.cpp, {name} | {s_tg:.1f} | {t_tg / gen * 1e3:.1f} (one run) | | | |")
EOF
  done
done
