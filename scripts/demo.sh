#!/usr/bin/env bash
# Sets up dependencies, builds pdserve (Release), starts the disaggregated cluster on the
# stories260K model (router, KV store, one prefill and one decode worker, each its own process, with
# the default compression profile; TLS between them from a throwaway CA), streams the answer to one
# prompt over TLS with the request's timings, and stops the cluster.
# Usage: scripts/demo.sh [PROMPT]
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cmake --preset release > /dev/null
cmake --build --preset release -j "$(nproc)" --target pdserve
SHARED=${PDSERVE_SHARED_DIR:-../shared}
B=build/release/tools/pdserve
MODEL=(--model "$SHARED/models/stories260K/stories260K.bin"
       --tokenizer "$SHARED/models/stories260K/tok512.bin")

out=$(mktemp)
"$B" up "${MODEL[@]}" --swiftkv-layer 4 --fp8 per-token --kcache-topn 32 --log-level warn \
  > "$out" &
up_pid=$!
trap 'kill -TERM $up_pid 2>/dev/null; wait $up_pid 2>/dev/null; rm -f "$out"' EXIT
router=""
for _ in $(seq 1 600); do
  router=$(awk '/^PDSERVE_READY up / {print $3}' "$out")
  [ -n "$router" ] && break
  kill -0 $up_pid 2>/dev/null || { echo "demo: the cluster failed to start" >&2; exit 1; }
  sleep 0.1
done
[ -n "$router" ] || { echo "demo: the cluster did not become ready" >&2; exit 1; }
grep -v PDSERVE_ "$out" >&2
ca=$(awk '/^PDSERVE_TLS_CA / {print $2}' "$out")
"$B" client --router "$router" --tls-ca "$ca" --prompt "${1:-Once upon a time}" --max-tokens 200 --timings
