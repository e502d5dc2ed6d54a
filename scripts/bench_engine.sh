#!/usr/bin/env bash
# pdserve's engine against llama.cpp on the very same GGUF files, in one run: for each shape
# (random weights made once with make-model in $BENCH_DIR, default /tmp/pdserve-bench) and each
# weight type (f32, f16, bf16 from make-model; Q8_0, Q4_0, Q4_K_M from the peer's llama-quantize),
# `pdserve bench` and `llama-bench` at pp512 / tg128 for 1 and 2 threads, printed side by side with
# the ratio, under a header naming the CPU, pdserve's SIMD level and the machine's ceilings measured
# in the same run (fp32 FMA peak, read bandwidth), with pdserve's prefill GFLOP/s and decode weight
# GB/s as shares of them (issue 15's goals). The peer is the current
# llama.cpp release of ../shared/peers (build-llama-server.sh; built once, 10–16 minutes).
# Usage: scripts/bench_engine.sh [build/release/tools/pdserve]
#   SHAPES="stories15M stories110M" TYPES="f32 f16 bf16 q8_0 q4_0 q4_k_m" THREADS="1 2"
#   ROUNDS=3 (pdserve and llama-bench take turns; medians) REPS=1 (repetitions within each call)
#   PEER_BIN=DIR: another llama.cpp build's bin folder (e.g. one configured with GGML_NATIVE=OFF
#   where the -march=native build dies with SIGILL, as on a VM that advertises AMX it lacks)
#   KERNELS_BENCHMARK=PATH: the kernels_benchmark that measures the ceilings (build/release's)
set -euo pipefail
cd "$(dirname "$0")/.."
PDSERVE=${1:-build/release/tools/pdserve}
KERNELS_BENCHMARK=${KERNELS_BENCHMARK:-build/release/kernels/kernels_benchmark}
DIR=${BENCH_DIR:-/tmp/pdserve-bench}
REPS=${REPS:-1}
ROUNDS=${ROUNDS:-3}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "bench_engine.sh: ROUNDS=$ROUNDS must be ≥ 1" >&2; exit 2; }
SHAPES=${SHAPES:-stories15M stories110M}
TYPES=${TYPES:-f32 f16 bf16 q8_0 q4_0 q4_k_m}
THREADS=${THREADS:-1 2}
shared=${PDSERVE_SHARED_DIR:-../shared}
peer=${PEER_BIN:-$("$shared/peers/build-llama-server.sh" | tail -1)}
mkdir -p "$DIR"

# The machine's ceilings in the same run, per thread count: the fp32 FMA peak at pdserve's kernel
# level (BM_FmaPeak) and the read bandwidth (BM_MemoryRead), medians of 3, as JSON for the table.
ceilings=$("$KERNELS_BENCHMARK" --benchmark_filter='BM_(FmaPeak|MemoryRead)/' \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_format=json |
  python3 -c "
import json, sys
out = {}
for b in json.load(sys.stdin)['benchmarks']:
    if b.get('aggregate_name') != 'median': continue
    name, threads = b['run_name'].split('/')[0], b['run_name'].split(':')[1].split('/')[0]
    key = 'gflops' if name == 'BM_FmaPeak' else 'gbps'
    out.setdefault(threads, {})[key] = (b['FLOPS'] if key == 'gflops' else b['bytes_per_second']) / 1e9
print(json.dumps(out))")

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
# VMs often report a bare "AMD EPYC": the cpuid family and model name the core (25/1 Zen 3,
# 25/17 Zen 4, 26 Zen 5).
cpu="$cpu (family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' '), model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | tr -d ' '))"
echo "CPU: $cpu; peer: $peer; simd = pdserve's kernel level (PDSERVE_SIMD forces avx2; +bf16dot:"
echo "bf16 prefill on bf16 dot products, vdpbf16ps or (amx) AMX tiles, so its share of the fp32 peak can pass 100%)"
python3 -c "
import json, sys
for threads, c in sorted(json.loads(sys.argv[1]).items()):
    print(f'{threads} thread(s): fp32 FMA peak {c[\"gflops\"]:.0f} GFLOP/s, read bandwidth {c[\"gbps\"]:.1f} GB/s')
" "$ceilings"
echo
echo "pdserve's prefill GFLOP/s and decode weight GB/s, and their share of the ceilings above, follow each ratio."
echo
echo "| shape | weights | threads | simd | pp512 pdserve | pp512 llama.cpp | ratio | prefill GFLOP/s (of peak) | tg128 pdserve | tg128 llama.cpp | ratio | decode GB/s (of bandwidth) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for shape in $SHAPES; do
  f32="$DIR/$shape-f32.gguf"
  [ -f "$f32" ] || "$PDSERVE" make-model --shape "$shape" --format gguf --out "$f32" --log-level warn
  for type in $TYPES; do
    model="$DIR/$shape-$type.gguf"
    weights=f32
    case $type in
      f32) ;;
      f16 | bf16)
        weights=$type
        [ -f "$model" ] || "$PDSERVE" make-model --shape "$shape" --format gguf --dtype "$type" \
          --out "$model" --log-level warn ;;
      *)
        weights=f16  # plain matrices a quantized file keeps (norms aside: none in these shapes)
        [ -f "$model" ] || "$peer/llama-quantize" "$f32" "$model" "${type^^}" >/dev/null 2>&1 ;;
    esac
    for threads in $THREADS; do
      # pdserve and llama.cpp take turns, ROUNDS times, so that the VM's drift lands on both sides;
      # each side's figure is the median of its rounds.
      : > "$DIR/ours.jsonl"
      : > "$DIR/theirs.jsonl"
      for _ in $(seq "$ROUNDS"); do
        "$PDSERVE" bench --model "$model" --prompt-tokens 512 --gen-tokens 128 \
          --threads "$threads" --weights "$weights" --repetitions "$REPS" --log-level warn |
          tail -1 >> "$DIR/ours.jsonl"
        "$peer/llama-bench" -m "$model" -p 512 -n 128 -t "$threads" -r "$REPS" -o jsonl \
          2>/dev/null >> "$DIR/theirs.jsonl"
      done
      python3 - "$shape" "$type" "$threads" "$DIR/ours.jsonl" "$DIR/theirs.jsonl" "$ceilings" <<'PY'
import json, statistics, sys
shape, dtype, threads, ours, theirs, ceilings = sys.argv[1:]
ceiling = json.loads(ceilings)[threads]
o = [json.loads(line) for line in open(ours)]
t = [json.loads(line) for line in open(theirs)]
pp = statistics.median(r['prefill_tokens_per_s'] for r in o)
tg = statistics.median(r['decode_tokens_per_s'] for r in o)
t_pp = statistics.median(r['avg_ts'] for r in t if r['n_prompt'])
t_tg = statistics.median(r['avg_ts'] for r in t if not r['n_prompt'])
gflops = statistics.median(r['prefill_gflops'] for r in o)
gbps = statistics.median(r['decode_weight_gb_per_s'] for r in o)
simd = o[0]['simd'] + ('+bf16dot' if dtype == 'bf16' and o[0].get('bf16_dot') else '') + \
    ('(amx)' if dtype == 'bf16' and o[0].get('amx') else '')
print(f"| {shape} | {dtype} | {threads} | {simd} | {pp:.0f} | {t_pp:.0f} | {pp / t_pp:.2f} | "
      f"{gflops:.0f} ({gflops / ceiling['gflops']:.0%}) | {tg:.1f} | {t_tg:.1f} | {tg / t_tg:.2f} | "
      f"{gbps:.1f} ({gbps / ceiling['gbps']:.0%}) |")
PY
    done
  done
done
