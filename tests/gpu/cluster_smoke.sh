#!/usr/bin/env bash
# Disaggregated serving on a device, end to end: `pdserve up --device DEVICE` (router, KV store,
# one prefill and one decode worker, plain model) answers a greedy request with exactly the text
# `pdserve generate --device cpu` writes for the same prompt. KV pages leave the prefill engine
# and enter the decode engine through their host mirrors (docs/gpu.md). Then, with the default
# KV profile (SwiftKV, FP8, KCache), the same request is answered and reported, not compared
# (FP8 codes may round differently on the GPU).
# Usage: tests/gpu/cluster_smoke.sh PDSERVE SHARED_DIR REPORT_DIR [DEVICE (default cuda)]
# ctest runs it with DEVICE cpu (gpu_cluster_smoke_on_cpu), so the script itself stays working on
# machines without a GPU.
# Exits non-zero when the cluster does not come up or the plain answer differs.
set -uo pipefail
pdserve=$1
shared=$2
report=$3
device=${4:-cuda}
model=$shared/models/stories260K/stories260K.bin
tokenizer=$shared/models/stories260K/tok512.bin
prompt="Lily wanted to"
tokens=64
up_pid=""
ca=""
mkdir -p "$report"

# SIGTERM drains the cluster; `up` acts on it only once ready, so after 60 s it is killed.
stop_cluster() {
  if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
    kill -TERM "$up_pid"
    local deadline=$((SECONDS + 60))
    while kill -0 "$up_pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.5; done
    kill -KILL "$up_pid" 2>/dev/null
    wait "$up_pid" 2>/dev/null
  fi
  up_pid=""
}
trap stop_cluster EXIT

# Starts `up` with the extra flags; sets router to its gRPC address and ca to the CA file clients
# verify its TLS with (`up` serves TLS by default), or returns 1.
start_cluster() {  # name, flags...
  local name=$1
  shift
  # Emptied here, not only by the redirect below: that runs in the background job, which the
  # first grep may overtake and read an earlier run's ready line (a stale, refused port).
  : >"$report/cluster-$name.out"
  "$pdserve" up --model "$model" --tokenizer "$tokenizer" --device "$device" \
    --prefill-workers 1 --decode-workers 1 --listen 127.0.0.1:0 --log-level warn \
    --startup-seconds 240 "$@" \
    >"$report/cluster-$name.out" 2>"$report/cluster-$name.err" &
  up_pid=$!
  local deadline=$((SECONDS + 300)) ready=""
  while [ -z "$ready" ]; do
    ready=$(grep -m1 '^PDSERVE_READY up ' "$report/cluster-$name.out" || true)
    [ -n "$ready" ] && break
    if ! kill -0 "$up_pid" 2>/dev/null || [ $SECONDS -gt $deadline ]; then
      echo "cluster ($name): no ready line; see cluster-$name.err"
      tail -5 "$report/cluster-$name.err"
      return 1
    fi
    sleep 0.2
  done
  read -r _ _ router _ <<<"$ready"
  ca=$(awk '/^PDSERVE_TLS_CA / {print $2; exit}' "$report/cluster-$name.out")
}

ask() {  # name
  "$pdserve" client --router "$router" ${ca:+--tls-ca "$ca"} --prompt "$prompt" \
    --max-tokens $tokens --timeout-seconds 120 >"$report/cluster-$1.answer" 2>"$report/cluster-$1.client.err"
}

"$pdserve" generate --model "$model" --tokenizer "$tokenizer" --prompt "$prompt" \
  --max-tokens $tokens --device cpu >"$report/cluster-expected.txt" 2>/dev/null ||
  { echo "cluster: generate on the CPU failed"; exit 1; }

start_cluster plain || exit 1
ask plain || { echo "cluster (plain): the client failed; see cluster-plain.client.err"; exit 1; }
stop_cluster
if cmp -s "$report/cluster-plain.answer" "$report/cluster-expected.txt"; then
  echo "cluster --device $device, plain: the answer equals generate --device cpu"
else
  echo "cluster --device $device, plain: the answer DIFFERS from generate --device cpu:"
  echo "  cluster: $(head -c 300 "$report/cluster-plain.answer")"
  echo "  cpu:     $(head -c 300 "$report/cluster-expected.txt")"
  exit 1
fi

start_cluster profile --swiftkv-layer 4 --fp8 per-token --kcache-topn 32 || exit 1
ask profile || { echo "cluster (profile): the client failed; see cluster-profile.client.err"; exit 1; }
stop_cluster
echo "cluster --device $device, SwiftKV+FP8+KCache: $(head -c 200 "$report/cluster-profile.answer")"
