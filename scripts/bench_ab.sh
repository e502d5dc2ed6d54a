#!/usr/bin/env bash
# Compares two pdserve binaries on one model in the same run, alternating A and B so that machine
# noise hits both alike; prints per-run figures, the medians with each side's range, and the B/A
# ratios of the medians.
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
spread = {s: [(min(v[i] for v in runs[s]), max(v[i] for v in runs[s])) for i in (0, 1)]
          for s in runs}
for i, name in enumerate(["prefill tok/s", "decode tok/s"]):
    a, b = med["A"][i], med["B"][i]
    (a0, a1), (b0, b1) = spread["A"][i], spread["B"][i]
    print("%s: A %.1f (%.1f-%.1f)  B %.1f (%.1f-%.1f)  B/A %.3f" % (name, a, a0, a1, b, b0, b1,
                                                                  b / a))
'
