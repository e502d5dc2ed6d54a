#!/usr/bin/env bash
# Overload without casualties (docs/measurements.md "Overload"): `pdserve up` with one prefill and
# two decode workers (SwiftKV l=4, FP8 per-token, KCache top-32) takes a closed-loop load of
# REQUESTS requests from CONCURRENCY clients (64 prompt + 64 output tokens), on this machine:
#   default   default flags: every request should complete, with no worker changing health;
#   lowqueue  --max-queued QUEUE_LOW: the excess is refused (RESOURCE_EXHAUSTED with the router's
#             retry hint) and loadgen, retrying until each request's deadline (--retries -1),
#             should still complete every request;
#   kill      default flags, one decode worker killed with SIGKILL KILL_AFTER s into the run: the
#             other requests should complete (>= 99.5 %) and its victims fail UNAVAILABLE at once;
#   killprefill  two prefill workers, one killed with SIGKILL KILL_AFTER s in: the same;
#   cancel    every client gives up after CANCEL_AFTER s (loadgen --request-timeout; loadgen cancels
#             the call): a storm of cancellations at every stage, whose pages must all come back.
# After each run: KV pages left in the store, lease expiries, and the router's health changes.
# With TLS=1 the cluster runs TLS between its components and to the clients (`pdserve up`'s
# throwaway CA); by default it runs --insecure.
#   scripts/overload_run.sh [stories260K|stories42M] [PDSERVE] [DIR]
# env: REQUESTS (10000), CONCURRENCY (512), QUEUE_LOW (64), KILL_AFTER (20), CANCEL_AFTER (2),
#      RUNS (default lowqueue kill), TLS (0).
set -euo pipefail
cd "$(dirname "$0")/.."
SHAPE=${1:-stories260K}
PDSERVE=${2:-build/release/tools/pdserve}
DIR=${3:-/tmp/pdserve-overload-$SHAPE}
SHARED=${PDSERVE_SHARED_DIR:-../shared}
REQUESTS=${REQUESTS:-10000}
CONCURRENCY=${CONCURRENCY:-512}
QUEUE_LOW=${QUEUE_LOW:-64}
KILL_AFTER=${KILL_AFTER:-20}
CANCEL_AFTER=${CANCEL_AFTER:-2}
RUNS=${RUNS:-default lowqueue kill}
mkdir -p "$DIR"
source scripts/cluster_lib.sh

case $SHAPE in
  stories260K)
    MODEL=(--model "$SHARED/models/stories260K/stories260K.bin"
           --tokenizer "$SHARED/models/stories260K/tok512.bin") ;;
  stories42M)
    if [[ ! -s $DIR/stories42M.gguf ]]; then
      echo "# making the stories42M-shaped random model" >&2
      "$PDSERVE" make-model --shape stories42M --out "$DIR/stories42M.gguf.tmp" --format gguf \
        --seed 42 >&2
      mv "$DIR/stories42M.gguf.tmp" "$DIR/stories42M.gguf"
    fi
    MODEL=(--model "$DIR/stories42M.gguf") ;;
  *) echo "overload_run.sh: unknown shape '$SHAPE' (stories260K or stories42M)" >&2; exit 2 ;;
esac
COMMON=(--decode-workers 2 --swiftkv-layer 4 --fp8 per-token --kcache-topn 32)

metric() {  # http_address name: the sum of the metric's series
  local url="http://$1/metrics" curl_tls=()
  if [[ ${#CLIENT_TLS[@]} -gt 0 ]]; then url="https://$1/metrics" curl_tls=(--cacert "${CLIENT_TLS[1]}"); fi
  curl -s "${curl_tls[@]}" "$url" |
    awk -v n="$2" '$1 == n || index($1, n "{") == 1 {s += $2} END {print s + 0}'
}
process_http() {  # name: its HTTP address in up's table
  awk -v n="$1" '$1 == n {print $3}' "$DIR/$RUN.up.log"
}

echo "| run | completed | failed | retried requests (retries) | pages left | lease expiries | health changes | throughput req/s | TTFT p50 / p99 ms |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for RUN in $RUNS; do
  extra=() retries=8 timeout=300
  [[ $RUN == lowqueue ]] && extra=(--max-queued "$QUEUE_LOW") retries=-1
  [[ $RUN == killprefill ]] && extra=(--prefill-workers 2)
  [[ $RUN == cancel ]] && timeout=$CANCEL_AFTER retries=0
  start_cluster "$DIR/$RUN.up.log" "${MODEL[@]}" "${COMMON[@]}" "${extra[@]}" --listen 127.0.0.1:0
  "$PDSERVE" loadgen --router "$ROUTER" "${CLIENT_TLS[@]}" --concurrency "$CONCURRENCY" \
    --requests "$REQUESTS" --prompt-tokens 64 --gen-tokens 64 --retries "$retries" \
    --request-timeout "$timeout" \
    --json "$DIR/$RUN.json" --csv "$DIR/$RUN.csv" \
    > "$DIR/$RUN.loadgen.txt" 2> "$DIR/$RUN.loadgen.err" &
  loadgen=$!
  target=
  [[ $RUN == kill ]] && target=decode-1 gauge=pdserve_decode_active_sequences what="sequences active"
  [[ $RUN == killprefill ]] &&
    target=prefill-1 gauge=pdserve_prefill_queue_requests what="requests queued"
  if [[ -n $target ]]; then
    sleep "$KILL_AFTER"
    victim=$(awk -v n="$target" '$1 == n {print $5}' "$DIR/$RUN.up.log")
    in_flight=$(metric "$(process_http "$target")" "$gauge")
    kill -9 "$victim"
    echo "# killed $target (pid $victim) with $in_flight $what on it" >&2
  fi
  wait "$loadgen" || true
  if [[ $RUN == cancel ]]; then
    # Pages of cancelled requests go back at once, or at the latest when their lease runs out.
    kv=$(process_http kvstore) waited=0
    while (( $(metric "$kv" 'pdserve_kvstore_slots{state="allocated"}') +
             $(metric "$kv" 'pdserve_kvstore_slots{state="sealed"}') > 0 && waited < 150 )); do
      sleep 0.1; waited=$((waited + 1))
    done
    echo "# cancel: every page back $((waited / 10)).$((waited % 10)) s after loadgen ended" >&2
  fi
  kv=$(process_http kvstore)
  pages=$(( $(metric "$kv" 'pdserve_kvstore_slots{state="allocated"}') + \
            $(metric "$kv" 'pdserve_kvstore_slots{state="sealed"}') ))
  expiries=$(metric "$kv" pdserve_kvstore_lease_expiries_total)
  changes=$(metric "$ROUTER_HTTP" pdserve_router_worker_health_changes_total)
  cleanup
  python3 - "$DIR/$RUN.json" "$RUN" "$pages" "$expiries" "$changes" <<'PY'
import json, sys
path, run, pages, expiries, changes = sys.argv[1:]
r = json.load(open(path))
q = r["requests"]
print(f"| {run} | {q['completed']} | {q['failed']} {r['errors'] or ''} | {r['retried_requests']} "
      f"({r['retries']}) | {pages} | {expiries} | {changes} | {r['request_throughput']:.1f} | "
      f"{r['ttft_s']['p50'] * 1e3:.0f} / {r['ttft_s']['p99'] * 1e3:.0f} |")
PY
  if [[ $RUN == kill || $RUN == killprefill ]]; then
    # Victims: the UNAVAILABLE failures within 2 s of the first one (the killed worker's requests,
    # and any sent to it before the router saw it dead); every other request should complete.
    python3 - "$DIR/$RUN.csv" "$RUN" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["warmup"] == "0"]
end = lambda r: float(r["send_s"]) + float(r["e2e_s"] or 0)
failures = sorted(end(r) for r in rows if r["code"] == "UNAVAILABLE")
first = failures[0] if failures else 0.0
victims = [t for t in failures if t - first <= 2.0]
others = len(rows) - len(victims)
ok = sum(1 for r in rows if r["code"] == "OK")
print(f"\n{sys.argv[2]}: {len(victims)} victims failed UNAVAILABLE within "
      f"{(victims[-1] - first) if victims else 0:.2f} s of the first; {ok} of {others} other "
      f"requests completed ({100.0 * ok / max(1, others):.2f} %)")
PY
  fi
done
