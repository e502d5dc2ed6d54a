#!/usr/bin/env bash
# Sets up dependencies, builds pdserve (Release) and generates text with the stories260K model.
# Usage: scripts/demo.sh [PROMPT]
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cmake --preset release > /dev/null
cmake --build --preset release -j "$(nproc)" --target pdserve
SHARED=${PDSERVE_SHARED_DIR:-../shared}
build/release/tools/pdserve generate \
  --model "$SHARED/models/stories260K/stories260K.bin" \
  --tokenizer "$SHARED/models/stories260K/tok512.bin" \
  --prompt "${1:-Once upon a time}" --max-tokens 200
