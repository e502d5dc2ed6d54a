#!/usr/bin/python3
"""Exports a train.py or distill.py checkpoint as a Hugging Face directory: config.json,
generation_config.json, model.safetensors (float32, or --dtype f16/bf16) and tokenizer.model.
`pdserve convert --format gguf` turns that directory into the GGUF file (train/build_model.sh).

  export.py --checkpoint FILE --tokenizer FILE.model --out DIR [--dtype f32|f16|bf16]

A distill.py checkpoint (it holds SwiftKV tensors) is written as Snowflake's SwiftKV checkpoints
are (model_type "llama_swiftkv", docs/engine.md): every teacher tensor, plus norm_swiftkv and the
q/k/v_proj_swiftkv of layers >= l.
"""
import argparse
import json
import os
import shutil
import struct

import torch

SAFETENSORS_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}
TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def write_safetensors(path, tensors):
    header = {}
    offset = 0
    for name, tensor in tensors.items():
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for tensor in tensors.values():
            f.write(tensor.contiguous().view(torch.uint8).numpy().tobytes())
    os.replace(path + ".tmp", path)


def swiftkv_tensors(state, l, g, layers):
    """Renames distill.py's SwiftKv module state to the checkpoint's tensor names."""
    out = {"model.norm_swiftkv.weight": state["norm_swiftkv.weight"]}
    for j in range(l, layers):
        out[f"model.layers.{j}.self_attn.q_proj_swiftkv.weight"] = \
            state[f"q_proj_swiftkv.{j - l}.weight"]
        if (j - l) % g == 0:
            for kind in ("k", "v"):
                out[f"model.layers.{j}.self_attn.{kind}_proj_swiftkv.weight"] = \
                    state[f"{kind}_proj_swiftkv.{(j - l) // g}.weight"]
    return out


def hf_config(config, swiftkv):
    out = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": config["vocab"], "hidden_size": config["dim"],
        "intermediate_size": config["hidden"], "num_hidden_layers": config["layers"],
        "num_attention_heads": config["heads"], "num_key_value_heads": config["kv_heads"],
        "head_dim": config["dim"] // config["heads"], "hidden_act": "silu",
        "max_position_embeddings": config["seq_len"], "rms_norm_eps": config["norm_eps"],
        "rope_theta": config["rope_theta"], "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
    }
    if swiftkv:
        out.update({"architectures": ["LlamaSwiftKVForCausalLM"], "model_type": "llama_swiftkv",
                    "swiftkv": True, "num_key_value_layers": swiftkv["l"],
                    "key_value_group_size": swiftkv["g"]})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--dtype", choices=sorted(TORCH_DTYPES), default="f32")
    args = parser.parse_args()
    state = torch.load(args.checkpoint, map_location="cpu")
    config = state["config"]
    tensors = dict(state["model"])
    swiftkv = state.get("swiftkv")
    if swiftkv:
        tensors.update(swiftkv_tensors(swiftkv["state"], swiftkv["l"], swiftkv["g"],
                                       config["layers"]))
    dtype = TORCH_DTYPES[args.dtype]
    tensors = {name: t.detach().to(dtype) for name, t in sorted(tensors.items())}
    os.makedirs(args.out, exist_ok=True)
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
    hf = hf_config(config, swiftkv)
    hf["torch_dtype"] = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[args.dtype]
    with open(os.path.join(args.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(hf, f, indent=1)
    with open(os.path.join(args.out, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f, indent=1)
    shutil.copyfile(args.tokenizer, os.path.join(args.out, "tokenizer.model"))
    print(f"export: {args.out} ({len(tensors)} tensors, {args.dtype}, step {state['step']})")


if __name__ == "__main__":
    main()
