"""Token streams of the corpus' splits, shared by train.py, distill.py and evaluate.py.

Each split is its documents, each tokenized with the SentencePiece model and preceded by BOS (id 1),
concatenated; cached beside the corpus as <split>.<tokenizer hash>.u16 (uint16, native order).
Batches are windows at offsets drawn from a generator seeded by (seed, step), so a resumed run sees
exactly the batches an uninterrupted one would.
"""
import hashlib
import os

import numpy
import sentencepiece as spm
import torch

DOC_SEPARATOR = "\n\f\n"
BOS = 1


def tokens(corpus_dir, split, tokenizer_path):
    with open(tokenizer_path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    cache = os.path.join(corpus_dir, f"{split}.{digest}.u16")
    if not os.path.exists(cache):
        processor = spm.SentencePieceProcessor(model_file=tokenizer_path)
        if processor.vocab_size() > 65536:
            raise ValueError("data.py stores uint16 token ids; the vocabulary is too large")
        with open(os.path.join(corpus_dir, split + ".txt"), encoding="utf-8") as f:
            documents = [d for d in f.read().split(DOC_SEPARATOR) if d]
        ids = []
        for encoded in processor.encode(documents):
            ids.append(BOS)
            ids.extend(encoded)
        numpy.asarray(ids, dtype=numpy.uint16).tofile(cache + ".tmp")
        os.replace(cache + ".tmp", cache)
    return torch.from_numpy(numpy.fromfile(cache, dtype=numpy.uint16).astype(numpy.int64))


def batch(stream, batch_size, seq_len, seed, step):
    """[batch_size, seq_len + 1] windows of `stream` (inputs are [:, :-1], targets [:, 1:])."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(stream) - seq_len - 1, (batch_size,), generator=generator)
    return torch.stack([stream[s:s + seq_len + 1] for s in starts.tolist()])


def spread(stream, seq_len, count):
    """`count` non-overlapping [1, seq_len + 1] windows spaced evenly over the whole stream (every
    source of a split, which is in source order, not only the first)."""
    stride = (len(stream) - seq_len - 1) // max(1, count - 1) if count > 1 else 0
    for i in range(count):
        yield stream[i * stride: i * stride + seq_len + 1].unsqueeze(0)


def chunks(stream, seq_len, limit=None):
    """Consecutive non-overlapping [1, seq_len + 1] windows (the evaluation protocol)."""
    count = (len(stream) - 1) // seq_len
    if limit is not None:
        count = min(count, limit)
    for i in range(count):
        yield stream[i * seq_len: i * seq_len + seq_len + 1].unsqueeze(0)
