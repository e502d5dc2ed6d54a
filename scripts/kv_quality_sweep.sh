#!/usr/bin/env bash
# The KV technique quality table on stories260K (docs/measurements.md#kv-techniques): makes a
# calibration corpus sampled from the model itself (no text shared with the evaluation file),
# calibrates, and runs `pdserve eval --compare-to-baseline` over the settings, printing a markdown
# table. Usage: scripts/kv_quality_sweep.sh [build/release/tools/pdserve] [WORK_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PDSERVE=${1:-build/release/tools/pdserve}
DIR=${2:-/tmp/pdserve-kv-sweep}
SHARED=${PDSERVE_SHARED_DIR:-../shared}
MODEL=$SHARED/models/stories260K/stories260K.bin
TOK=$SHARED/models/stories260K/tok512.bin
TEXT=$SHARED/data/stories260K-eval.txt
mkdir -p "$DIR"
[ -s "$DIR/corpus.txt" ] || scripts/make_calibration_corpus.sh "$PDSERVE" "$MODEL" "$TOK" "$DIR/corpus.txt" 200

calibrate() {  # NAME FLAGS...
  local name=$1; shift
  [ -s "$DIR/$name.cal" ] || "$PDSERVE" calibrate --model "$MODEL" --tokenizer "$TOK" \
    --text "$DIR/corpus.txt" --ctx 256 --zack --out "$DIR/$name.cal" --log-level warn "$@" >/dev/null
}
calibrate zack
for l in 4 3 2; do calibrate "l$l" --swiftkv-layer "$l"; done
calibrate l3g2 --swiftkv-layer 3 --across-kv 2

echo "| setting | top-1 agreement | KL | perplexity | KV bytes/token (fp16 = 640) | ratio to fp16 | prefill FLOPs ratio | V bytes fetched per decode step |"
echo "|---|---|---|---|---|---|---|---|"
run() {  # FLAGS...
  "$PDSERVE" eval --model "$MODEL" --tokenizer "$TOK" --text "$TEXT" --ctx 256 \
    --compare-to-baseline --log-level warn "$@" | tail -1 | python3 -c "
import json, sys
d = json.load(sys.stdin)
print('| %s | %.4f | %.4f | %.4f | %.0f | %.3f | %.3f | %.0f |' % (d['profile'], d['top1_agreement'],
      d['kl_mean'], d['perplexity'], d['kv_bytes_per_token'],
      d['kv_bytes_per_token'] / d['kv_bytes_per_token_baseline_fp16'], d['prefill_flops_ratio'],
      d['kv_fetched_bytes_per_decode_step']))"
}
run
for l in 4 3 2; do
  run --swiftkv-layer "$l"
  run --swiftkv-layer "$l" --swiftkv-recovery --calibration "$DIR/l$l.cal"
done
run --swiftkv-layer 3 --across-kv 2
run --swiftkv-layer 3 --across-kv 2 --swiftkv-recovery --calibration "$DIR/l3g2.cal"
for rho in 0 0.02 0.05 0.1 0.2; do run --zack --zack-rho "$rho" --calibration "$DIR/zack.cal"; done
run --fp8 per-token
run --fp8 per-page
for n in 64 32 16 8; do run --kcache-topn "$n"; done
run --kcache-topn 8 --kcache-renormalize
run --fp8 per-token --kcache-topn 32
run --zack --zack-rho 0.02 --calibration "$DIR/zack.cal" --fp8 per-token
run --zack --zack-rho 0.02 --calibration "$DIR/zack.cal" --fp8 per-page
run --zack --zack-rho 0.05 --calibration "$DIR/zack.cal" --fp8 per-page
run --swiftkv-layer 4 --fp8 per-token --kcache-topn 32
