#!/usr/bin/env bash
# Put/get bandwidth of pdserve's UcxTransport (pdserve_transport_bench: two processes, fork)
# against ucx_perftest (ucp_put_bw / ucp_get, server and client on 127.0.0.1), same UCX_TLS and
# message sizes. For each transport our bench runs twice: with the target region from
# Transport::Register (caller memory) and from Transport::Allocate (UCX-allocated: shared memory
# under posix/sysv, as ucx_perftest allocates its buffers). Every point is run REPEATS times
# (ours: each run is already the median of 5 trials, best of the batch depths) and the median of
# the runs is printed, in GB/s (1e9 B/s); ratio = ours (Allocate) / ucx_perftest.
#
#   scripts/bench_transport.sh [build-dir]       (default build/transport)
#   TRANSPORTS="tcp posix,self" SIZES="4096 65536" DEPTHS=1,16,64 REPEATS=3 scripts/bench_transport.sh
#   MEMORIES=allocate (skip the slow Register runs), MIB=32 (per trial), PFD=0|1 (override)
#
# Needs ucx_perftest (Debian: apt-get install -y ucx-utils). UCX 1.13 names its get test
# "ucp_get" (there is no ucp_get_bw). Our side uses peer_failure_detection=0 for anything but tcp:
# UCX 1.13's posix/sysv cannot do peer-failure handling, and ucx_perftest runs without it too.
set -euo pipefail
BUILD=${1:-build/transport}
BENCH=${BENCH:-$BUILD/core/transport/pdserve_transport_bench}
TRANSPORTS=${TRANSPORTS:-"shm,self posix,self sysv,self tcp"}
SIZES=${SIZES:-"256 1024 4096 16384 65536 131072 1048576 4194304"}
DEPTHS=${DEPTHS:-1,16,64}
OPS=${OPS:-"put get"}
MEMORIES=${MEMORIES:-"register allocate"}
REPEATS=${REPEATS:-3}
MIB=${MIB:-32}  # per trial of ours
PORT=${PORT:-13400}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing (apt-get install -y ucx-utils)" >&2; exit 1; }
[[ -x $BENCH ]] || { echo "$BENCH missing (ninja -C $BUILD pdserve_transport_bench)" >&2; exit 1; }

median() { tr ' ' '\n' | { grep -v '^$' || true; } | sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "n/a"; else printf "%.3f", v[int((NR + 1) / 2)]}'; }

perftest_once() {  # tls test size -> GB/s or nothing
  local tls=$1 test=$2 size=$3 iters
  iters=$(( (512 << 20) / size )); (( iters > 200000 )) && iters=200000; (( iters < 100 )) && iters=100
  PORT=$((PORT + 1))
  UCX_TLS=$tls timeout 120 ucx_perftest -p "$PORT" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  local line
  line=$(UCX_TLS=$tls timeout 120 ucx_perftest 127.0.0.1 -p "$PORT" -t "$test" -s "$size" -n "$iters" 2>/dev/null | grep '^Final:' || true)
  kill "$server" 2>/dev/null || true  # a failed client leaves the server waiting
  wait "$server" 2>/dev/null || true
  # Final: iters p50 avg overall bw_avg(MB/s) bw_overall msgrate_avg msgrate_overall
  [[ -n $line ]] && awk '{printf "%.3f", $6 * 1048576 / 1e9}' <<<"$line"
  return 0
}

perftest() {  # tls op size -> median GB/s of REPEATS runs, or n/a
  local test=ucp_put_bw runs=""
  [[ $2 == get ]] && test=ucp_get
  for ((r = 0; r < REPEATS; ++r)); do runs+=" $(perftest_once "$1" "$test" "$3")"; done
  median <<<"$runs"
}

echo "# $(uptime)"
echo "# depths $DEPTHS, $REPEATS repeats per point (medians); GB/s = 1e9 B/s; n/a = not run/failed"
printf "%-10s %-4s %8s %12s %12s %12s %8s\n" transport op size ours_reg ours_alloc ucx_perftest ratio
for tls in $TRANSPORTS; do
  pfd=0; [[ $tls == tcp ]] && pfd=1
  [[ -n ${PFD:-} ]] && pfd=$PFD  # e.g. PFD=1 TRANSPORTS=shm,tcp: the services' setting
  declare -A ours=()
  for memory in $MEMORIES; do
    out=""
    for ((r = 0; r < REPEATS; ++r)); do
      out+=$("$BENCH" --transports="$tls" --peer_failure_detection="$pfd" --sizes="${SIZES// /,}" \
               --depths="$DEPTHS" --ops="${OPS// /,}" --target_memory="$memory" --trials=5 \
               --mib_per_trial="$MIB" 2>/dev/null || true)$'\n'
    done
    ours[$memory]=$out
    echo "# $tls target_memory=$memory, all runs and depths:" >&2
    grep -v '^#' <<<"$out" | sed 's/^/#   /' >&2 || true
  done
  for op in $OPS; do
    for size in $SIZES; do
      declare -A best=()
      for memory in register allocate; do
        # Per run: the best depth; then the median over runs.
        best[$memory]=$(awk -v op="$op" -v s="$size" '
            /^# transports/ {run++} $1==op && $2==s {if ($4 > b[run]) b[run] = $4}
            END {for (r in b) printf "%s ", b[r]}' <<<"${ours[$memory]:-}" | median)
      done
      theirs=$(perftest "$tls" "$op" "$size")
      ratio=$(awk -v a="${best[allocate]}" -v b="$theirs" 'BEGIN {if (a+0 > 0 && b+0 > 0) printf "%.2f", a/b; else print "n/a"}')
      printf "%-10s %-4s %8s %12s %12s %12s %8s\n" "$tls" "$op" "$size" "${best[register]}" \
        "${best[allocate]}" "$theirs" "$ratio"
    done
  done
done
