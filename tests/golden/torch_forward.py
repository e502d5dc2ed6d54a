#!/usr/bin/python3
"""An independent forward pass of Llama, Mistral, Qwen2 and Qwen3 in PyTorch (float64), written
from the published architectures (Hugging Face transformers' modeling_llama / modeling_qwen2 /
modeling_qwen3), reading a Hugging Face directory (config.json and *.safetensors) by itself. It
shares no code with pdserve; tests/golden/make_family_logits.sh uses it to record the logits that
family_golden_test compares the engine against, and scripts/family_parity.sh its perplexity.

  torch_forward.py logits DIR --ids 1,2,3          -> JSON: {"logits": [[...], ...]} per position
  torch_forward.py greedy DIR --ids 1,2,3 --tokens N -> JSON: {"ids": [...]}, the N tokens that
      greedy decoding appends (argmax of each step's logits; the full sequence is recomputed)
  torch_forward.py perplexity DIR --ids-file F --ctx N [--bos ID]
      -> JSON: {"perplexity": P, "scored": K}, with llama-perplexity's protocol: floor(n / ctx)
         chunks, each chunk's first token replaced by BOS (when given), tokens ctx/2+1 .. ctx-1 of
         each chunk scored.
"""
import argparse
import glob
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(directory):
    tensors = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
            data = f.read()
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            raw = bytearray(data[begin:end])
            t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.zeros(0)
            tensors[name] = t.reshape(info["shape"]).to(torch.float64)
    return tensors


class Model:
    def __init__(self, directory):
        with open(os.path.join(directory, "config.json")) as f:
            c = json.load(f)
        if c.get("rope_scaling"):
            sys.exit("torch_forward.py: rope_scaling is not implemented here")
        self.model_type = c["model_type"]
        if self.model_type not in ("llama", "mistral", "qwen2", "qwen3"):
            sys.exit(f"torch_forward.py: model_type {self.model_type!r} is not implemented here")
        self.dim = c["hidden_size"]
        self.n_heads = c["num_attention_heads"]
        self.n_kv_heads = c.get("num_key_value_heads", self.n_heads)
        self.head_dim = c.get("head_dim") or self.dim // self.n_heads
        self.n_layers = c["num_hidden_layers"]
        self.eps = c["rms_norm_eps"]
        self.theta = c.get("rope_theta", 10000.0)
        window = c.get("sliding_window") if c.get("use_sliding_window", True) else None
        self.window = window
        self.w = read_safetensors(directory)
        if "lm_head.weight" not in self.w:  # tie_word_embeddings
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]

    def rms_norm(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def rope(self, x, positions):
        # rotate_half convention: dimension i pairs with i + head_dim/2.
        half = self.head_dim // 2
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, half, dtype=torch.float64) * 2 / self.head_dim))
        angles = positions[:, None].to(torch.float64) * inv_freq[None, :]
        cos = torch.cat([angles.cos(), angles.cos()], -1)[:, None, :]
        sin = torch.cat([angles.sin(), angles.sin()], -1)[:, None, :]
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin

    def linear(self, x, prefix):
        y = x @ self.w[prefix + ".weight"].T
        bias = self.w.get(prefix + ".bias")
        return y if bias is None else y + bias

    def attention(self, x, i, positions):
        p = f"model.layers.{i}.self_attn"
        n = x.shape[0]
        q = self.linear(x, p + ".q_proj").view(n, self.n_heads, self.head_dim)
        k = self.linear(x, p + ".k_proj").view(n, self.n_kv_heads, self.head_dim)
        v = self.linear(x, p + ".v_proj").view(n, self.n_kv_heads, self.head_dim)
        if self.model_type == "qwen3":  # RMSNorm of each head before RoPE
            q = self.rms_norm(q, self.w[p + ".q_norm.weight"])
            k = self.rms_norm(k, self.w[p + ".k_norm.weight"])
        q, k = self.rope(q, positions), self.rope(k, positions)
        group = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(self.head_dim)
        mask = positions[None, :] > positions[:, None]
        if self.window:
            mask |= positions[:, None] - positions[None, :] >= self.window
        scores = scores.masked_fill(mask[None], float("-inf")).softmax(-1)
        out = torch.einsum("hqk,khd->qhd", scores, v).reshape(n, self.n_heads * self.head_dim)
        return self.linear(out, p + ".o_proj")

    def mlp(self, x, i):
        p = f"model.layers.{i}.mlp"
        gate = torch.nn.functional.silu(self.linear(x, p + ".gate_proj"))
        return self.linear(gate * self.linear(x, p + ".up_proj"), p + ".down_proj")

    def logits(self, ids):
        positions = torch.arange(len(ids))
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids)]
        for i in range(self.n_layers):
            p = f"model.layers.{i}"
            x = x + self.attention(self.rms_norm(x, self.w[p + ".input_layernorm.weight"]), i, positions)
            x = x + self.mlp(self.rms_norm(x, self.w[p + ".post_attention_layernorm.weight"]), i)
        return self.linear(self.rms_norm(x, self.w["model.norm.weight"]), "lm_head")


def perplexity(model, ids, ctx, bos):
    nll, scored = 0.0, 0
    for chunk in range(len(ids) // ctx):
        tokens = list(ids[chunk * ctx:(chunk + 1) * ctx])
        if bos is not None:
            tokens[0] = bos
        log_probs = model.logits(tokens).log_softmax(-1)
        for j in range(ctx // 2, ctx - 1):
            nll -= log_probs[j, tokens[j + 1]].item()
            scored += 1
    return math.exp(nll / scored), scored


def greedy(model, ids, count):
    ids = list(ids)
    out = []
    for _ in range(count):
        out.append(int(model.logits(ids)[-1].argmax()))
        ids.append(out[-1])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["logits", "greedy", "perplexity"])
    parser.add_argument("model")
    parser.add_argument("--ids", help="comma-separated token ids (logits, greedy)")
    parser.add_argument("--tokens", type=int, default=16, help="tokens to generate (greedy)")
    parser.add_argument("--ids-file", help="whitespace-separated token ids (perplexity)")
    parser.add_argument("--ctx", type=int, default=256)
    parser.add_argument("--bos", type=int)
    args = parser.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    model = Model(args.model)
    with torch.no_grad():
        if args.mode == "logits":
            ids = [int(t) for t in args.ids.split(",")]
            print(json.dumps({"logits": model.logits(ids).tolist()}))
        elif args.mode == "greedy":
            ids = [int(t) for t in args.ids.split(",")]
            print(json.dumps({"ids": greedy(model, ids, args.tokens)}))
        else:
            with open(args.ids_file) as f:
                ids = [int(t) for t in f.read().split()]
            ppl, scored = perplexity(model, ids, args.ctx, args.bos)
            print(json.dumps({"perplexity": ppl, "scored": scored}))


if __name__ == "__main__":
    main()
