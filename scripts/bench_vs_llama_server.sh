#!/usr/bin/env bash
# pdserve against llama-server (issue 25): one GGUF, the same loads over HTTP, one server after the
# other on this machine, every rate of a sweep with its own prompts:
#   llama    llama-server -t 2 -np 4 (+ LLAMA_FLAGS), its prompt cache in CACHE_MIB of host memory
#   default  pdserve up: one prefill and one decode worker of one thread each (fresh2048: the
#            prefill worker two, so that a 2048-token prompt has both cores) with the KV profile
#            PROFILE (default: models/pd10m/default.flags for pd10m, else SwiftKV at half depth +
#            FP8 + KCache top-32), its KV store as large as llama-server's KV memory: its slots'
#            context (-c, f16) plus CACHE_MIB (the store holds requests' pages and the prefix
#            cache alike)
#   plain    pdserve up --monolithic: two monolithic workers of one thread, the plain model
#            (fresh2048: one worker of two threads)
# Workloads (WORKLOADS; a workload the model's context cannot hold is skipped and said so):
#   fresh768   768 + 32 tokens, a sweep over RATES_768 req/s
#   fresh2048  2048 + 128 tokens, over RATES_2048 req/s, REQUESTS_2048 per rate
#   chat       CONVERSATIONS chats of TURNS turns (first message FIRST tokens, later ones TURN,
#              answers ANSWER, THINK s between), over RATES_CHAT conversations/s; CACHE_MIB
#              defaults to a quarter of the chats' histories in f16 KV (llama-server's format)
# SLO: TTFT ≤ SLO_TTFT_MS and TPOT ≤ SLO_TPOT_MS for ≥ 90 % of requests. Writes $WORK/<system>/
# <workload>/ (loadgen's sweeps), $WORK/<workload>.png (attainment and TTFT p50 against rate, all
# systems), prints a table and, last, one JSON line.
#
#   scripts/bench_vs_llama_server.sh [build-dir]            (pd10m, fresh768 + chat: ~15 minutes)
#   MODEL=/tmp/pdserve-bench/stories110M-4k-f16.gguf WORKLOADS="fresh768 fresh2048" \
#     RATES_768=0.4:1.5:4 scripts/bench_vs_llama_server.sh
#   LLAMA_BIN=DIR (llama.cpp's bin folder; default: ../shared/peers/build-llama-server.sh builds it)
#   REPORT_ONLY=1 prints the table and the JSON line again from the sweeps already in $WORK
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
PDSERVE=$BUILD/tools/pdserve
WORK=${WORK:-/tmp/pdserve_vs_llama}
MODEL=${MODEL:-models/pd10m/model.gguf}
WORKLOADS=${WORKLOADS:-fresh768 chat}
SYSTEMS=${SYSTEMS:-llama default plain}
RATES_768=${RATES_768:-4:1.5:4}
RATES_2048=${RATES_2048:-0.1:1.5:4}
RATES_CHAT=${RATES_CHAT:-0.5:1.5:4}
REQUESTS=${REQUESTS:-32}
REQUESTS_2048=${REQUESTS_2048:-$REQUESTS}
CONVERSATIONS=${CONVERSATIONS:-12}
TURNS=${TURNS:-4}
FIRST=${FIRST:-256}
TURN=${TURN:-64}
ANSWER=${ANSWER:-64}
THINK=${THINK:-1}
SLO_TTFT_MS=${SLO_TTFT_MS:-2000}
SLO_TPOT_MS=${SLO_TPOT_MS:-100}
LLAMA_FLAGS=${LLAMA_FLAGS:-}
SEED=${SEED:-1}
shared=${PDSERVE_SHARED_DIR:-../shared}
mkdir -p "$WORK"

ninja -C "$BUILD" -j2 pdserve > "$WORK/build.log" || { tail -30 "$WORK/build.log" >&2; exit 1; }
if [[ -z ${REPORT_ONLY:-} ]]; then
  LLAMA_BIN=${LLAMA_BIN:-$("$shared/peers/build-llama-server.sh" | tail -1)}
fi
if [[ ! -f $MODEL ]]; then
  echo "making $MODEL (stories110M shape, f16, context 4096)"
  "$PDSERVE" make-model --shape stories110M --format gguf --dtype f16 --seq-len 4096 \
    --out "$MODEL" --log-level warn
fi
if [[ -z ${PROFILE:-} ]]; then
  if [[ $MODEL == models/pd10m/model.gguf ]]; then
    PROFILE="--flagfile models/pd10m/default.flags"
  fi
fi
# The model's shape from the engine's own description: vocabulary, context, f16 KV bytes per token.
info=$("$PDSERVE" bench --model "$MODEL" --prompt-tokens 1 --gen-tokens 1 --repetitions 1 2>&1)
info=$(grep -m1 'llama: dim' <<< "$info")
read -r DIM LAYERS HEADS KV_HEADS VOCAB CTX < <(python3 - "$info" <<'PY'
import re, sys
m = re.search(r"dim (\d+), hidden \d+, (\d+) layers, (\d+) heads \((\d+) kv\), vocab (\d+), ctx (\d+)",
              sys.argv[1])
print(*m.groups())
PY
)
if [[ -z ${PROFILE:-} ]]; then
  PROFILE="--swiftkv-layer $((LAYERS / 2)) --fp8 per-token --kcache-topn 32"
fi
read -r -a PROFILE_ARGS <<< "$PROFILE"
HISTORY=$((FIRST + (TURNS - 1) * (ANSWER + TURN)))  # the last turn's prompt
KV_BYTES=$((2 * LAYERS * KV_HEADS * (DIM / HEADS) * 2))  # f16 K and V per token
SLOTS=4  # llama-server's parallel slots (-np), each holding one request's context
CACHE_MIB=${CACHE_MIB:-$(python3 -c "
kv = $KV_BYTES
tokens = $CONVERSATIONS * ($HISTORY + $ANSWER)
print(max(64, round(tokens * kv / 4 / 2**20)))")}
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
commit=$(git describe --always --dirty 2> /dev/null || echo unknown)  # what was measured
echo "CPU: $cpu; pdserve $commit; model $MODEL (vocab $VOCAB, context $CTX); llama.cpp:" \
  "$LLAMA_BIN $LLAMA_FLAGS"
echo "pdserve profile: $PROFILE; prompt cache memory: $CACHE_MIB MiB (llama-server's --cache-ram;"\
  "pdserve's store gets it plus llama-server's context KV)"

# shellcheck source=scripts/cluster_lib.sh
source scripts/cluster_lib.sh

# Starts `system` for requests of up to `ctx` tokens (each llama-server slot and each pdserve
# sequence holds that context, whatever the model's own); sets URL. Prompts of 2048 tokens take
# about 3 s to prefill on one core of a 110M model, more than the TTFT SLO: pdserve then gives
# both cores to the prefill worker, or runs one monolithic worker on both (llama-server always
# runs two threads).
start_system() {
  local system=$1 ctx=$2 log=$3 long=0
  (( ctx > 2048 )) && long=1
  case $system in
    llama)
      # shellcheck disable=SC2086  # LLAMA_FLAGS is a list of flags
      start_llama_server "$log" 8094 -m "$MODEL" -t 2 -np "$SLOTS" -c $((SLOTS * ctx)) \
        --cache-ram "$CACHE_MIB" $LLAMA_FLAGS
      URL=127.0.0.1:8094 ;;
    default)
      local pool_mib=$((CACHE_MIB + (SLOTS * ctx * KV_BYTES + (1 << 20) - 1) / (1 << 20)))
      start_cluster "$log" --model "$MODEL" --threads 1 --prefill-threads $((1 + long)) \
        --max-context "$ctx" --pool-mib "$pool_mib" "${PROFILE_ARGS[@]}"
      URL=$ROUTER_HTTP ;;
    plain)
      start_cluster "$log" --model "$MODEL" --threads $((1 + long)) --max-context "$ctx" \
        --monolithic --decode-workers $((2 - long))
      URL=$ROUTER_HTTP ;;
  esac
}
stop_system() { if [[ $1 == llama ]]; then stop_llama_server; else cleanup; fi; }

for workload in $WORKLOADS; do
  [[ -n ${REPORT_ONLY:-} ]] && break
  case $workload in
    fresh768) need=800; load=(--prompt-tokens 768 --gen-tokens 32 --requests "$REQUESTS"
                                --warmup 2 --sweep-rates "$RATES_768") ;;
    fresh2048) need=2176; load=(--prompt-tokens 2048 --gen-tokens 128 --requests "$REQUESTS_2048"
                                  --warmup 2 --sweep-rates "$RATES_2048") ;;
    chat) need=$((HISTORY + ANSWER))
          load=(--conversations "$CONVERSATIONS" --turns "$TURNS" --prompt-tokens "$FIRST"
                --turn-tokens "$TURN" --gen-tokens "$ANSWER" --think-time "$THINK" --warmup 1
                --sweep-rates "$RATES_CHAT") ;;
    *) echo "unknown workload '$workload' (fresh768, fresh2048, chat)" >&2; exit 1 ;;
  esac
  if (( need > CTX )); then
    echo "=== $workload: skipped, $need tokens per request exceed the model's context $CTX"
    continue
  fi
  for system in $SYSTEMS; do
    echo "=== $workload on $system ($(date +%T))"
    mkdir -p "$WORK/$system"
    start_system "$system" "$need" "$WORK/$system/$workload.log"
    "$PDSERVE" loadgen --protocol http --url "$URL" "${load[@]}" --vocab "$VOCAB" \
      --seed "$SEED" --slo-ttft-ms "$SLO_TTFT_MS" --slo-tpot-ms "$SLO_TPOT_MS" \
      --out-dir "$WORK/$system/$workload" > "$WORK/$system/$workload.txt" 2>&1 ||
      { tail -20 "$WORK/$system/$workload.txt" >&2; exit 1; }
    stop_system "$system"
  done
done

python3 - "$WORK" "$MODEL" "$cpu" "$LLAMA_BIN $LLAMA_FLAGS" "$PROFILE" "$CACHE_MIB" \
  "$WORKLOADS" "$SYSTEMS" "$commit" <<'PY'
import json, os, subprocess, sys
work, model, cpu, llama, profile, cache_mib = sys.argv[1:7]
workloads, systems, commit = sys.argv[7].split(), sys.argv[8].split(), sys.argv[9]
def ms(x): return "-" if x is None else f"{x * 1000:.0f}"
results = {}
print("\n| workload | system | highest rate at SLO | goodput there | TTFT p50 / p99 ms | "
      "TPOT p50 / p99 ms | cached prompt share | attainment per rate |")
print("|---|---|---|---|---|---|---|---|")
for w in workloads:
    for s in systems:
        path = f"{work}/{s}/{w}/sweep.json"
        if not os.path.exists(path):
            continue
        sweep = json.load(open(path))
        best = sweep["max_rate_meeting_slo"]
        point = next((p for p in sweep["points"] if p["rate"] == best), None)
        cached = [p["cached_prompt_tokens"]["share"] for p in sweep["points"]
                  if p.get("cached_prompt_tokens")]
        results.setdefault(w, {})[s] = {
            "max_rate_meeting_slo": best,
            "goodput": point["goodput"] if point else 0.0,
            "ttft_p50_s": point["ttft_s"]["p50"] if point else None,
            "ttft_p99_s": point["ttft_s"]["p99"] if point else None,
            "tpot_p50_s": point["tpot_s"]["p50"] if point else None,
            "tpot_p99_s": point["tpot_s"]["p99"] if point else None,
            "cached_prompt_share": max(cached) if cached else None,
            "points": [{k: p[k] for k in ("rate", "slo_attainment", "goodput")} |
                       {"ttft_p50_s": p["ttft_s"]["p50"], "tpot_p50_s": p["tpot_s"]["p50"]}
                       for p in sweep["points"]]}
        r = results[w][s]
        share = "-" if r["cached_prompt_share"] is None else f"{r['cached_prompt_share']:.2f}"
        per_rate = ", ".join(f"{p['rate']:.3g}: {p['slo_attainment']:.0%}" for p in r["points"])
        print(f"| {w} | {s} | {'none' if best is None else f'{best:.3g}'} | "
              f"{r['goodput']:.2f} | {ms(r['ttft_p50_s'])} / {ms(r['ttft_p99_s'])} | "
              f"{ms(r['tpot_p50_s'])} / {ms(r['tpot_p99_s'])} | {share} | {per_rate} |")
    # One PNG per workload: SLO attainment (left) and TTFT p50 (right, log) against rate.
    if w in results and subprocess.run(["sh", "-c", "command -v gnuplot"],
                                       capture_output=True).returncode == 0:
        lines, plots = [], []
        for i, (s, r) in enumerate(results[w].items()):
            data = f"{work}/{w}.{s}.dat"
            with open(data, "w") as f:
                for p in r["points"]:
                    ttft = p["ttft_p50_s"] if p["ttft_p50_s"] is not None else float("nan")
                    f.write(f"{p['rate']} {p['slo_attainment']} {ttft * 1000}\n")
            plots.append(f"'{data}' using 1:2 with linespoints lc {i + 1} title '{s} attainment'")
            plots.append(f"'{data}' using 1:3 axes x1y2 with linespoints dt 2 lc {i + 1} "
                         f"title '{s} TTFT p50'")
        script = "\n".join([
            "set terminal png size 900,540", f"set output '{work}/{w}.png'",
            f"set title '{w}: {os.path.basename(model)}, {cpu}' noenhanced",
            "set xlabel 'offered rate (per s)'", "set ylabel 'SLO attainment'",
            "set y2label 'TTFT p50 (ms)'", "set logscale y2", "set y2tics", "set yrange [0:1.05]",
            "set key outside bottom center horizontal", "plot " + ", ".join(plots)])
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
ratios = {w: {f"{s}/llama": (r[s]["max_rate_meeting_slo"] or 0) / r["llama"]["max_rate_meeting_slo"]
              for s in r if s != "llama"}
          for w, r in results.items() if "llama" in r and r["llama"]["max_rate_meeting_slo"]}
for w, rs in ratios.items():
    print(f"{w}: highest rate at SLO against llama-server: " +
          ", ".join(f"{k} {v:.2f}x" for k, v in rs.items()))
print(json.dumps({"model": model, "cpu": cpu, "pdserve": commit, "llama": llama,
                  "profile": profile, "cache_mib": int(cache_mib), "results": results,
                  "ratios": ratios}))
PY
