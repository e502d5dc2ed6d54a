#!/usr/bin/env bash
# Compares two pdserve binaries on one model in the same run, alternating A and B so that machine
# noise hits both alike; prints per-run figures and the medians and B/A ratios.
# Usage: scripts/bench_ab.sh A_BINARY B_BINARY MODEL [ROUNDS] [-- extra bench flags]
set -euo pipefail
A=$1 B=$2 MODEL=$3 ROUNDS=${4:-5}
shift $(( $# >= 4 ? 4 : 3 ))
[ "${1:-}" = "--" ] && shift
for ((i = 0; i < ROUNDS; ++i)); do
  for side in A B; do
    bin=$A; [ "$side" = B ] && bin=$B
    "$bin" bench --model "$MODEL" --repetitions 1 --log-level warn "$@" | tail -1 |
      python3 -c "import json,sys; d=json.load(sys.stdin); print('$side', d['prefill_tokens_per_s'], d['decode_tokens_per_s'])"
  done
done | python3 -c '
import statistics, sys
runs = {"A": [], "B": []}
for line in sys.stdin:
    side, pp, tg = line.split()
    runs[side].append((float(pp), float(tg)))
    print(line.strip())
med = {s: [statistics.median(v[i] for v in runs[s]) for i in (0, 1)] for s in runs}
for i, name in enumerate(["prefill tok/s", "decode tok/s"]):
    a, b = med["A"][i], med["B"][i]
    print("%s: A %.1f  B %.1f  B/A %.3f" % (name, a, b, b / a))
'
