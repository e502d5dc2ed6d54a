#!/usr/bin/env bash
# KV-aware routing against least-tokens (issue 20), in one run: `pdserve up` with two prefill and two
# decode workers (one thread each) and a KV store per decode worker (--kvstores 2, as two nodes),
# the prefix cache on, the default profile (--swiftkv-layer 4 --fp8 per-token --kcache-topn 32),
# on a stories42M-shaped f16 GGUF (random weights, context 2048). `pdserve loadgen` runs multi-turn
# chats (CONVERSATIONS conversations of TURNS turns: first message FIRST tokens, later ones TURN,
# answers ANSWER, THINK s between turns, each turn's prompt the whole history) at each rate of
# RATES conversations/s (each rate its own prompts), once per router policy (POLICIES). After each
# policy's sweep: the router's expected and served cached tokens and each store's page hits and
# misses. Prints a table per rate: TTFT p50 / p90, TPOT p50, the share of prompt tokens the cache
# served, the share of requests meeting the SLO (TTFT ≤ SLO_TTFT_MS, TPOT ≤ SLO_TPOT_MS), and
# least-tokens' TTFT p50 over kv-aware's. Artefacts in $WORK/<policy>/. About 8 minutes
# on 2 cores.
#
#   scripts/bench_kv_routing.sh [build-dir]     (default build/release; pdserve built if needed)
#   RATES=0.2:2:3 CONVERSATIONS=16 scripts/bench_kv_routing.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
PDSERVE=$BUILD/tools/pdserve
WORK=${WORK:-/tmp/pdserve_bench_kv_routing}
MODEL=${MODEL:-/tmp/pdserve-bench/stories42M-2k-f16.gguf}
POLICIES=${POLICIES:-least-tokens kv-aware}
RATES=${RATES:-0.2:2:3}
CONVERSATIONS=${CONVERSATIONS:-16}
TURNS=${TURNS:-4}
FIRST=${FIRST:-1024}
TURN=${TURN:-64}
ANSWER=${ANSWER:-32}
THINK=${THINK:-1}
SLO_TTFT_MS=${SLO_TTFT_MS:-2000}
SLO_TPOT_MS=${SLO_TPOT_MS:-100}
SEED=${SEED:-1}
PROFILE=(--swiftkv-layer 4 --fp8 per-token --kcache-topn 32)
mkdir -p "$WORK"

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
commit=$(git describe --always --dirty 2>/dev/null || echo unknown)
echo "CPU: $cpu; pdserve $commit"
# shellcheck source=scripts/cluster_lib.sh
source scripts/cluster_lib.sh
ensure_random_model "$MODEL" stories42M 2048 "$WORK"

for policy in $POLICIES; do
  echo "=== $policy ($(date +%T))"
  start_cluster "$WORK/$policy.log" --model "$MODEL" --threads 1 --prefill-workers 2 \
    --decode-workers 2 --kvstores 2 --policy "$policy" "${PROFILE[@]}"
  mkdir -p "$WORK/$policy"
  "$PDSERVE" loadgen --router "$ROUTER" --conversations "$CONVERSATIONS" --turns "$TURNS" \
    --prompt-tokens "$FIRST" --turn-tokens "$TURN" --gen-tokens "$ANSWER" --think-time "$THINK" \
    --warmup 1 --sweep-rates "$RATES" --seed "$SEED" --slo-ttft-ms "$SLO_TTFT_MS" \
    --slo-tpot-ms "$SLO_TPOT_MS" --out-dir "$WORK/$policy" \
    > "$WORK/$policy.txt" 2>&1 || { tail -20 "$WORK/$policy.txt" >&2; exit 1; }
  router_http=$(awk '$1 == "router" {print $3}' "$WORK/$policy.log")
  curl -s "http://$router_http/metrics" > "$WORK/$policy/router_metrics.txt"
  for store in kvstore-0 kvstore-1; do
    http=$(awk -v s="$store" '$1 == s {print $3}' "$WORK/$policy.log")
    curl -s "http://$http/metrics" > "$WORK/$policy/${store}_metrics.txt"
  done
  cleanup
done

python3 - "$WORK" "$POLICIES" "$cpu" "$commit" <<'PY'
import json, re, sys
work, policies, cpu, commit = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
def ms(x): return "-" if x is None else f"{x * 1000:.0f}"
def counter(path, name, label):
    m = re.search(r'%s\{%s\} (\S+)' % (name, label), open(path).read())
    return float(m.group(1)) if m else 0.0
sweeps = {p: json.load(open(f"{work}/{p}/sweep.json")) for p in policies}
print(f"\nCPU {cpu}, pdserve {commit}")
print("| policy | conversations/s | TTFT p50 ms | TTFT p90 ms | TPOT p50 ms | cached prompt share "
      "| SLO attainment |")
print("|---|---|---|---|---|---|---|")
for p, sweep in sweeps.items():
    for point in sweep["points"]:
        cached = point.get("cached_prompt_tokens") or {}
        share = cached.get("share")
        print(f"| {p} | {point['rate']:.3g} | {ms(point['ttft_s']['p50'])} | "
              f"{ms(point['ttft_s']['p90'])} | {ms(point['tpot_s']['p50'])} | "
              f"{'-' if share is None else f'{share:.2f}'} | {point['slo_attainment']:.0%} |")
if {"least-tokens", "kv-aware"} <= set(sweeps):
    for a, b in zip(sweeps["least-tokens"]["points"], sweeps["kv-aware"]["points"]):
        print(f"at {a['rate']:.3g} conversations/s: TTFT p50 least-tokens / kv-aware "
              f"{a['ttft_s']['p50'] / b['ttft_s']['p50']:.2f}")
for p in policies:
    router = f"{work}/{p}/router_metrics.txt"
    expected = counter(router, "pdserve_router_cached_prompt_tokens_total", 'source="expected"')
    served = counter(router, "pdserve_router_cached_prompt_tokens_total", 'source="served"')
    stores = []
    for s in ("kvstore-0", "kvstore-1"):
        path = f"{work}/{p}/{s}_metrics.txt"
        hit = counter(path, "pdserve_kvstore_prefix_lookups_pages_total", 'result="hit"')
        miss = counter(path, "pdserve_kvstore_prefix_lookups_pages_total", 'result="miss"')
        stores.append(f"{s} {hit:.0f} hit / {miss:.0f} miss pages")
    print(f"{p}: router expected {expected:.0f} cached tokens, served {served:.0f}; "
          + "; ".join(stores))
PY
