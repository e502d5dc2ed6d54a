#!/usr/bin/env bash
# Token retention (KVCrush, issue 19) against the KV store's capacity, in one run: the
# disaggregated cluster on the trained model pd10m with its default profile (ZACK half + FP8
# per-page, models/pd10m/default.flags), one prefill and one decode worker, without retention and
# at each of BUDGETS (default "25% 10%"). For each: `pdserve up` → `pdserve loadgen` closed loop
# (CONCURRENCY clients, REQUESTS requests of PROMPT prompt tokens and GEN generated ones) while the
# KV store's /metrics is sampled every 0.2 s → its slots in use per active lease (a request holds
# its pages from prefill to the end of its decode) → stop. Prints, per setting, the store's slots
# per request and the requests its pool holds (its slots ÷ that), the prefill's stored KV bytes
# per request, and TTFT/TPOT p50. About 4 minutes on 2 cores.
#
#   scripts/bench_kv_retention.sh [build-dir]     (default build/release; pdserve built if needed)
#   BUDGETS="50% 25% 12.5%" PROMPT=1000 scripts/bench_kv_retention.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
PDSERVE=$BUILD/tools/pdserve
WORK=${WORK:-/tmp/pdserve_bench_kv_retention}
BUDGETS=${BUDGETS:-25% 10%}
PROMPT=${PROMPT:-900}
GEN=${GEN:-64}
CONCURRENCY=${CONCURRENCY:-6}
REQUESTS=${REQUESTS:-24}
POOL_MIB=${POOL_MIB:-64}
SEED=${SEED:-1}
mkdir -p "$WORK"
if [[ ! -x $PDSERVE ]]; then
  ninja -C "$BUILD" -j2 pdserve > "$WORK/build.log" || { tail -30 "$WORK/build.log" >&2; exit 1; }
fi
# shellcheck source=scripts/cluster_lib.sh
source scripts/cluster_lib.sh

# Samples the KV store's slot gauges until loadgen (pid $1) ends: "held total leases" per line,
# held = allocated + sealed slots.
sample_store() {
  local loadgen=$1 url=$2 out=$3
  : > "$out"
  while kill -0 "$loadgen" 2>/dev/null; do
    curl -s "$url" | awk '
      /^pdserve_kvstore_slots\{/ { total += $2; if ($1 ~ /"(allocated|sealed)"/) used += $2 }
      /^pdserve_kvstore_leases_active / { leases = $2 }
      END { print used + 0, total + 0, leases + 0 }' >> "$out"
    sleep 0.2
  done
}

SETTINGS=(off)
for budget in $BUDGETS; do SETTINGS+=("$budget"); done
for setting in "${SETTINGS[@]}"; do
  name=${setting//%/pct}
  echo "=== retention $setting ($(date +%T))"
  extra=()
  [[ $setting != off ]] && extra=(--kvcrush-budget "$setting")
  start_cluster "$WORK/$name.log" --model models/pd10m/model.gguf \
    --flagfile models/pd10m/default.flags --threads 1 --pool-mib "$POOL_MIB" "${extra[@]}"
  kvstore_http=$(awk '$1 == "kvstore" {print $3}' "$WORK/$name.log")
  prefill_http=$(awk '$1 == "prefill-0" {print $3}' "$WORK/$name.log")
  "$PDSERVE" loadgen --router "$ROUTER" --concurrency "$CONCURRENCY" --requests "$REQUESTS" \
    --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --warmup 0 --seed "$SEED" --json "$WORK/$name.json" \
    > "$WORK/$name.loadgen.txt" &
  loadgen=$!
  sample_store "$loadgen" "http://$kvstore_http/metrics" "$WORK/$name.samples"
  wait "$loadgen"
  curl -s "http://$prefill_http/metrics" > "$WORK/$name.prefill_metrics.txt"
  cleanup
done

python3 - "$WORK" "$REQUESTS" "${SETTINGS[@]}" <<'PY'
import json, re, sys
work, requests, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| retention | store slots per request | requests the pool holds | stored KV bytes per request "
      "| vs off | TTFT p50 ms | TPOT p50 ms | completed |")
print("|---|---|---|---|---|---|---|---|")
base = None
for s in settings:
    name = s.replace("%", "pct")
    rows = [tuple(map(float, l.split())) for l in open(f"{work}/{name}.samples") if l.strip()]
    rows = [r for r in rows if r[2] > 0]  # while requests hold pages
    per_request = sorted(used / leases for used, total, leases in rows)
    median = per_request[len(per_request) // 2] if per_request else float("nan")
    total = max(r[1] for r in rows) if rows else float("nan")
    text = open(f"{work}/{name}.prefill_metrics.txt").read()
    stored = float(re.search(r"^pdserve_prefill_kv_stored_bytes_total (\S+)", text, re.M).group(1))
    report = json.load(open(f"{work}/{name}.json"))
    per = stored / requests
    base = base or per
    print(f"| {s} | {median:.1f} | {total / median:.0f} | {per / 1024:.0f} KiB | "
          f"{base / per:.2f}x | {report['ttft_s']['p50'] * 1000:.0f} | "
          f"{report['tpot_s']['p50'] * 1000:.1f} | {report['requests']['completed']}/{requests} |")
PY
