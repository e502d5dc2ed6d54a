"""The Llama model pdserve's trained model is, in PyTorch, with Hugging Face's conventions (weight
names, split-half RoPE), so that export.py writes its state dict as it stands; and the SwiftKV form
of it (research/algorithms.md §1.1, DESIGN.md §4), used by distill.py.

SwiftKV at layer l with groups of G: x = RMSNorm_swiftkv(h_l); for every layer j >= l the keys and
values come from x through the group leader's k/v_proj_swiftkv (leader l + ((j - l) // G) * G), the
query from the layer's own q_proj_swiftkv on RMSNorm_in_j(h_j). Layers < l are unchanged.
"""
import dataclasses
import json
import math

import torch
import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass
class Config:
    vocab: int = 8192
    dim: int = 256
    layers: int = 8
    heads: int = 4
    kv_heads: int = 2
    hidden: int = 768
    seq_len: int = 1024
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self):
        return self.dim // self.heads

    def to_json(self):
        return json.dumps(dataclasses.asdict(self))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * \
            self.weight


def rope_tables(config, length, device=None):
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, config.head_dim, 2, device=device).float()
                                       / config.head_dim))
    angles = torch.outer(torch.arange(length, device=device).float(), inv)  # [T, d/2]
    angles = torch.cat([angles, angles], dim=-1)                            # [T, d]
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """x: [B, H, T, d]; split-half pairing (element i rotates with i + d/2), as HF Llama."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.dim, c.heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.heads * c.head_dim, c.dim, bias=False)

    def heads(self, x, count):
        b, t, _ = x.shape
        return x.view(b, t, count, self.c.head_dim).transpose(1, 2)

    def forward(self, x, rope, kv_input=None, kv_proj=None):
        """x: the normed residual [B, T, dim]; kv_input/kv_proj: SwiftKV's x and (k, v) layers."""
        c = self.c
        cos, sin = rope
        q = apply_rope(self.heads(self.q_proj(x), c.heads), cos, sin)
        if kv_proj is None:
            k, v = self.k_proj(x), self.v_proj(x)
        else:
            k, v = kv_proj[0](kv_input), kv_proj[1](kv_input)
        k = apply_rope(self.heads(k, c.kv_heads), cos, sin)
        v = self.heads(v, c.kv_heads)
        repeat = c.heads // c.kv_heads
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
        t = x.shape[1]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
        mask = torch.full((t, t), float("-inf"), device=x.device).triu(1)
        out = torch.softmax(scores + mask, dim=-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(x.shape[0], t, -1))


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.dim, c.hidden, bias=False)
        self.up_proj = nn.Linear(c.dim, c.hidden, bias=False)
        self.down_proj = nn.Linear(c.hidden, c.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = Mlp(c)
        self.input_layernorm = RMSNorm(c.dim, c.norm_eps)
        self.post_attention_layernorm = RMSNorm(c.dim, c.norm_eps)


class SwiftKv(nn.Module):
    """The SwiftKV tensors for layers >= l in groups of G (names as Snowflake's checkpoints)."""

    def __init__(self, c, l, g):
        super().__init__()
        self.l, self.g = l, g
        self.norm_swiftkv = RMSNorm(c.dim, c.norm_eps)
        self.q_proj_swiftkv = nn.ModuleList(
            nn.Linear(c.dim, c.heads * c.head_dim, bias=False) for _ in range(l, c.layers))
        leaders = (c.layers - l) // g
        self.k_proj_swiftkv = nn.ModuleList(
            nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False) for _ in range(leaders))
        self.v_proj_swiftkv = nn.ModuleList(
            nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False) for _ in range(leaders))

    def init_from(self, model):
        """SwiftKV's initialization: norm = layer l's input norm, q = the layer's own, k/v = the
        group's mean."""
        with torch.no_grad():
            layers = model.model.layers
            self.norm_swiftkv.weight.copy_(layers[self.l].input_layernorm.weight)
            for i, q in enumerate(self.q_proj_swiftkv):
                q.weight.copy_(layers[self.l + i].self_attn.q_proj.weight)
            for i, (k, v) in enumerate(zip(self.k_proj_swiftkv, self.v_proj_swiftkv)):
                group = layers[self.l + i * self.g: self.l + (i + 1) * self.g]
                k.weight.copy_(torch.stack([x.self_attn.k_proj.weight for x in group]).mean(0))
                v.weight.copy_(torch.stack([x.self_attn.v_proj.weight for x in group]).mean(0))


class Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab, c.dim)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.dim, c.norm_eps)


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = Body(c)
        self.lm_head = nn.Linear(c.dim, c.vocab, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)

    def embed(self, tokens):
        """tokens: [B, T] -> the residual stream entering layer 0, and the RoPE tables."""
        return self.model.embed_tokens(tokens), rope_tables(self.config, tokens.shape[1],
                                                            tokens.device)

    def run_layers(self, h, rope, first, last, swiftkv=None):
        """The residual stream leaving layer last - 1, given h entering layer `first`. Layers >=
        swiftkv.l run as SwiftKV rewires them (then `first` must be <= swiftkv.l)."""
        kv_input = None
        for j in range(first, last):
            layer = self.model.layers[j]
            x = layer.input_layernorm(h)
            if swiftkv is None or j < swiftkv.l:
                h = h + layer.self_attn(x, rope)
            else:
                if j == swiftkv.l:
                    kv_input = swiftkv.norm_swiftkv(h)
                leader = (j - swiftkv.l) // swiftkv.g
                attn = layer.self_attn
                q_saved = attn.q_proj
                attn.q_proj = swiftkv.q_proj_swiftkv[j - swiftkv.l]
                try:
                    h = h + attn(x, rope, kv_input, (swiftkv.k_proj_swiftkv[leader],
                                                     swiftkv.v_proj_swiftkv[leader]))
                finally:
                    attn.q_proj = q_saved
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return h

    def head(self, h):
        return self.lm_head(self.model.norm(h))

    def forward(self, tokens, swiftkv=None):
        """tokens: [B, T] -> logits [B, T, vocab]; with `swiftkv` (a SwiftKv), the rewired model."""
        h, rope = self.embed(tokens)
        return self.head(self.run_layers(h, rope, 0, self.config.layers, swiftkv))
