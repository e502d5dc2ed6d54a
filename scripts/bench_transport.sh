#!/usr/bin/env bash
# Put/get bandwidth of pdserve's UcxTransport (pdserve_transport_bench: two processes, fork)
# against ucx_perftest (ucp_put_bw / ucp_get_bw, server and client on 127.0.0.1), same UCX_TLS
# and message sizes. Prints one table row per transport/op/size: ours (GB/s, 1e9 B/s, median of
# trials, best of the batch depths) vs ucx_perftest (average bandwidth, converted from MiB/s).
#
#   scripts/bench_transport.sh [build-dir]       (default build/transport)
#   TRANSPORTS="tcp posix" SIZES="4096 65536 1048576 4194304" DEPTHS=1,16 scripts/bench_transport.sh
#
# Needs ucx_perftest (Debian: apt-get install -y ucx-utils). Our side uses
# peer_failure_detection=0 for anything but tcp: UCX 1.13's posix/sysv cannot do peer-failure
# handling, and ucx_perftest runs without it too.
set -euo pipefail
BUILD=${1:-build/transport}
BENCH=${BENCH:-$BUILD/core/transport/pdserve_transport_bench}
TRANSPORTS=${TRANSPORTS:-"tcp posix"}
SIZES=${SIZES:-"4096 65536 1048576 4194304"}
DEPTHS=${DEPTHS:-1,16}
PORT=${PORT:-13400}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing (apt-get install -y ucx-utils)" >&2; exit 1; }
[[ -x $BENCH ]] || { echo "$BENCH missing (ninja -C $BUILD pdserve_transport_bench)" >&2; exit 1; }

perftest() {  # tls test size -> GB/s
  local tls=$1 test=$2 size=$3 iters
  iters=$(( (256 << 20) / size )); (( iters > 20000 )) && iters=20000; (( iters < 50 )) && iters=50
  PORT=$((PORT + 1))
  UCX_TLS=$tls timeout 120 ucx_perftest -p "$PORT" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  local line
  line=$(UCX_TLS=$tls timeout 120 ucx_perftest 127.0.0.1 -p "$PORT" -t "$test" -s "$size" -n "$iters" 2>/dev/null | grep '^Final:' || true)
  kill "$server" 2>/dev/null || true  # a failed client leaves the server waiting
  wait "$server" 2>/dev/null || true
  # Final: iters p50 avg overall bw_avg(MB/s) bw_overall msgrate_avg msgrate_overall
  if [[ -z $line ]]; then echo "n/a"; else awk '{printf "%.3f", $6 * 1048576 / 1e9}' <<<"$line"; fi
}

printf "%-8s %-4s %9s %12s %16s %8s\n" transport op size ours_GBps ucx_perftest_GBps ratio
for tls in $TRANSPORTS; do
  pfd=0; [[ $tls == tcp ]] && pfd=1
  ours=$("$BENCH" --transports="$tls" --peer_failure_detection=$pfd --sizes="${SIZES// /,}" \
           --depths="$DEPTHS" --trials=5 --mib_per_trial=64 2>/dev/null | grep -v '^#' || true)
  for op in put get; do
    for size in $SIZES; do
      best=$(awk -v op=$op -v s=$size '$1==op && $2==s {if ($4>b) b=$4} END {printf "%.3f", b}' <<<"$ours")
      theirs=$(perftest "$tls" "ucp_${op}_bw" "$size")
      ratio=$(awk -v a="$best" -v b="$theirs" 'BEGIN {if (b+0 > 0) printf "%.2f", a/b; else print "n/a"}')
      printf "%-8s %-4s %9s %12s %16s %8s\n" "$tls" "$op" "$size" "$best" "$theirs" "$ratio"
    done
  done
  echo "# $tls ours, all depths:"; sed 's/^/#   /' <<<"$ours"
done
