#!/usr/bin/env bash
# Whole-engine throughput on the CPU and the GPU, `pdserve bench` (medians of its repetitions),
# for tests/gpu/run.sh: a stories110M-shaped random model (prefill 1024 tokens with SwiftKV off
# and on; decode 128 tokens after a 1024-token context with ZACK (half the K/V dimensions) + FP8
# off and on), then a Llama-3.2-1B-shaped model on the GPU alone, then cuBLAS's share of prefill
# GPU time (with nsys). Prints markdown tables.
# Usage: engine_bench.sh PDSERVE REPORT_DIR QUICK(0|1)
set -uo pipefail
pdserve=$1
report=$2
quick=${3:-0}
work=$report/engine
mkdir -p "$work"
reps=3
[ "$quick" = 1 ] && reps=1

# One bench run; prints "prefill_tok_s decode_tok_s" from its JSON line (or "- -" on failure).
bench() {
  local name=$1
  shift
  if timeout 240 "$pdserve" bench --repetitions "$reps" "$@" >"$work/$name.log" 2>&1; then
    tail -1 "$work/$name.log" | python3 -c \
      'import json,sys; r=json.loads(sys.stdin.read()); print("%.0f %.0f" % (r["prefill_tokens_per_s"], r["decode_tokens_per_s"]))'
  else
    echo "- -"
  fi
}

model=$work/stories110M.gguf
"$pdserve" make-model --shape stories110M --seq-len 2048 --format gguf --dtype bf16 \
  --out "$model" >"$work/make-model.log" 2>&1
cat docs/*.md README.md >"$work/calibration.txt"
calibration=$work/stories110M.zack
"$pdserve" calibrate --model "$model" --text "$work/calibration.txt" --out "$calibration" \
  --ctx 256 --calibration-chunks 16 --zack --zack-kept-fraction 0.5 >"$work/calibrate.log" 2>&1 ||
  echo "calibrate failed: see $work/calibrate.log"

common=(--model "$model" --weights bf16 --prompt-tokens 1024 --gen-tokens 128 --decode-context 1024)
swiftkv=(--swiftkv-layer 6)
zack_fp8=(--calibration "$calibration" --zack --fp8 per-token)

echo
echo "### pdserve bench, stories110M shape (bf16 weights; tokens/s, medians of $reps)"
echo
echo "| device | setting | prefill 1024 tok/s | decode tok/s (ctx 1024) |"
echo "| --- | --- | --- | --- |"
for device in cpu cuda; do
  for setting in plain swiftkv zack+fp8; do
    case $setting in
      plain) extra=() ;;
      swiftkv) extra=("${swiftkv[@]}") ;;
      zack+fp8) extra=("${zack_fp8[@]}") ;;
    esac
    read -r pp tg < <(bench "110M-$device-$setting" --device "$device" "${common[@]}" "${extra[@]}")
    echo "| $device | $setting | $pp | $tg |"
  done
done

large=$work/llama1B.gguf
"$pdserve" make-model --dim 2048 --hidden-dim 8192 --layers 16 --heads 32 --kv-heads 8 \
  --vocab 128256 --seq-len 8192 --format gguf --dtype bf16 --out "$large" >>"$work/make-model.log" 2>&1
echo
echo "### pdserve bench, Llama-3.2-1B shape (GPU, bf16 weights; tokens/s, medians of $reps)"
echo
echo "| setting | prefill 4096 tok/s | decode tok/s (ctx 4096) |"
echo "| --- | --- | --- |"
for setting in plain swiftkv; do
  extra=()
  [ "$setting" = swiftkv ] && extra=(--swiftkv-layer 8)
  read -r pp tg < <(bench "1B-cuda-$setting" --device cuda --model "$large" --weights bf16 \
    --prompt-tokens 4096 --gen-tokens 128 --decode-context 4096 "${extra[@]}")
  echo "| $setting | $pp | $tg |"
done
rm -f "$large"  # 2.5 GB of random weights: no part of the report

# cuBLAS's share of GPU kernel time in a prefill (stories110M shape, 1024 tokens; the one decode
# step and the warm-up are in the total too, so the share is approximate), from an Nsight Systems
# kernel summary; skipped where nsys is absent.
echo
echo "### cuBLAS GEMM share of prefill GPU time (stories110M shape, 1024 tokens)"
echo
if command -v nsys >/dev/null; then
  nsys profile --trace=cuda --force-overwrite=true -o "$work/prefill-profile" \
    "$pdserve" bench --device cuda --model "$model" --weights bf16 --prompt-tokens 1024 \
    --gen-tokens 1 --repetitions 1 >"$work/nsys.log" 2>&1 &&
    nsys stats --report cuda_gpu_kern_sum --format csv --output - \
      "$work/prefill-profile.nsys-rep" 2>>"$work/nsys.log" | python3 -c '
import csv, re, sys
rows = [r for r in csv.reader(sys.stdin) if r]
head = next(i for i, r in enumerate(rows) if "Name" in r)
cols = rows[head]
t, n = cols.index("Total Time (ns)"), cols.index("Name")
gemm = re.compile(r"gemm|gemv|splitK|xmma|cutlass|nvjet|cublas", re.I)
total = sum(float(r[t]) for r in rows[head + 1:])
share = sum(float(r[t]) for r in rows[head + 1:] if gemm.search(r[n]))
print("cuBLAS kernels: %.1f %% of %.2f ms of kernel time" % (100 * share / total, total / 1e6))
' || echo "nsys profile failed: see $work/nsys.log"
else
  echo "NOT MEASURED: nsys (Nsight Systems) is not on this machine"
fi
