#!/usr/bin/env bash
# What TLS costs (issue 21: ≤ 10% of TTFT p50 and of throughput at the same rate): the same
# disaggregated cluster and load with TLS between every component and to the client (`pdserve up`'s
# throwaway CA) and with --insecure, alternated ROUNDS times in one run. The load: Poisson arrivals
# at RATE req/s (or, with CONCURRENCY=N, N clients in a closed loop: the throughput ceiling),
# REQUESTS requests of PROMPT prompt + GEN generated tokens, over gRPC (PROTOCOL=grpc) or the
# OpenAI API (PROTOCOL=http: HTTPS against HTTP). Prints each run and the medians' ratios;
# per-run JSON in $WORK.
#
#   scripts/bench_tls.sh                      (pd10m with its default profile)
#   PROTOCOL=http RATE=8 ROUNDS=3 scripts/bench_tls.sh
#   CONCURRENCY=16 scripts/bench_tls.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PDSERVE=${PDSERVE:-build/release/tools/pdserve}
WORK=${WORK:-/tmp/pdserve_bench_tls}
MODEL=(--model "${MODEL:-models/pd10m/model.gguf}")
[[ -n ${MODEL_FLAGS:-} ]] || MODEL_FLAGS="--flagfile models/pd10m/default.flags"
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-6}
REQUESTS=${REQUESTS:-120}
PROMPT=${PROMPT:-256}
GEN=${GEN:-32}
PROTOCOL=${PROTOCOL:-grpc}
LOAD=(--rate "$RATE")
[[ -n ${CONCURRENCY:-} ]] && LOAD=(--concurrency "$CONCURRENCY")
mkdir -p "$WORK"
# shellcheck source=scripts/cluster_lib.sh
source scripts/cluster_lib.sh

run() {  # run NAME ROUND: one cluster, one load, one JSON
  local name=$1 round=$2 target
  # shellcheck disable=SC2086  # MODEL_FLAGS is a list of flags
  start_cluster "$WORK/$name-$round.log" "${MODEL[@]}" $MODEL_FLAGS --threads 1
  if [[ $PROTOCOL == http ]]; then
    local scheme=http
    [[ ${#CLIENT_TLS[@]} -gt 0 ]] && scheme=https
    target=(--protocol http --url "$scheme://$ROUTER_HTTP")
  else
    target=(--router "$ROUTER")
  fi
  "$PDSERVE" loadgen "${target[@]}" "${CLIENT_TLS[@]}" "${LOAD[@]}" --requests "$REQUESTS" \
    --warmup 5 --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --seed "$round" \
    --json "$WORK/$name-$round.json" > "$WORK/$name-$round.out"
  cleanup
  python3 - "$WORK/$name-$round.json" "$name" "$round" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:>8} round {sys.argv[3]}: TTFT p50 {r['ttft_s']['p50'] * 1e3:7.1f} ms  "
      f"TPOT p50 {r['tpot_s']['p50'] * 1e3:6.1f} ms  {r['output_tokens_per_s']:7.1f} "
      f"out tok/s  completed {r['requests']['completed']}")
EOF
}

for round in $(seq 1 "$ROUNDS"); do
  TLS=1 run tls "$round"
  TLS=0 run insecure "$round"
done

python3 - "$WORK" "$ROUNDS" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def median(name, pick):
    return statistics.median(pick(json.load(open(f"{work}/{name}-{r}.json")))
                             for r in range(1, rounds + 1))
for label, pick in [("TTFT p50 (ms)", lambda r: r["ttft_s"]["p50"] * 1e3),
                    ("TPOT p50 (ms)", lambda r: r["tpot_s"]["p50"] * 1e3),
                    ("output tok/s", lambda r: r["output_tokens_per_s"])]:
    tls, plain = median("tls", pick), median("insecure", pick)
    print(f"{label:>14}: TLS {tls:8.2f}  insecure {plain:8.2f}  TLS/insecure {tls / plain:.3f}")
EOF
