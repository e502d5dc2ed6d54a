#!/usr/bin/env bash
# SwiftKV distillation of the trained model at l = L/2 and L/4, G = 1 and 2 (train/distill.py),
# each exported as a llama_swiftkv Hugging Face directory in f16 (the GGUF's weights) under
# WORK/distill-l<l>-g<G>/hf, which scripts/kv_quality_sweep.sh pd10m compares with naive rewiring
# and the closed-form recovery. Resumable like build_model.sh.
#   train/distill_all.sh ["l G" ...]   (env WORK=build/train, STEPS=250)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-build/train}
PY=/usr/bin/python3
[ $# -gt 0 ] || set -- "4 1" "4 2" "2 1" "2 2"
for setting in "$@"; do
  read -r l g <<<"$setting"
  out=$WORK/distill-l$l-g$g
  $PY train/distill.py --teacher "$WORK/run/checkpoint.pt" --corpus "$WORK/corpus" \
    --tokenizer "$WORK/tokenizer.model" --out "$out" --layer "$l" --group "$g" \
    --steps "${STEPS:-250}"
  $PY train/export.py --checkpoint "$out/checkpoint.pt" --tokenizer "$WORK/tokenizer.model" \
    --out "$out/hf" --dtype f16
done
