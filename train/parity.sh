#!/usr/bin/env bash
# The trained model against PyTorch and llama.cpp on its test split (docs/training.md): perplexity
# from `pdserve eval` on the GGUF and on a Hugging Face copy, from llama.cpp's llama-perplexity
# (../shared/peers, built once) on the GGUF, and from the independent float64 forward pass
# (tests/golden/torch_forward.py) on the token ids pdserve gives, all with llama-perplexity's
# protocol (chunks of CTX tokens, the second half of each scored); then the greedy continuations of
# pdserve and PyTorch for a few prompts. Prints Markdown.
#   train/parity.sh [PDSERVE] [CTX]     (env CORPUS=build/train/corpus, TEXT_KIB: a prefix only)
set -euo pipefail
cd "$(dirname "$0")/.."
PDSERVE=$(realpath "${1:-build/release/tools/pdserve}")
CTX=${2:-512}
CORPUS=${CORPUS:-build/train/corpus}
MODEL=models/pd10m/model.gguf
shared=${PDSERVE_SHARED_DIR:-../shared}
peer=${PEER_BIN:-$("$shared/peers/build-llama-server.sh" | tail -1)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${TEXT_KIB:-}" ]; then
  head -c $((TEXT_KIB * 1024)) "$CORPUS/test.txt" >"$work/test.txt"
else
  cp "$CORPUS/test.txt" "$work/test.txt"
fi
"$PDSERVE" convert --model "$MODEL" --out "$work/hf" --format hf --log-level warn
cp models/pd10m/tokenizer.model "$work/hf/tokenizer.model"
ppl() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["perplexity"])'; }
ours=$("$PDSERVE" eval --model "$MODEL" --text "$work/test.txt" --ctx "$CTX" --log-level warn | ppl)
ours_hf=$("$PDSERVE" eval --model "$work/hf" --text "$work/test.txt" --ctx "$CTX" --log-level warn | ppl)
theirs=$("$peer/llama-perplexity" -m "$MODEL" -f "$work/test.txt" -c "$CTX" -t 2 2>&1 |
  sed -n 's/.*Final estimate: PPL = \([0-9.e+]*\).*/\1/p')
"$PDSERVE" tokenize --model "$MODEL" --file "$work/test.txt" --log-level warn >"$work/ids.txt"
torch=$(/usr/bin/python3 tests/golden/torch_forward.py perplexity "$work/hf" \
  --ids-file "$work/ids.txt" --ctx "$CTX" --bos 1 | ppl)
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); peer: $peer"
echo "Text: $(wc -c <"$work/test.txt") bytes of the test split, $(wc -w <"$work/ids.txt") tokens, ctx $CTX"
echo
echo "| | perplexity | ÷ PyTorch |"
echo "|---|---|---|"
python3 -c "
t = $torch
for name, p in (('PyTorch (float64, HF copy)', t), ('pdserve, GGUF', $ours),
                ('pdserve, Hugging Face copy', $ours_hf), ('llama.cpp, GGUF', $theirs)):
    print(f'| {name} | {p:.5f} | {p / t:.5f} |')"
echo
echo "| prompt | pdserve and PyTorch greedy continuations (32 tokens) |"
echo "|---|---|"
for prompt in "The Lord said unto Moses" "In Python, a list" "Call me Ishmael." \
              "The President of the United States"; do
  prompt_ids=$("$PDSERVE" tokenize --model "$MODEL" --prompt "$prompt" --log-level warn | tr ' ' ,)
  ours=$("$PDSERVE" generate --model "$MODEL" --prompt "$prompt" --max-tokens 32 --temperature 0 \
    --log-level warn)
  /usr/bin/python3 tests/golden/torch_forward.py greedy "$work/hf" --ids "$prompt_ids" \
    --tokens 32 >"$work/greedy.json"
  # PyTorch's ids as text (up to an end of sequence, where pdserve stops), beside pdserve's text.
  /usr/bin/python3 - "$work/greedy.json" "$prompt_ids" "$ours" <<'EOF2'
import json, sys
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file="models/pd10m/tokenizer.model")
ids = json.load(open(sys.argv[1]))["ids"]
if 2 in ids:
    ids = ids[:ids.index(2)]
prompt = [int(t) for t in sys.argv[2].split(",")][1:]
theirs = sp.decode(prompt + ids)
ours = sys.argv[3]
verdict = "identical" if ours.strip() == theirs.strip() else "DIFFER (PyTorch: %r)" % theirs
print("| %s | %s: %s |" % (sp.decode(prompt), verdict, ours.replace("\n", " ").replace("|", "\\|")))
EOF2
done
