#!/usr/bin/env python3
"""The peer measurement for kernels/cuda/attention_benchmark.cc: PyTorch's
torch.nn.functional.scaled_dot_product_attention on the same shapes, timed with CUDA events.

  prefill: 1 × 32 heads × 4096 causal queries × head_dim 128, bf16 and fp32
  decode:  batch × 32 query heads (GQA 4: 8 KV heads) × 1 query over 16384 keys, bf16 and fp32

Prints one JSON line per case: median milliseconds over --iters runs after a warm-up, TFLOP/s
(prefill: 2·n²·d·heads, causal) or K+V bytes/s (decode). Without an importable torch or a CUDA
device it prints {"skipped": ...} and exits 0.
"""
import argparse
import json
import statistics
import sys

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def median_ms(torch, fn, iters):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def prefill(torch, dtype, tokens, iters):
    f = torch.nn.functional
    q, k, v = (torch.randn(1, HEADS, tokens, HEAD_DIM, device="cuda", dtype=dtype)
               for _ in range(3))
    ms = median_ms(torch, lambda: f.scaled_dot_product_attention(q, k, v, is_causal=True), iters)
    flops = 2.0 * tokens * tokens * HEAD_DIM * HEADS
    return {"case": "prefill", "dtype": str(dtype).removeprefix("torch."), "tokens": tokens,
            "median_ms": ms, "tflops": flops / (ms * 1e-3) * 1e-12}


def decode(torch, dtype, batch, context, iters):
    f = torch.nn.functional
    q = torch.randn(batch, HEADS, 1, HEAD_DIM, device="cuda", dtype=dtype)
    k = torch.randn(batch, KV_HEADS, context, HEAD_DIM, device="cuda", dtype=dtype)
    v = torch.randn_like(k)

    def run():
        try:
            return f.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        except TypeError:  # torch < 2.5: no enable_gqa; expand the KV heads (reads them 4 times)
            group = HEADS // KV_HEADS
            return f.scaled_dot_product_attention(q, k.repeat_interleave(group, 1),
                                                  v.repeat_interleave(group, 1))

    ms = median_ms(torch, run, iters)
    kv_bytes = 2.0 * k.numel() * k.element_size()
    return {"case": "decode", "dtype": str(dtype).removeprefix("torch."), "batch": batch,
            "context": context, "median_ms": ms, "kv_bytes_per_second": kv_bytes / (ms * 1e-3)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--context", type=int, default=16384)
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    args = parser.parse_args()
    try:
        import torch
    except Exception as error:  # noqa: BLE001 - any import failure means no peer
        print(json.dumps({"skipped": f"torch not importable: {error}"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "torch sees no CUDA device"}))
        return 0
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}))
    for dtype in (torch.bfloat16, torch.float32):
        print(json.dumps(prefill(torch, dtype, args.tokens, args.iters)), flush=True)
        for batch in args.batches:
            print(json.dumps(decode(torch, dtype, batch, args.context, args.iters)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
