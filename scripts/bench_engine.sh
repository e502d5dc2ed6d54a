#!/usr/bin/env bash
# Runs `pdserve bench` on random-weight stories15M/42M/110M models (made once with make-model in
# $BENCH_DIR, default /tmp/pdserve-bench) for f32/f16/bf16 weights at 1 and 2 threads, pp512 and
# tg128, and prints a markdown table. Usage: scripts/bench_engine.sh [build/release/tools/pdserve]
set -euo pipefail
cd "$(dirname "$0")/.."
PDSERVE=${1:-build/release/tools/pdserve}
DIR=${BENCH_DIR:-/tmp/pdserve-bench}
REPS=${REPS:-3}
mkdir -p "$DIR"
echo "| shape | weights | threads | pp512 tok/s | prefill GFLOP/s | tg128 tok/s | decode weight GB/s |"
echo "|---|---|---|---|---|---|---|"
for shape in stories15M stories42M stories110M; do
  model="$DIR/$shape.gguf"
  [ -f "$model" ] || "$PDSERVE" make-model --shape "$shape" --format gguf --out "$model" --log-level warn
  for weights in f32 f16 bf16; do
    for threads in 1 2; do
      "$PDSERVE" bench --model "$model" --prompt-tokens 512 --gen-tokens 128 --threads "$threads" \
        --weights "$weights" --repetitions "$REPS" --log-level warn | tail -1 |
        python3 -c "import json,sys; d=json.load(sys.stdin); print('| $shape | $weights | $threads | %.0f | %.1f | %.1f | %.1f |' % (d['prefill_tokens_per_s'], d['prefill_gflops'], d['decode_tokens_per_s'], d['decode_weight_gb_per_s']))"
    done
  done
done
