#!/usr/bin/env bash
# Rate sweep (issue 5 acceptance; DESIGN.md §5): the disaggregated cluster with the default
# profile (--swiftkv-layer 4 --fp8 per-token --kcache-topn 32) against monolithic mode (two
# monolithic workers, plain model), in one run, on stories260K with 384-token prompts and 32 generated tokens. For each mode: `pdserve up`
# → `pdserve loadgen --sweep-rates` (open-loop Poisson, same seeded workload at every rate) →
# stop. Loadgen finds the highest rate whose SLO attainment (TTFT ≤ SLO_TTFT_MS and TPOT ≤
# SLO_TPOT_MS, both per request) is ≥ 90 % and draws latency-vs-rate and goodput-vs-rate PNGs.
# Ends with a table of both sweeps side by side. Artefacts in $WORK/{disagg,mono}/.
#
#   scripts/bench_sweep.sh [build-dir]            (default build/bs; built if needed)
#   RATES=4:1.5:10 REQUESTS=200 SLO_TTFT_MS=100 scripts/bench_sweep.sh
#   MODEL_ARGS="--model /tmp/42M.gguf --pool-mib 1024" PROMPT=768 RATES=0.2:1.5:5 \
#     REQUESTS=20 SLO_TTFT_MS=5000 scripts/bench_sweep.sh     (a bigger model; any pdserve up args)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/bs}
PDSERVE=$BUILD/tools/pdserve
SHARED=${PDSERVE_SHARED_DIR:-$(cd .. && pwd)/shared}
WORK=${WORK:-/tmp/pdserve_bench_sweep}
RATES=${RATES:-8:1.4:8}
REQUESTS=${REQUESTS:-150}
WARMUP=${WARMUP:-8}
PROMPT=${PROMPT:-384}
GEN=${GEN:-32}
SLO_TTFT_MS=${SLO_TTFT_MS:-1000}
SLO_TPOT_MS=${SLO_TPOT_MS:-100}
SEED=${SEED:-1}
# Both modes get two worker processes for the two cores (stories260K runs one thread per engine):
# disaggregated one prefill and one decode worker, monolithic two monolithic workers.
MONO_WORKERS=${MONO_WORKERS:-2}
PROFILE=(--swiftkv-layer 4 --fp8 per-token --kcache-topn 32)
mkdir -p "$WORK"

if [[ ! -f $BUILD/build.ninja ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPDSERVE_BUILD_BENCHMARKS=OFF \
    -DPDSERVE_BUILD_TESTS=OFF > "$WORK/cmake.log"
fi
ninja -C "$BUILD" -j2 pdserve > "$WORK/build.log" || { tail -30 "$WORK/build.log" >&2; exit 1; }
# shellcheck source=scripts/cluster_lib.sh
source scripts/cluster_lib.sh

M=$SHARED/models/stories260K
read -r -a MODEL <<< "${MODEL_ARGS:---model $M/stories260K.bin --tokenizer $M/tok512.bin}"
MODEL+=(--threads 1)
for mode in disagg mono; do
  if [[ $mode == disagg ]]; then
    extra=("${PROFILE[@]}")
  else
    extra=(--monolithic --decode-workers "$MONO_WORKERS")
  fi
  echo "=== $mode: sweep $RATES, $REQUESTS requests per rate, $PROMPT+$GEN tokens ($(date +%T))"
  start_cluster "$WORK/$mode.log" "${MODEL[@]}" "${extra[@]}"
  "$PDSERVE" loadgen --router "$ROUTER" --sweep-rates "$RATES" --requests "$REQUESTS" \
    --warmup "$WARMUP" --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --seed "$SEED" \
    --slo-ttft-ms "$SLO_TTFT_MS" --slo-tpot-ms "$SLO_TPOT_MS" --out-dir "$WORK/$mode" \
    > "$WORK/$mode.loadgen.txt"
  cleanup
done

python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
sweeps = {m: json.load(open(f"{work}/{m}/sweep.json")) for m in ("disagg", "mono")}
def ms(x): return "-" if x is None else f"{x * 1000:.1f}"
print(f"\nSLO: TTFT <= {sweeps['disagg']['slo']['ttft_ms']} ms, TPOT <= "
      f"{sweeps['disagg']['slo']['tpot_ms']} ms, attainment >= {sweeps['disagg']['attainment_target']}")
print("| mode | rate req/s | done req/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms "
      "| attainment | goodput req/s | errors |")
print("|---|---|---|---|---|---|---|---|---|---|")
for mode, sweep in sweeps.items():
    for p in sweep["points"]:
        errors = sum(p["errors"].values()) if p.get("errors") else 0
        print(f"| {mode} | {p['rate']:.1f} | {p['request_throughput']:.1f} | {ms(p['ttft_s']['p50'])} "
              f"| {ms(p['ttft_s']['p99'])} | {ms(p['tpot_s']['p50'])} | {ms(p['tpot_s']['p99'])} "
              f"| {p['slo_attainment']:.2f} | {p['goodput']:.1f} | {errors} |")
print()
for mode, sweep in sweeps.items():
    best = sweep["max_rate_meeting_slo"]
    point = next((p for p in sweep["points"] if best is not None and p["rate"] == best), None)
    goodput = f"{point['goodput']:.1f}" if point else "-"
    rate = "none" if best is None else f"{best:.1f}"
    print(f"{mode}: highest rate meeting the SLO = {rate} req/s, goodput there = {goodput} req/s")
PY
