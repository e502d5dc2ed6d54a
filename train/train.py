#!/usr/bin/python3
"""Trains pdserve's model (train/model.py) on the corpus' train split. Resumable: rerun the same
command and it continues from OUT/checkpoint.pt with the same batches an uninterrupted run sees.

  train.py --corpus DIR --tokenizer FILE.model --out DIR [--preset cpu|gpu] [--steps N] ...

Presets: cpu (8 layers, dim 256, 4 query heads of 64 over 2 KV heads; about an hour on 2 cores with AVX512-BF16),
gpu (12 layers, dim 512, 8 heads over 2 KV heads; --device cuda). Writes OUT/log.jsonl (one line
per logged step: loss, validation loss, learning rate, tokens seen, wall seconds) and
OUT/checkpoint.pt (model, optimizer, step, configuration), replaced atomically.
"""
import argparse
import dataclasses
import json
import math
import os
import platform
import time

import torch

import data
import model as llama

PRESETS = {
    "cpu": dict(config=llama.Config(dim=256, layers=8, heads=4, kv_heads=2, hidden=768,
                                    seq_len=1024),
                steps=1800, batch=4, lr=2e-3, warmup=100),
    "gpu": dict(config=llama.Config(dim=512, layers=12, heads=8, kv_heads=2, hidden=1536,
                                    seq_len=1024),
                steps=20000, batch=32, lr=1e-3, warmup=500),
}


def learning_rate(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@torch.no_grad()
def validation_loss(net, stream, seq_len, windows, device):
    net.eval()
    total = 0.0
    count = 0
    for chunk in data.chunks(stream, seq_len, windows):
        chunk = chunk.to(device)
        logits = net(chunk[:, :-1])
        total += torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum").item()
        count += chunk.shape[1] - 1
    net.train()
    return total / count


def save(path, payload):
    """torch.save, replacing `path` atomically (an interrupted save leaves the old checkpoint)."""
    torch.save(payload, path + ".tmp")
    os.replace(path + ".tmp", path)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--warmup", type=int)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                        help="bf16: autocast matrix products to bfloat16 (2x faster where the "
                        "CPU has AVX512-BF16/AMX); weights and optimizer state stay fp32")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--eval-every", type=int, default=100)
    parser.add_argument("--eval-windows", type=int, default=16)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    args = parser.parse_args()
    preset = PRESETS[args.preset]
    for key in ("steps", "batch", "lr", "warmup"):
        if getattr(args, key) is None:
            setattr(args, key, preset[key])
    args.config = preset["config"]
    return args


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    checkpoint_path = os.path.join(args.out, "checkpoint.pt")
    train_stream = data.tokens(args.corpus, "train", args.tokenizer)
    valid_stream = data.tokens(args.corpus, "valid", args.tokenizer)
    print(f"train: {len(train_stream)} train tokens, {len(valid_stream)} validation tokens",
          flush=True)

    torch.manual_seed(args.seed)
    config = args.config
    net = llama.Llama(config).to(args.device)
    decay = [p for n, p in net.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in net.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    step, seconds, tokens_seen = 0, 0.0, 0
    if os.path.exists(checkpoint_path):
        state = torch.load(checkpoint_path, map_location=args.device)
        if state["config"] != dataclasses.asdict(config):
            raise SystemExit(f"train.py: {checkpoint_path} holds another configuration "
                             f"({state['config']}); use another --out")
        net.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, seconds, tokens_seen = state["step"], state["seconds"], state["tokens"]
        print(f"train: resuming at step {step} ({tokens_seen} tokens, {seconds:.0f} s)",
              flush=True)
    parameters = sum(p.numel() for p in net.parameters())
    print(f"train: {parameters / 1e6:.2f} M parameters, {args.steps} steps of "
          f"{args.batch} x {config.seq_len} tokens, {args.threads} threads", flush=True)

    log = open(os.path.join(args.out, "log.jsonl"), "a", encoding="utf-8")
    started = time.time() - seconds
    while step < args.steps:
        lr = learning_rate(step, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        window = data.batch(train_stream, args.batch, config.seq_len, args.seed, step)
        window = window.to(args.device)
        with torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16,
                            enabled=args.precision == "bf16"):
            logits = net(window[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1),
                                                 window[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        step += 1
        tokens_seen += window[:, :-1].numel()
        record = None
        if step % args.log_every == 0 or step == args.steps:
            record = {"step": step, "loss": round(loss.item(), 4), "lr": lr,
                      "tokens": tokens_seen, "seconds": round(time.time() - started, 1)}
        if step % args.eval_every == 0 or step == args.steps:
            record["valid_loss"] = round(validation_loss(
                net, valid_stream, config.seq_len, args.eval_windows, args.device), 4)
        if record:
            log.write(json.dumps(record) + "\n")
            log.flush()
            print("train: " + json.dumps(record), flush=True)
        if step % args.checkpoint_every == 0 or step == args.steps:
            save(checkpoint_path, {
                "model": net.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "seconds": time.time() - started, "tokens": tokens_seen,
                "config": dataclasses.asdict(config), "preset": args.preset, "seed": args.seed,
                "machine": platform.processor() or platform.machine()})
    log.close()


if __name__ == "__main__":
    main()
