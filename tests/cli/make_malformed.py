#!/usr/bin/env python3
"""Writes malformed copies of valid model files into OUT_DIR, one per failure mode.

usage: make_malformed.py LLAMA2C_BIN GGUF_FILE HF_DIR OUT_DIR
Each output is a file (llama2.c, GGUF) or a directory (Hugging Face) that pdserve must reject with
one clear error line.
"""
import json
import os
import shutil
import struct
import sys


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def gguf_with_tensor_type(gguf, new_type):
    """Rewrites the ggml type of the first tensor info (found by its name) to new_type."""
    name = b"token_embd.weight"
    i = gguf.index(name) + len(name)
    n_dims = struct.unpack_from("<I", gguf, i)[0]
    type_offset = i + 4 + 8 * n_dims
    return gguf[:type_offset] + struct.pack("<I", new_type) + gguf[type_offset + 4:]


def main():
    llama2c_path, gguf_path, hf_dir, out = sys.argv[1:5]
    os.makedirs(out, exist_ok=True)
    llama2c = open(llama2c_path, "rb").read()
    gguf = open(gguf_path, "rb").read()

    # llama2.c checkpoints
    write(f"{out}/llama2c-truncated-header.bin", llama2c[:13])
    write(f"{out}/llama2c-truncated-weights.bin", llama2c[: len(llama2c) // 2])
    write(f"{out}/llama2c-trailing-bytes.bin", llama2c + b"\0" * 8)
    dims = list(struct.unpack_from("<7i", llama2c))
    bad = dims.copy(); bad[3] = 7  # dim 64 not divisible by 7 heads
    write(f"{out}/llama2c-heads-not-dividing.bin", struct.pack("<7i", *bad) + llama2c[28:])
    bad = dims.copy(); bad[0] = -64
    write(f"{out}/llama2c-negative-dim.bin", struct.pack("<7i", *bad) + llama2c[28:])
    bad = dims.copy(); bad[1] = 1 << 30
    write(f"{out}/llama2c-huge-hidden.bin", struct.pack("<7i", *bad) + llama2c[28:])
    write(f"{out}/llama2c-garbage.bin", b"\x7fELF" + os.urandom(200))

    # GGUF
    write(f"{out}/gguf-truncated.gguf", gguf[: len(gguf) // 3])
    write(f"{out}/gguf-header-only.gguf", gguf[:10])
    write(f"{out}/gguf-bad-version.gguf", gguf[:4] + struct.pack("<I", 99) + gguf[8:])
    write(f"{out}/gguf-q2_k-tensor.gguf", gguf_with_tensor_type(gguf, 10))  # Q2_K: unsupported
    write(f"{out}/gguf-unknown-type.gguf", gguf_with_tensor_type(gguf, 1234))
    huge = gguf[:8] + struct.pack("<Q", 1 << 60) + gguf[16:]  # tensor count
    write(f"{out}/gguf-absurd-tensor-count.gguf", huge)

    # Hugging Face directories
    def hf_variant(name, edit_config=None, edit_files=None):
        d = f"{out}/hf-{name}"
        shutil.copytree(hf_dir, d)
        if edit_config:
            cfg = json.load(open(f"{d}/config.json"))
            edit_config(cfg)
            json.dump(cfg, open(f"{d}/config.json", "w"))
        if edit_files:
            edit_files(d)

    hf_variant("wrong-model-type", lambda c: c.update(model_type="falcon"))
    hf_variant("rope-scaling", lambda c: c.update(rope_scaling={"type": "linear", "factor": 2.0}))
    hf_variant("heads-not-dividing", lambda c: c.update(num_attention_heads=7))
    hf_variant("config-not-json", edit_files=lambda d: write(f"{d}/config.json", b"{not json"))
    shards = sorted(f for f in os.listdir(hf_dir) if f.endswith(".safetensors"))
    def truncate_shard(d):
        data = open(f"{d}/{shards[0]}", "rb").read()
        write(f"{d}/{shards[0]}", data[: len(data) // 2])
    hf_variant("truncated-shard", edit_files=truncate_shard)
    def absurd_header(d):
        data = open(f"{d}/{shards[0]}", "rb").read()
        write(f"{d}/{shards[0]}", struct.pack("<Q", 1 << 62) + data[8:])
    hf_variant("absurd-safetensors-header", edit_files=absurd_header)
    def int8_dtype(d):
        data = open(f"{d}/{shards[0]}", "rb").read()
        n = struct.unpack_from("<Q", data)[0]
        header = data[8 : 8 + n].replace(b'"F32"', b'"I8" ', 1)
        write(f"{d}/{shards[0]}", data[:8] + header + data[8 + n :])
    hf_variant("int8-tensor", edit_files=int8_dtype)
    hf_variant("missing-shard", edit_files=lambda d: os.remove(f"{d}/{shards[-1]}"))


if __name__ == "__main__":
    main()
