#!/usr/bin/python3
"""SwiftKV distillation (research/algorithms.md §1, the seed paper's recipe): the trained model is
frozen and is its own teacher; layers >= l get new Q/K/V (for groups of G layers one K/V, AcrossKV)
computed from RMSNorm_swiftkv(h_l), initialized as SwiftKV initializes them (q = the layer's own,
k/v = the group's mean, norm = layer l's input norm), and trained on the teacher's logits (KL).
Resumable like train.py; export.py writes the result as a llama_swiftkv checkpoint.

  distill.py --teacher CHECKPOINT --corpus DIR --tokenizer FILE.model --out DIR --layer l
             [--group G] [--steps N] ...

Layers < l are the teacher's, so each step runs them once (no gradient) and continues both the
teacher and the student from h_l. OUT/log.jsonl holds the training KL and the validation KL of the
student against the teacher (step 0: the naive rewiring).
"""
import argparse
import contextlib
import dataclasses
import json
import math
import os
import time

import torch
import torch.nn.functional as F

import data
import model as llama
import train


def kl(student_logits, teacher_logits):
    """Mean over tokens of KL(teacher || student), in nats."""
    teacher = F.log_softmax(teacher_logits.float(), dim=-1)
    student = F.log_softmax(student_logits.float(), dim=-1)
    return (teacher.exp() * (teacher - student)).sum(-1).mean()


def both(net, swiftkv, tokens, autocast):
    """Teacher and student logits for tokens [B, T], sharing layers < l."""
    c = net.config
    with torch.no_grad(), autocast():
        h, rope = net.embed(tokens)
        h_l = net.run_layers(h, rope, 0, swiftkv.l)
        teacher = net.head(net.run_layers(h_l, rope, swiftkv.l, c.layers))
    with autocast():
        student = net.head(net.run_layers(h_l, rope, swiftkv.l, c.layers, swiftkv))
    return teacher, student


@torch.no_grad()
def validation_kl(net, swiftkv, stream, args):
    total = 0.0
    windows = list(data.spread(stream, net.config.seq_len, args.eval_windows))
    for chunk in windows:
        teacher, student = both(net, swiftkv, chunk[:, :-1], contextlib.nullcontext)
        total += kl(student, teacher).item()
    return total / len(windows)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("teacher", "corpus", "tokenizer", "out"):
        parser.add_argument("--" + name, required=True)
    parser.add_argument("--layer", type=int, required=True, help="l: layers >= l are rewired")
    parser.add_argument("--group", type=int, default=1, help="G: AcrossKV group size")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1017)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--eval-windows", type=int, default=12)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    teacher_state = torch.load(args.teacher, map_location="cpu")
    config = llama.Config(**teacher_state["config"])
    if not 0 < args.layer < config.layers or (config.layers - args.layer) % args.group:
        raise SystemExit(f"distill.py: need 0 < l < {config.layers} and G dividing "
                         f"{config.layers} - l; got l = {args.layer}, G = {args.group}")
    net = llama.Llama(config)
    net.load_state_dict(teacher_state["model"])
    net.requires_grad_(False)
    swiftkv = llama.SwiftKv(config, args.layer, args.group)
    swiftkv.init_from(net)
    optimizer = torch.optim.AdamW(swiftkv.parameters(), lr=args.lr, betas=(0.9, 0.95),
                                  weight_decay=0.0)
    os.makedirs(args.out, exist_ok=True)
    checkpoint_path = os.path.join(args.out, "checkpoint.pt")
    step, seconds = 0, 0.0
    if os.path.exists(checkpoint_path):
        state = torch.load(checkpoint_path, map_location="cpu")
        if (state["swiftkv"]["l"], state["swiftkv"]["g"]) != (args.layer, args.group):
            raise SystemExit(f"distill.py: {checkpoint_path} holds another l, G; use another --out")
        swiftkv.load_state_dict(state["swiftkv"]["state"])
        optimizer.load_state_dict(state["optimizer"])
        step, seconds = state["step"], state["seconds"]
        print(f"distill: resuming at step {step}", flush=True)
    train_stream = data.tokens(args.corpus, "train", args.tokenizer)
    valid_stream = data.tokens(args.corpus, "valid", args.tokenizer)
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16,  # noqa: E731
                                      enabled=args.precision == "bf16")
    log = open(os.path.join(args.out, "log.jsonl"), "a", encoding="utf-8")
    if step == 0:
        record = {"step": 0, "valid_kl": round(validation_kl(net, swiftkv, valid_stream, args), 5)}
        log.write(json.dumps(record) + "\n")
        print("distill: " + json.dumps(record), flush=True)
    started = time.time() - seconds
    while step < args.steps:
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * \
            (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        window = data.batch(train_stream, args.batch, config.seq_len, args.seed, step)
        teacher, student = both(net, swiftkv, window[:, :-1], autocast)
        loss = kl(student, teacher)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(swiftkv.parameters(), 1.0)
        optimizer.step()
        step += 1
        record = None
        if step % args.log_every == 0 or step == args.steps:
            record = {"step": step, "kl": round(loss.item(), 5), "lr": lr,
                      "seconds": round(time.time() - started, 1)}
        if step % args.eval_every == 0 or step == args.steps:
            record["valid_kl"] = round(validation_kl(net, swiftkv, valid_stream, args), 5)
        if record:
            log.write(json.dumps(record) + "\n")
            log.flush()
            print("distill: " + json.dumps(record), flush=True)
        if step % args.checkpoint_every == 0 or step == args.steps:
            payload = {"model": teacher_state["model"], "config": dataclasses.asdict(config),
                       "optimizer": optimizer.state_dict(), "step": step,
                       "seconds": time.time() - started,
                       "swiftkv": {"l": args.layer, "g": args.group,
                                   "state": swiftkv.state_dict()}}
            train.save(checkpoint_path, payload)
    log.close()


if __name__ == "__main__":
    main()
