#!/usr/bin/env bash
# Prefix cache on against off (issue 20), in one run: the disaggregated cluster with the default
# profile (--swiftkv-layer 4 --fp8 per-token --kcache-topn 32, one prefill and one decode worker, a
# KV pool of POOL_MIB, default 256 as `pdserve up`'s) on a stories42M-shaped f16 GGUF (random weights, context 2048), loaded by
# `pdserve loadgen` with prompts whose first SHARED of PROMPT tokens are one of GROUPS system
# prompts (PREFIX_GROUPS of them; 75 % of the prompt by default) and GEN generated tokens. For each mode: `pdserve up` → a low-rate run
# (TTFT without queueing) → a rate sweep (each rate its own prompts; SLO TTFT ≤ SLO_TTFT_MS and
# TPOT ≤ SLO_TPOT_MS for ≥ 90 % of requests) → the KV store's hit and miss counters → stop. Ends
# with a table of both modes. Artefacts in $WORK/{on,off}/. About 6 minutes on 2 cores.
#
# With LLAMA_BIN (llama.cpp's bin folder, ../shared/peers/build-llama-server.sh), llama-server runs
# the same load on the same file too (`-t 2 -np 4`, 2048 tokens per slot, its prompt cache on as
# by default), and every run goes over HTTP (pdserve's OpenAI API on the router) instead of gRPC.
#
#   scripts/bench_prefix_cache.sh [build-dir]     (default build/release; pdserve built if needed)
#   PROMPT=1024 SHARED=768 RATES=0.5:1.5:5 scripts/bench_prefix_cache.sh
#   LLAMA_BIN=/tmp/pdserve-peers/llama.cpp-server/bin scripts/bench_prefix_cache.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
PDSERVE=$BUILD/tools/pdserve
WORK=${WORK:-/tmp/pdserve_bench_prefix}
MODEL=${MODEL:-/tmp/pdserve-bench/stories42M-2k-f16.gguf}
PROMPT=${PROMPT:-2000}
SHARED=${SHARED:-1500}
PREFIX_GROUPS=${PREFIX_GROUPS:-4}
GEN=${GEN:-32}
LOW_RATE=${LOW_RATE:-0.3}
LOW_REQUESTS=${LOW_REQUESTS:-16}
RATES=${RATES:-0.4:1.5:5}
REQUESTS=${REQUESTS:-20}
WARMUP=${WARMUP:-4}
SLO_TTFT_MS=${SLO_TTFT_MS:-2000}
SLO_TPOT_MS=${SLO_TPOT_MS:-100}
SEED=${SEED:-1}
POOL_MIB=${POOL_MIB:-256}
PROFILE=(--swiftkv-layer 4 --fp8 per-token --kcache-topn 32)
mkdir -p "$WORK"

# shellcheck source=scripts/cluster_lib.sh
source scripts/cluster_lib.sh
ensure_random_model "$MODEL" stories42M 2048 "$WORK"

WORKLOAD=(--prompt-tokens "$PROMPT" --gen-tokens "$GEN" --shared-prefix-tokens "$SHARED"
          --prefix-groups "$PREFIX_GROUPS" --warmup "$WARMUP")
MODES=(off on)
if [[ -n ${LLAMA_BIN:-} ]]; then MODES+=(llama); fi
for mode in "${MODES[@]}"; do
  echo "=== $mode: $PROMPT-token prompts, $SHARED shared ($PREFIX_GROUPS groups) ($(date +%T))"
  if [[ $mode == llama ]]; then
    start_llama_server "$WORK/$mode.log" 8093 -m "$MODEL" -t 2 -np 4 -c 8192
    TARGET=(--protocol http --url 127.0.0.1:8093)
  else
    cache=$([[ $mode == on ]] && echo true || echo false)
    start_cluster "$WORK/$mode.log" --model "$MODEL" --threads 1 --pool-mib "$POOL_MIB" \
      "${PROFILE[@]}" --prefix-cache="$cache"
    TARGET=(--router "$ROUTER")
    if [[ -n ${LLAMA_BIN:-} ]]; then TARGET=(--protocol http --url "$ROUTER_HTTP"); fi
  fi
  mkdir -p "$WORK/$mode"
  "$PDSERVE" loadgen "${TARGET[@]}" --rate "$LOW_RATE" --requests "$LOW_REQUESTS" \
    "${WORKLOAD[@]}" --seed "$SEED" --json "$WORK/$mode/low_rate.json" \
    > "$WORK/$mode.low_rate.txt"
  # Seeds SEED + 1, + 2, ... (one per rate): no rate reuses another's prompts (the shared
  # prefixes differ from the low-rate run's too, so the first request of each group misses).
  "$PDSERVE" loadgen "${TARGET[@]}" --sweep-rates "$RATES" --requests "$REQUESTS" \
    "${WORKLOAD[@]}" --seed "$((SEED + 1))" --slo-ttft-ms "$SLO_TTFT_MS" \
    --slo-tpot-ms "$SLO_TPOT_MS" --out-dir "$WORK/$mode" > "$WORK/$mode.sweep.txt"
  if [[ $mode == llama ]]; then
    stop_llama_server
  else
    kvstore_http=$(awk '$1 == "kvstore" {print $3}' "$WORK/$mode.log")
    curl -s "http://$kvstore_http/metrics" > "$WORK/$mode/kvstore_metrics.txt"
    cleanup
  fi
done

python3 - "$WORK" "$PROMPT" "$SHARED" <<'PY'
import json, re, sys
work, prompt, shared = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def ms(x): return "-" if x is None else f"{x * 1000:.0f}"
import os
modes = [m for m in ("off", "on", "llama") if os.path.exists(f"{work}/{m}/sweep.json")]
low = {m: json.load(open(f"{work}/{m}/low_rate.json")) for m in modes}
sweeps = {m: json.load(open(f"{work}/{m}/sweep.json")) for m in modes}
print(f"\nlow rate ({low['on']['config']['rate']} req/s, no queueing):")
print("| server | TTFT p50 ms | TTFT p90 ms | TPOT p50 ms |")
print("|---|---|---|---|")
for m, r in low.items():
    print(f"| {m} | {ms(r['ttft_s']['p50'])} | {ms(r['ttft_s']['p90'])} | {ms(r['tpot_s']['p50'])} |")
ratio = low["off"]["ttft_s"]["p50"] / low["on"]["ttft_s"]["p50"]
print(f"TTFT p50 off / on: {ratio:.2f}")
slo = sweeps["on"]["slo"]
print(f"\nsweep (SLO TTFT <= {slo['ttft_ms']} ms, TPOT <= {slo['tpot_ms']} ms, "
      f">= {sweeps['on']['attainment_target'] * 100:.0f} %):")
print("| server | rate req/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | attainment | goodput req/s |")
print("|---|---|---|---|---|---|---|")
best = {}
for m, sweep in sweeps.items():
    for p in sweep["points"]:
        print(f"| {m} | {p['rate']:.2f} | {ms(p['ttft_s']['p50'])} | {ms(p['ttft_s']['p99'])} "
              f"| {ms(p['tpot_s']['p50'])} | {p['slo_attainment']:.2f} | {p['goodput']:.2f} |")
    best[m] = max((p["goodput"] for p in sweep["points"] if p["slo_attainment"] >= sweep["attainment_target"]),
                  default=0.0)
print(f"best goodput meeting the SLO: off {best['off']:.2f}, on {best['on']:.2f} req/s"
      + (f" ({best['on'] / best['off']:.2f}x)" if best["off"] > 0 else "")
      + (f"; llama-server {best['llama']:.2f} req/s" if "llama" in best else ""))
if "llama" in low:
    print(f"TTFT p50 llama-server / pdserve (cache on): "
          f"{low['llama']['ttft_s']['p50'] / low['on']['ttft_s']['p50']:.2f}")
text = open(f"{work}/on/kvstore_metrics.txt").read()
def counter(result):
    m = re.search(r'pdserve_kvstore_prefix_lookups_pages_total\{result="%s"\} (\S+)' % result, text)
    return float(m.group(1)) if m else 0.0
hit, miss = counter("hit"), counter("miss")
page = 16
reusable = (shared // page) / ((prompt - 1) // page)
print(f"store hit rate (pages): {hit / max(hit + miss, 1) * 100:.1f} % "
      f"({hit:.0f} hit, {miss:.0f} miss); reusable share of named pages: {reusable * 100:.1f} %")
PY
