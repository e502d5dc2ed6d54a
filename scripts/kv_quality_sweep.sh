#!/usr/bin/env bash
# The KV technique quality tables (docs/measurements.md#kv-techniques): calibrates, then runs
# `pdserve eval --compare-to-baseline` over each technique alone and in combinations, printing a
# markdown table (and, with CSV=FILE, the same rows as CSV for plots).
#   scripts/kv_quality_sweep.sh [stories260K|pd10m] [PDSERVE] [WORK_DIR]
# stories260K: CTX (default 256) on ../shared/data/stories260K-eval.txt, calibrated on stories sampled from
#   the model itself (no text shared with the evaluation file).
# pd10m (the trained model, models/pd10m): CTX (default 512) on TEXT_KIB (48) KiB of the corpus'
#   test split in 4 KiB slices spread over all of it (every source), calibrated on CAL_KIB (192) of
#   the validation split alike; SwiftKV at l = L/2 and L/4, G = 1 and 2,
#   naive, closed-form recovery and distilled (the distilled checkpoints under DISTILLED, default
#   build/train, made by train/distill_all.sh; rows without one are skipped; ROWS=distilled runs
#   only those rows, appending to CSV, once distillation has finished).
# ROWS=retention runs only the token retention (KVCrush) rows; KV bytes per token count what a
# prompt keeps (the share of its tokens retention kept, · bytes per kept token).
# With CSV=FILE the rows also go to FILE; with CSV and PNG=FILE, a plot of the Pareto front.
set -euo pipefail
cd "$(dirname "$0")/.."
SET=${1:-stories260K}
PDSERVE=${2:-build/release/tools/pdserve}
DIR=${3:-/tmp/pdserve-kv-sweep-$SET}
SHARED=${PDSERVE_SHARED_DIR:-../shared}
mkdir -p "$DIR"
case $SET in
  stories260K)
    MODEL=$SHARED/models/stories260K/stories260K.bin
    MODEL_FLAGS=(--tokenizer "$SHARED/models/stories260K/tok512.bin")
    TEXT=$SHARED/data/stories260K-eval.txt
    CTX=${CTX:-256}
    [ -s "$DIR/corpus.txt" ] || scripts/make_calibration_corpus.sh "$PDSERVE" "$MODEL" \
      "${MODEL_FLAGS[1]}" "$DIR/corpus.txt" 200
    LAYERS=(4 3 2) GROUPED=3 ;;
  pd10m)
    MODEL=models/pd10m/model.gguf
    MODEL_FLAGS=()
    CORPUS=${CORPUS:-build/train/corpus}
    CTX=${CTX:-512}
    TEXT=$DIR/test.txt
    # Slices of 4 KiB spread evenly over each split, which lists its sources in turn.
    slices() {  # FILE KIB
      python3 - "$1" "$2" <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
count = int(sys.argv[2]) // 4
step = len(data) // count
for i in range(count):
    begin = data.index(b"\n", i * step) + 1
    end = data.index(b" ", begin + 4096)
    sys.stdout.buffer.write(data[begin:end] + b"\n")
PY
    }
    slices "$CORPUS/test.txt" "${TEXT_KIB:-48}" >"$TEXT"
    slices "$CORPUS/valid.txt" "${CAL_KIB:-192}" >"$DIR/corpus.txt"
    LAYERS=(4 2) GROUPED="4 2" ;;
  *) echo "kv_quality_sweep.sh: unknown model set '$SET' (stories260K or pd10m)" >&2; exit 2 ;;
esac
DISTILLED=${DISTILLED:-build/train}

calibrate() {  # NAME FLAGS... (remade when older than the binary: calibrate's defaults change)
  local name=$1; shift
  [ "$DIR/$name.cal" -nt "$PDSERVE" ] || "$PDSERVE" calibrate --model "$MODEL" "${MODEL_FLAGS[@]}" \
    --text "$DIR/corpus.txt" --ctx "$CTX" --out "$DIR/$name.cal" --log-level warn "$@" >/dev/null
}
{ [ "${ROWS:-all}" != retention ] || [ "$SET" = stories260K ]; } && calibrate zack --zack
if [ "${ROWS:-all}" != retention ]; then
  if [ "$SET" = pd10m ]; then
    calibrate zack-half --zack --zack-kept-fraction 0.5
    calibrate zack-3of8 --zack --zack-kept-fraction 0.375
  fi
  for l in "${LAYERS[@]}"; do calibrate "l$l" --swiftkv-layer "$l"; done
  for l in $GROUPED; do calibrate "l${l}g2" --swiftkv-layer "$l" --across-kv 2; done
fi

echo "| setting | top-1 agreement | KL | perplexity | KV bytes/token | ratio to fp16 | prefill FLOPs ratio | V bytes fetched per decode step |"
echo "|---|---|---|---|---|---|---|---|"
# ROWS=distilled: only the rows of distilled checkpoints (appended to CSV), after distill_all.sh.
all_rows() { [ "${ROWS:-all}" = all ]; }
[ -n "${CSV:-}" ] && all_rows && echo "setting,top1,kl,perplexity,kv_bytes_per_token,ratio_to_fp16,prefill_flops_ratio,v_bytes_fetched" >"$CSV"
run_model() {  # LABEL MODEL FLAGS...
  local label=$1 model=$2; shift 2
  "$PDSERVE" eval --model "$model" "${MODEL_FLAGS[@]}" --text "$TEXT" --ctx "$CTX" \
    --compare-to-baseline --log-level warn "$@" | tail -1 | python3 -c "
import json, sys
d = json.load(sys.stdin)
label = sys.argv[1] or d['profile']
row = (label, d['top1_agreement'], d['kl_mean'], d['perplexity'], d['kv_bytes_per_prompt_token'],
       d['kv_bytes_per_prompt_token'] / d['kv_bytes_per_token_baseline_fp16'],
       d['prefill_flops_ratio'],
       d['kv_fetched_bytes_per_decode_step'])
print('| %s | %.4f | %.4f | %.4f | %.0f | %.3f | %.3f | %.0f |' % row)
if sys.argv[2]:
    with open(sys.argv[2], 'a') as f:
        f.write('\"%s\",%.6f,%.6f,%.6f,%.1f,%.6f,%.6f,%.1f\n' % row)" "$label" "${CSV:-}"
}
run() { run_model "" "$MODEL" "$@"; }

# Token retention (KVCrush): each policy (KVCrush with unweighted representatives too) at 50 %,
# 25 % and 12.5 % of the prompt, alone and with the
# default profile (pd10m: models/pd10m/default.flags; stories260K: ZACK ρ 0.02 + FP8 per-page).
# KV bytes count the prompt's kept tokens (decode tokens are all kept). ROWS=retention: these only.
retention_rows() {
  local default=(--flagfile models/pd10m/default.flags)
  [ "$SET" = stories260K ] &&
    default=(--zack --zack-rho 0.02 --calibration "$DIR/zack.cal" --fp8 per-page)
  local budget with extra
  run "${default[@]}"
  for budget in 50% 25% 12.5%; do
    for with in alone default; do
      extra=(--kvcrush-budget "$budget")
      [ "$with" = default ] && extra+=("${default[@]}")
      run "${extra[@]}" --kvcrush-policy recent
      run "${extra[@]}" --kvcrush-policy snapkv
      run "${extra[@]}" --kvcrush-weight 0
      run "${extra[@]}"
      run "${extra[@]}" --kvcrush-granularity page
    done
  done
}
swiftkv_rows() {  # L G
  local l=$1 g=$2 cal=$DIR/l$1.cal
  [ "$g" = 2 ] && cal=$DIR/l${1}g2.cal
  if all_rows; then
    run --swiftkv-layer "$l" --across-kv "$g"
    run_model "SwiftKV l=$l G=$g, closed-form recovery" "$MODEL" --swiftkv-layer "$l" \
      --across-kv "$g" --swiftkv-recovery --calibration "$cal"
  fi
  local distilled=$DISTILLED/distill-l$l-g$g/hf
  # The distilled checkpoints are pd10m's.
  [ "$SET" = pd10m ] && [ -d "$distilled" ] && run_model "SwiftKV l=$l G=$g, distilled" "$distilled"
  return 0
}

all_rows && run
if [ "${ROWS:-all}" != retention ]; then
  for l in "${LAYERS[@]}"; do swiftkv_rows "$l" 1; done
  for l in $GROUPED; do swiftkv_rows "$l" 2; done
fi
technique_rows() {
  # stories260K alone: rows that the trained model's table leaves out to stay within an hour.
  full() { [ "$SET" = stories260K ]; }
  for rho in 0 0.02 0.05 0.1 0.2; do
    [ "$rho" = 0 ] && ! full && continue
    run --zack --zack-rho "$rho" --calibration "$DIR/zack.cal"
  done
  full || run_model "ZACK, half the dimensions" "$MODEL" --zack --calibration "$DIR/zack-half.cal"
  run --fp8 per-token
  run --fp8 per-page
  for n in 64 32 16 8; do
    [ "$n" = 8 ] && ! full && continue
    run --kcache-topn "$n"
  done
  full && run --kcache-topn 8 --kcache-renormalize
  run --fp8 per-token --kcache-topn 32
  full && run --zack --zack-rho 0.02 --calibration "$DIR/zack.cal" --fp8 per-token
  run --zack --zack-rho 0.02 --calibration "$DIR/zack.cal" --fp8 per-page
  run --zack --zack-rho 0.05 --calibration "$DIR/zack.cal" --fp8 per-page
  run --swiftkv-layer 4 --fp8 per-token --kcache-topn 32
  if [ "$SET" = pd10m ]; then
    run_model "ZACK half + FP8 per-token" "$MODEL" --zack --calibration "$DIR/zack-half.cal" \
      --fp8 per-token
    run_model "ZACK half + FP8 per-page" "$MODEL" --zack --calibration "$DIR/zack-half.cal" \
      --fp8 per-page
    run_model "ZACK 3/8 of the dimensions + FP8 per-page" "$MODEL" --zack \
      --calibration "$DIR/zack-3of8.cal" --fp8 per-page
  fi
}

distilled_zack_rows() {
  # ZACK on the distilled checkpoints, calibrated on each (its cache, not the plain model's).
  for setting in "4 1" "4 2" "2 2"; do
    read -r cut g <<<"$setting"
    distilled=$DISTILLED/distill-l$cut-g$g/hf
    [ -d "$distilled" ] || continue
    cal=$DIR/distilled-l$cut-g$g.cal
    [ -s "$cal" ] || "$PDSERVE" calibrate --model "$distilled" --text "$DIR/corpus.txt" \
      --ctx "$CTX" --zack --zack-kept-fraction 0.5 --out "$cal" --log-level warn >/dev/null
    run_model "SwiftKV l=$cut G=$g distilled + ZACK half + FP8 per-token" "$distilled" \
      --zack --calibration "$cal" --fp8 per-token
    run_model "SwiftKV l=$cut G=$g distilled + ZACK half + FP8 per-page" "$distilled" \
      --zack --calibration "$cal" --fp8 per-page
    run_model "SwiftKV l=$cut G=$g distilled + ZACK half + FP8 per-page + KCache 32" \
      "$distilled" --zack --calibration "$cal" --fp8 per-page --kcache-topn 32
  done
}

all_rows && technique_rows
{ all_rows || [ "${ROWS:-all}" = retention ]; } && retention_rows
[ "$SET" = pd10m ] && [ "${ROWS:-all}" != retention ] && distilled_zack_rows

# With CSV and PNG: top-1 agreement against KV bytes (relative to fp16), the Pareto front joined.
if [ -n "${CSV:-}" ] && [ -n "${PNG:-}" ]; then
  python3 - "$CSV" >"$DIR/front.tsv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
points = sorted((float(r["ratio_to_fp16"]), -float(r["top1"]), r["setting"]) for r in rows)
best = -1.0
for ratio, negative_top1, name in points:  # the front: no cheaper point agrees more
    top1 = -negative_top1
    if top1 > best:
        best = top1
        print(ratio, top1, '"%s"' % name.replace('"', "'"), sep="\t")
PY
  python3 -c "
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print(r['ratio_to_fp16'], r['top1'], sep='\t')" "$CSV" >"$DIR/all.tsv"
  gnuplot <<GP
set terminal pngcairo size 900,560
set output "$PNG"
set xlabel "KV bytes per token, relative to the plain fp16 cache"
set ylabel "top-1 agreement with the plain model"
set grid
set key bottom right
plot "$DIR/all.tsv" using 1:2 with points pointtype 7 pointsize 0.8 title "every setting", \
     "$DIR/front.tsv" using 1:2 with linespoints linewidth 2 pointtype 7 title "Pareto front", \
     "$DIR/front.tsv" using 1:2:3 with labels left offset 0.6,0.4 font ",7" notitle
GP
fi
