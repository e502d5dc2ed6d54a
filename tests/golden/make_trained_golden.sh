#!/usr/bin/env bash
# Records tests/golden/trained_model.json for trained_model_test: on the committed trained model
# (models/pd10m/model.gguf), a text excerpt of the corpus' test split, its token ids from Python's
# SentencePiece (the tokenizer's own library), and what the independent PyTorch forward pass
# (torch_forward.py, float64) computes on the same weights (the GGUF written out as a Hugging Face
# directory): the log-probability of each next token, the last position's logits and a greedy
# continuation. Needs Debian's python3-torch and python3-sentencepiece and the corpus
# (train/build_model.sh). Usage:
#   tests/golden/make_trained_golden.sh [build/release/tools/pdserve] [CORPUS_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
PDSERVE=$(realpath "${1:-build/release/tools/pdserve}")
CORPUS=${2:-build/train/corpus}
MODEL=models/pd10m/model.gguf
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PDSERVE" convert --model "$MODEL" --out "$work/hf" --format hf --log-level warn
# The excerpt: the first 1,200 characters of the test split, cut at a space.
/usr/bin/python3 - "$CORPUS/test.txt" models/pd10m/tokenizer.model "$work" <<'EOF'
import json, sys
import sentencepiece as spm
text = open(sys.argv[1], encoding="utf-8").read().replace("\n\f\n", "\n\n")
cut = text.rindex(" ", 0, 1200)
excerpt = text[:cut]
sp = spm.SentencePieceProcessor(model_file=sys.argv[2])
ids = [sp.bos_id()] + sp.encode(excerpt)
json.dump({"text": excerpt, "ids": ids}, open(sys.argv[3] + "/excerpt.json", "w"))
print(",".join(map(str, ids)), file=open(sys.argv[3] + "/ids.txt", "w"))
print(",".join(map(str, ids[:24])), file=open(sys.argv[3] + "/prompt.txt", "w"))
EOF
/usr/bin/python3 tests/golden/torch_forward.py logits "$work/hf" --ids "$(cat "$work/ids.txt")" \
  >"$work/logits.json"
/usr/bin/python3 tests/golden/torch_forward.py greedy "$work/hf" --ids "$(cat "$work/prompt.txt")" \
  --tokens 32 >"$work/greedy.json"
/usr/bin/python3 - "$work" <<'EOF' >tests/golden/trained_model.json
import json, math, sys
work = sys.argv[1]
excerpt = json.load(open(work + "/excerpt.json"))
logits = json.load(open(work + "/logits.json"))["logits"]
ids = excerpt["ids"]
log_probs = []
for row, next_id in zip(logits, ids[1:]):
    top = max(row)
    log_z = top + math.log(sum(math.exp(x - top) for x in row))
    log_probs.append(row[next_id] - log_z)
prompt = ids[:24]
greedy = json.load(open(work + "/greedy.json"))["ids"]
out = {"generator": "tests/golden/make_trained_golden.sh (torch_forward.py, float64)",
       "model": "models/pd10m/model.gguf", "text": excerpt["text"], "ids": ids,
       "next_token_log_probs": [float(f"{x:.9g}") for x in log_probs],
       "perplexity": math.exp(-sum(log_probs) / len(log_probs)),
       "last_logits": [float(f"{x:.7g}") for x in logits[-1]],
       "greedy_prompt": prompt, "greedy_ids": greedy}
json.dump(out, sys.stdout, separators=(",", ":"))
print()
print(f"{len(ids)} tokens, perplexity {out['perplexity']:.4f}, greedy {greedy}", file=sys.stderr)
EOF
echo "wrote tests/golden/trained_model.json ($(wc -c <tests/golden/trained_model.json) bytes)"
