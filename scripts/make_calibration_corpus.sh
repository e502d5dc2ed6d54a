#!/usr/bin/env bash
# Writes a calibration corpus that shares no text with the evaluation file: stories sampled from
# the model itself (temperature 1, one seed per story), the data-free way to calibrate.
# Usage: scripts/make_calibration_corpus.sh PDSERVE MODEL TOKENIZER OUT [STORIES]
set -euo pipefail
PDSERVE=$1 MODEL=$2 TOKENIZER=$3 OUT=$4 STORIES=${5:-200}
: >"$OUT"
for seed in $(seq 1 "$STORIES"); do
  "$PDSERVE" generate --model "$MODEL" --tokenizer "$TOKENIZER" --prompt "" --max-tokens 400 \
    --temperature 1.0 --seed "$seed" --log-level warn >>"$OUT"
  printf '\n' >>"$OUT"
  if (( seed % 50 == 0 )); then echo "calibration corpus: $seed/$STORIES stories" >&2; fi
done
