#!/usr/bin/env bash
# Records tests/golden/family_logits.json: for each model family, a small random-weight model made
# by `pdserve make-model` (written as a Hugging Face directory) and the logits that the independent
# PyTorch forward pass (torch_forward.py, float64) computes for a fixed token sequence.
# family_golden_test rebuilds the same weights (MakeRandomModel, same config and seed) and compares
# pdserve's engine against them. Needs Debian's python3-torch. Usage:
#   tests/golden/make_family_logits.sh [build/release/tools/pdserve]
set -euo pipefail
cd "$(dirname "$0")/../.."
PDSERVE=$(realpath "${1:-build/release/tools/pdserve}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ids="1,17,42,299,5,100,250,3,77,180,64,12"
cases=()
# name family dim hidden layers heads head_dim kv_heads vocab rope_theta untied (head_dim 0:
# dim / heads; qwen3_wide_heads has Qwen3-0.6B's heads wider than dim / heads)
while read -r name family dim hidden layers heads head_dim kv vocab theta untied; do
  flags=(--family "$family" --dim "$dim" --hidden-dim "$hidden" --layers "$layers"
         --heads "$heads" --head-dim "$head_dim" --kv-heads "$kv" --vocab "$vocab" --seq-len 64
         --rope-theta "$theta" --seed 7 --format hf --out "$work/$name" --log-level warn)
  [ "$untied" = untied ] && flags+=(--untied)
  "$PDSERVE" make-model "${flags[@]}"
  /usr/bin/python3 tests/golden/torch_forward.py logits "$work/$name" --ids "$ids" \
    >"$work/$name.json"
  cases+=("$name $family $dim $hidden $layers $heads $head_dim $kv $vocab $theta $untied")
done <<'EOF'
llama llama 64 160 2 4 0 2 300 10000 tied
mistral mistral 64 160 2 4 0 4 300 1000000 untied
qwen2 qwen2 64 160 2 4 0 2 300 1000000 tied
qwen3 qwen3 64 160 2 4 0 2 300 1000000 untied
qwen3_wide_heads qwen3 64 160 2 4 32 2 300 1000000 tied
EOF
printf '%s\n' "${cases[@]}" | /usr/bin/python3 -c '
import json, os, sys
ids = [int(t) for t in sys.argv[1].split(",")]
out = {"generator": "tests/golden/make_family_logits.sh (torch_forward.py, float64)", "seed": 7,
       "ids": ids, "cases": []}
for line in sys.stdin:
    name, family, dim, hidden, layers, heads, head_dim, kv, vocab, theta, untied = line.split()
    logits = json.load(open(os.path.join(sys.argv[2], name + ".json")))["logits"]
    out["cases"].append({"name": name, "family": family, "dim": int(dim),
        "hidden_dim": int(hidden), "layers": int(layers), "heads": int(heads),
        "head_dim": int(head_dim), "kv_heads": int(kv), "vocab": int(vocab),
        "seq_len": 64, "rope_theta": float(theta), "tied": untied == "tied",
        "logits": [[float(f"{x:.7g}") for x in row] for row in logits]})
json.dump(out, sys.stdout, separators=(",", ":"))
print()
' "$ids" "$work" >tests/golden/family_logits.json
echo "wrote tests/golden/family_logits.json ($(wc -c <tests/golden/family_logits.json) bytes)"
