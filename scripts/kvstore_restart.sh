#!/usr/bin/env bash
# A KV store restart under load (issue 21's fault figures; docs/measurements.md "Security"): a
# disaggregated cluster of separate processes — router, kvstore, prefill, decode, plaintext on
# loopback, as Kubernetes runs them (`pdserve up` stops its cluster when the store dies) — takes
# REQUESTS requests arriving at RATE req/s (Poisson, 64 prompt + 64 output tokens: open loop, so
# that failures do not hurry the load through);
# KILL_AFTER s in, the store is killed with SIGKILL and started again DOWN s later at the same
# address (a new instance: an empty pool and new UCX keys). The requests whose pages were in the
# dead store fail UNAVAILABLE; the workers must reconnect to the new instance by themselves, so
# that every request sent after it is up completes. Prints the failures, the first success after
# the restart, the completions after it and the pages left in the new store.
#   scripts/kvstore_restart.sh [PDSERVE] [DIR]
# env: REQUESTS (1000), RATE (50), KILL_AFTER (5), DOWN (1).
set -euo pipefail
cd "$(dirname "$0")/.."
PDSERVE=${1:-build/release/tools/pdserve}
DIR=${2:-/tmp/pdserve-kvstore-restart}
SHARED=${PDSERVE_SHARED_DIR:-../shared}
REQUESTS=${REQUESTS:-1000}
RATE=${RATE:-50}
KILL_AFTER=${KILL_AFTER:-5}
DOWN=${DOWN:-1}
MODEL=(--model "$SHARED/models/stories260K/stories260K.bin"
       --tokenizer "$SHARED/models/stories260K/tok512.bin")
mkdir -p "$DIR"

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
serve() {  # serve LOG ARGS...: one process in the background; its pid in LAST
  "$PDSERVE" "${@:2}" --insecure --log-level warn > "$1" 2>&1 &
  LAST=$!
  PIDS+=("$LAST")
}
wait_ready() {  # wait_ready HOST:PORT: until its /readyz answers 200
  local waited=0
  until curl -sf "http://$1/readyz" > /dev/null; do
    (( waited++ < 300 )) || { echo "kvstore_restart.sh: $1 never became ready" >&2; exit 1; }
    sleep 0.1
  done
}
metric() {  # metric HOST:PORT NAME: the sum of the metric's series
  curl -s "http://$1/metrics" |
    awk -v n="$2" '$1 == n || index($1, n "{") == 1 {s += $2} END {print s + 0}'
}

ROUTER=127.0.0.1:$(free_port) ROUTER_HTTP=127.0.0.1:$(free_port)
KV=127.0.0.1:$(free_port) KV_HTTP=127.0.0.1:$(free_port)
serve "$DIR/router.log" router "${MODEL[@]}" --listen "$ROUTER" --http-listen "$ROUTER_HTTP"
serve "$DIR/kvstore.log" kvstore --listen "$KV" --http-listen "$KV_HTTP"
wait_ready "$KV_HTTP"
kv_pid=$LAST
for role in prefill decode; do
  http=127.0.0.1:$(free_port)
  serve "$DIR/$role.log" "$role" "${MODEL[@]}" --router "$ROUTER" --kvstore "$KV" \
    --listen "127.0.0.1:$(free_port)" --http-listen "$http"
  wait_ready "$http"
done
wait_ready "$ROUTER_HTTP"

launched=$(python3 -c 'import time; print(time.time())')  # loadgen's clock starts ~then
"$PDSERVE" loadgen --router "$ROUTER" --rate "$RATE" --requests "$REQUESTS" \
  --prompt-tokens 64 --gen-tokens 64 --retries 0 --request-timeout 60 \
  --json "$DIR/loadgen.json" --csv "$DIR/loadgen.csv" > "$DIR/loadgen.txt" 2> "$DIR/loadgen.err" &
loadgen=$!
sleep "$KILL_AFTER"
kill -9 "$kv_pid"
killed=$(python3 -c 'import time; print(time.time())')
echo "# killed the KV store (pid $kv_pid); starting it again in $DOWN s" >&2
sleep "$DOWN"
serve "$DIR/kvstore-2.log" kvstore --listen "$KV" --http-listen "$KV_HTTP"
wait_ready "$KV_HTTP"
back=$(python3 -c 'import time; print(time.time())')
wait "$loadgen" || true
pages=$(( $(metric "$KV_HTTP" 'pdserve_kvstore_slots{state="allocated"}') +
          $(metric "$KV_HTTP" 'pdserve_kvstore_slots{state="sealed"}') ))
echo "| requests | completed | failed | store down | first success after it is back | completed of those sent after | pages left |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
python3 - "$DIR/loadgen.csv" "$launched" "$killed" "$back" "$pages" <<'PY'
import csv, sys
rows_path, start, killed, back, pages = sys.argv[1:]
start, killed, back = float(start), float(killed), float(back)
rows = [r for r in csv.DictReader(open(rows_path)) if r["warmup"] == "0"]
send = lambda r: start + float(r["send_s"])
end = lambda r: send(r) + float(r["e2e_s"] or 0)
failed = [r for r in rows if r["code"] != "OK"]
codes = sorted({r["code"] for r in failed})
after = [r for r in rows if send(r) >= back]
after_ok = sum(1 for r in after if r["code"] == "OK")
firsts = sorted(end(r) for r in rows if r["code"] == "OK" and send(r) >= killed)
first = f"{firsts[0] - back:+.2f} s" if firsts else "none"
print(f"| {len(rows)} | {len(rows) - len(failed)} | {len(failed)} {' '.join(codes)} | "
      f"{back - killed:.2f} s | {first} | {after_ok} of {len(after)} | {pages} |")
PY
