# shellcheck shell=bash
# Sourced by the serving benchmarks: start and stop one `pdserve up` cluster (or one llama-server)
# at a time.
#   start_cluster LOG ARGS...   runs `$PDSERVE up ARGS` in the background, waits for its ready
#                               line; sets UP_PID, ROUTER (gRPC), ROUTER_HTTP and MONO (the first
#                               monolithic worker's address, if any). Plaintext (--insecure), as
#                               the peers these benchmarks race serve; with TLS=1, TLS between all
#                               components and to clients: then CLIENT_TLS holds the flags a
#                               client (`pdserve client|loadgen`) needs, `--tls-ca CA`
#   cleanup                     stops it (SIGTERM, then waits)
#   start_llama_server LOG PORT ARGS...
#                               runs `$LLAMA_BIN/llama-server ARGS` on 127.0.0.1:PORT in the
#                               background, waits for its /health; sets PEER_PID
#   stop_llama_server           stops it
#   ensure_random_model MODEL SHAPE CTX WORK
#                               builds $PDSERVE (ninja in $BUILD) unless it exists, and makes MODEL,
#                               a random-weights f16 GGUF of SHAPE with context CTX, unless it
#                               exists (logs in WORK)
# Both are stopped on exit.
UP_PID=
cleanup() {
  if [[ -n $UP_PID ]] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -TERM "$UP_PID" 2>/dev/null || true
    wait "$UP_PID" 2>/dev/null || true
  fi
  UP_PID=
}
PEER_PID=
stop_llama_server() {
  if [[ -n $PEER_PID ]]; then kill -TERM "$PEER_PID" 2>/dev/null || true; wait "$PEER_PID" || true; fi
  PEER_PID=
}
trap 'cleanup; stop_llama_server' EXIT
trap 'exit 130' INT TERM

CLIENT_TLS=()
start_cluster() {
  local log=$1; shift
  local security=(--insecure)
  if [[ ${TLS:-0} == 1 ]]; then security=(); fi
  # Emptied before the background job's own redirect, which the first read below may overtake
  # (and find an earlier run's ready line in a reused log).
  : > "$log"
  "$PDSERVE" up --log-level warn "${security[@]}" "$@" > "$log" 2>&1 &
  UP_PID=$!
  local waited=0
  ROUTER=
  # The whole line (the file may hold part of a write): PDSERVE_READY up <grpc> <http>.
  until ROUTER=$(awk '/^PDSERVE_READY up [^ ]+:[0-9]+ [^ ]+:[0-9]+$/ {print $3}' "$log" \
                   2>/dev/null) &&
        [[ -n $ROUTER ]]; do
    if ! kill -0 "$UP_PID" 2>/dev/null || (( waited > 1800 )); then
      echo "pdserve up failed to start; its log ($log):" >&2; tail -20 "$log" >&2; exit 1
    fi
    sleep 0.1; waited=$((waited + 1))
  done
  # shellcheck disable=SC2034  # ROUTER_HTTP and MONO are for the scripts that source this file
  ROUTER_HTTP=$(awk '/^PDSERVE_READY up / {print $4}' "$log")
  # shellcheck disable=SC2034
  MONO=$(awk '$1 == "monolithic-0" {print $2}' "$log")
  CLIENT_TLS=()
  local ca
  ca=$(awk '/^PDSERVE_TLS_CA / {print $2}' "$log")
  # shellcheck disable=SC2034  # for the scripts that source this file
  if [[ -n $ca ]]; then CLIENT_TLS=(--tls-ca "$ca"); fi
}

start_llama_server() {
  local log=$1 port=$2; shift 2
  LD_LIBRARY_PATH=$LLAMA_BIN "$LLAMA_BIN/llama-server" "$@" --host 127.0.0.1 --port "$port" \
    > "$log" 2>&1 &
  PEER_PID=$!
  until curl -sf "http://127.0.0.1:$port/health" > /dev/null; do
    kill -0 "$PEER_PID" 2>/dev/null || { echo "llama-server failed to start; its log ($log):" >&2
                                        tail -20 "$log" >&2; exit 1; }
    sleep 0.5
  done
}

ensure_random_model() {
  local model=$1 shape=$2 ctx=$3 work=$4
  if [[ ! -x $PDSERVE ]]; then
    ninja -C "$BUILD" -j2 pdserve > "$work/build.log" || { tail -30 "$work/build.log" >&2; exit 1; }
  fi
  if [[ ! -f $model ]]; then
    mkdir -p "$(dirname "$model")"
    "$PDSERVE" make-model --shape "$shape" --format gguf --dtype f16 --seq-len "$ctx" \
      --out "$model" > "$work/make-model.log" 2>&1
  fi
}
