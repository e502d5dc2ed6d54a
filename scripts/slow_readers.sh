#!/usr/bin/env bash
# Slow readers against the OpenAI API (issue 21's fault figures; docs/measurements.md "Security"):
# SLOW clients stream long completions (GEN_SLOW tokens) and read them at RATE_LIMIT bytes/s
# (`curl --limit-rate`), holding their connections for minutes, while loadgen sends the normal
# load over the same HTTP port (REQUESTS requests at RATE req/s, Poisson, 64 + 32 tokens) once
# their tokens are generated and only their reading goes on. The same load without them runs
# first, in the same cluster. Prints TTFT and end-to-end p50/p99 and the
# completed requests of both, and how many slow streams were still open at the end.
#   scripts/slow_readers.sh [PDSERVE] [DIR]
# env: SLOW (100), RATE_LIMIT (200), GEN_SLOW (400), REQUESTS (200), RATE (10).
set -euo pipefail
cd "$(dirname "$0")/.."
PDSERVE=${1:-build/release/tools/pdserve}
DIR=${2:-/tmp/pdserve-slow-readers}
SHARED=${PDSERVE_SHARED_DIR:-../shared}
SLOW=${SLOW:-100}
RATE_LIMIT=${RATE_LIMIT:-200}
GEN_SLOW=${GEN_SLOW:-400}
REQUESTS=${REQUESTS:-200}
RATE=${RATE:-10}
mkdir -p "$DIR"
# shellcheck source=scripts/cluster_lib.sh
source scripts/cluster_lib.sh
CURLS=()
stop_readers() {
  for pid in "${CURLS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${CURLS[@]}"; do wait "$pid" 2>/dev/null || true; done
  CURLS=()
}
trap 'stop_readers; cleanup' EXIT

start_cluster "$DIR/up.log" --model "$SHARED/models/stories260K/stories260K.bin" \
  --tokenizer "$SHARED/models/stories260K/tok512.bin" --listen 127.0.0.1:0

load() {  # load NAME: the normal load over HTTP; its JSON in $DIR/NAME.json
  "$PDSERVE" loadgen --protocol http --url "http://$ROUTER_HTTP" --rate "$RATE" \
    --requests "$REQUESTS" --prompt-tokens 64 --gen-tokens 32 --retries 0 \
    --json "$DIR/$1.json" > "$DIR/$1.txt" 2> "$DIR/$1.err"
}

load alone
model=$(curl -s "http://$ROUTER_HTTP/v1/models" | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')
body=$(printf '{"model":"%s","prompt":"Once upon a time","max_tokens":%d,"stream":true,"ignore_eos":true}' \
  "$model" "$GEN_SLOW")
for ((i = 0; i < SLOW; i++)); do
  curl -s -N --limit-rate "$RATE_LIMIT" -H 'Content-Type: application/json' -d "$body" \
    "http://$ROUTER_HTTP/v1/completions" > "$DIR/slow-$i.txt" 2>&1 &
  CURLS+=($!)
done
# Once every slow stream is generated (the decode workers idle), only their reading goes on.
decode_http=$(awk '$1 ~ /^(decode|monolithic)-/ {print $3}' "$DIR/up.log")
sleep 1  # the slow requests through the router and prefill
waited=10
while (( waited < 600 )); do
  busy=0
  for http in $decode_http; do
    n=$(curl -s "http://$http/metrics" |
        awk '$1 == "pdserve_decode_active_sequences" {s += $2} END {print s + 0}')
    busy=$((busy + n))
  done
  (( busy == 0 )) && break
  sleep 0.1; waited=$((waited + 1))
done
echo "# the slow streams were generated $((waited / 10)) s after they began" >&2
load with_slow_readers
open=0
for pid in "${CURLS[@]}"; do kill -0 "$pid" 2>/dev/null && open=$((open + 1)); done
stop_readers

echo "| load | completed | TTFT p50 / p99 ms | end to end p50 / p99 ms | slow streams open at the end |"
echo "| --- | --- | --- | --- | --- |"
python3 - "$DIR" "$open" "$SLOW" <<'PY'
import json, sys
d, open_, slow = sys.argv[1:]
for name, label, still in (("alone", "alone", "-"), ("with_slow_readers", f"with {slow} slow readers", open_)):
    r = json.load(open(f"{d}/{name}.json"))
    ms = lambda k, p: r[k][p] * 1e3
    print(f"| {label} | {r['requests']['completed']} of {r['requests']['completed'] + r['requests']['failed']} | "
          f"{ms('ttft_s', 'p50'):.0f} / {ms('ttft_s', 'p99'):.0f} | {ms('e2e_s', 'p50'):.0f} / {ms('e2e_s', 'p99'):.0f} | {still} |")
PY
