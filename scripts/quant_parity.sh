#!/usr/bin/env bash
# `pdserve quantize` against the current llama.cpp release (../shared/peers, build-llama-server.sh;
# built once, 10–16 minutes) on the real stories260K model, for Q8_0, Q4_0 and Q4_K_M:
#   - tensors: pdserve's file and llama-quantize's (from the same f32 GGUF), byte for byte;
#   - perplexity on ../shared/data at ctx 256: pdserve eval and llama-perplexity on that file;
#   - greedy text, 100 tokens from each prompt: pdserve generate and llama-server, the first
#     differing character if any and the gap between llama.cpp's top two log-probabilities at that
#     token (a near tie there: ulp-level differences that flip an int8 activation code suffice).
# Usage: scripts/quant_parity.sh [build/release/tools/pdserve]
set -euo pipefail
cd "$(dirname "$0")/.."
PDSERVE=$(realpath "${1:-build/release/tools/pdserve}")
shared=${PDSERVE_SHARED_DIR:-../shared}
peer=$("$shared/peers/build-llama-server.sh" | tail -1)
model="$shared/models/stories260K/stories260K.bin"
tokenizer="$shared/models/stories260K/tok512.bin"
text="$shared/data/stories260K-eval.txt"
work=$(mktemp -d)
port=18555
cleanup() {
  pkill -f "llama-server.*--port $port" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$PDSERVE" convert --model "$model" --tokenizer "$tokenizer" --format gguf --out "$work/f32.gguf" \
  --log-level warn
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); peer: $peer"
echo
echo "| type | tensors equal | pdserve ppl | llama.cpp ppl | ratio | greedy (100 tokens) |"
echo "|---|---|---|---|---|---|"
for type in q8_0 q4_0 q4_k_m; do
  ours="$work/pdserve-$type.gguf"
  theirs="$work/llama-$type.gguf"
  "$PDSERVE" quantize --model "$work/f32.gguf" --type "$type" --out "$ours" --log-level warn \
    2>/dev/null
  "$peer/llama-quantize" "$work/f32.gguf" "$theirs" "${type^^}" >/dev/null 2>&1
  same=$(python3 - "$ours" "$theirs" <<'PY'
import sys
sys.path.insert(0, 'tests/data')
from make_quant_vectors import read_gguf, BLOCK
BLOCK = {**BLOCK, 1: (1, 2)}  # F16 too
def tensors(path):
    data, base, table = read_gguf(path)
    out = {}
    for name, (dims, ggml_type, offset) in table.items():
        per_block, block_bytes = BLOCK[ggml_type]
        rows = 1
        for d in dims[1:]:
            rows *= d
        out[name] = (ggml_type, data[base + offset:base + offset + dims[0] // per_block * block_bytes * rows])
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
equal = sum(a.get(n) == v for n, v in b.items())
print(f"{equal}/{len(b)}")
PY
)
  ppl_ours=$("$PDSERVE" eval --model "$ours" --text "$text" --ctx 256 --threads 2 --log-level warn |
    tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["perplexity"])')
  ppl_theirs=$("$peer/llama-perplexity" -m "$ours" -f "$text" -c 256 -t 2 2>&1 |
    sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
  "$peer/llama-server" -m "$ours" --host 127.0.0.1 --port "$port" -t 2 -c 512 \
    >"$work/server.log" 2>&1 &
  for _ in $(seq 60); do curl -sf "127.0.0.1:$port/health" >/dev/null && break; sleep 0.5; done
  greedy=""
  for prompt in "Once upon a time" "Tom and Sue went" "The cat" "Lily"; do
    curl -sf "127.0.0.1:$port/completion" -d "{\"prompt\": \"$prompt\", \"n_predict\": 100, \
\"temperature\": 0, \"n_probs\": 2, \"cache_prompt\": false}" >"$work/completion.json"
    mine=$("$PDSERVE" generate --model "$ours" --prompt "$prompt" --max-tokens 100 --threads 2 \
      --log-level warn)
    greedy+=$(python3 - "$prompt" "$mine" "$work/completion.json" <<'PY'
import json, sys
prompt, mine, path = sys.argv[1:]
d = json.load(open(path))
theirs = (prompt + d['content']).rstrip('\n')
if theirs == mine:
    print('equal; ', end='')
    sys.exit()
first = next((i for i in range(min(len(theirs), len(mine))) if theirs[i] != mine[i]),
             min(len(theirs), len(mine)))
pos, gap = len(prompt), float('nan')
for p in d['completion_probabilities']:  # the token holding the first differing character
    pos += len(p['token'])
    if pos > first:
        top = p['top_logprobs']
        gap = top[0]['logprob'] - top[1]['logprob'] if len(top) > 1 else gap
        break
print(f'char {first} (top-2 gap {gap:.3f}); ', end='')
PY
)
  done
  pkill -f "llama-server.*--port $port" || true
  python3 -c "a,b=$ppl_ours,$ppl_theirs; print(f'| $type | $same | {a:.4f} | {b:.4f} | {a/b:.4f} | ${greedy%; } |')"
done
