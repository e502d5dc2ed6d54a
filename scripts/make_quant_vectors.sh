#!/usr/bin/env bash
# Remakes the quantized test data. tests/data/tiny-q4_k_m.gguf: a random 1-layer model (dim 256,
# FFN 256, vocab 320) quantized by llama-quantize to Q4_K_M (Q4_K and Q6_K matrices, as users
# download them). tests/data/quant_vectors.gguf: a random 1-layer model (dim 256, FFN 512) made by
# `pdserve make-model`, quantized by llama.cpp's llama-quantize (../shared/peers) to every block
# format pdserve reads and dequantized back to F32 by llama-quantize; the first rows of
# blk.0.ffn_gate.weight of each, blocks and ggml's floats, and the unquantized rows go into one
# small GGUF
# (tests/data/make_quant_vectors.py). Usage: scripts/make_quant_vectors.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
pdserve=${1:-build/release}/tools/pdserve
shared=${PDSERVE_SHARED_DIR:-../shared}
bin=$("$shared/peers/build-llama.cpp.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$pdserve" make-model --dim 256 --hidden-dim 512 --layers 1 --heads 4 --kv-heads 2 --vocab 512 \
  --untied --format gguf --dtype f32 --out "$work/f32.gguf" 2>/dev/null
specs=("source=$work/f32.gguf")
for type in Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K; do
  ftype=$type
  case $type in Q4_K | Q5_K) ftype=${type}_M ;; esac  # --pure: every tensor in the type
  "$bin/llama-quantize" --pure "$work/f32.gguf" "$work/$type.gguf" "$ftype" >/dev/null 2>&1
  "$bin/llama-quantize" --allow-requantize "$work/$type.gguf" "$work/$type-deq.gguf" F32 \
    >/dev/null 2>&1
  specs+=("${type,,}=$work/$type.gguf:$work/$type-deq.gguf")
done
/usr/bin/python3 tests/data/make_quant_vectors.py tests/data/quant_vectors.gguf \
  blk.0.ffn_gate.weight 8 16 "${specs[@]}"
"$pdserve" make-model --dim 256 --hidden-dim 256 --layers 1 --heads 4 --kv-heads 2 --vocab 320 \
  --format gguf --dtype f32 --out "$work/tiny.gguf" 2>/dev/null
"$bin/llama-quantize" "$work/tiny.gguf" tests/data/tiny-q4_k_m.gguf Q4_K_M >/dev/null 2>&1
echo "wrote tests/data/quant_vectors.gguf and tests/data/tiny-q4_k_m.gguf"
