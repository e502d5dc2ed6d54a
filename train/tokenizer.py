#!/usr/bin/python3
"""Trains the SentencePiece tokenizer of pdserve's trained model on the corpus' train split.

  tokenizer.py --corpus DIR --out PREFIX [--vocab 8192]

Writes PREFIX.model (the Hugging Face `tokenizer.model` file, which `pdserve convert` also embeds in
GGUF metadata) and PREFIX.vocab, unless PREFIX.model exists; then adds each source's token count per
split (BOS included, as train.py sees them) to the corpus' manifest.json. Llama 2's conventions: BPE, byte fallback (no input is ever
<unk>), digits split, a dummy prefix space, <unk>=0, <s>=1, </s>=2, no normalization (pdserve and
llama.cpp do not normalize). Deterministic for a given corpus (fixed seed, one thread).
"""
import argparse
import collections
import json
import os

import sentencepiece as spm


def count_tokens(corpus, model_path):
    processor = spm.SentencePieceProcessor(model_file=model_path)
    counts = collections.defaultdict(dict)
    for split in ("train", "valid", "test"):
        with open(os.path.join(corpus, split + ".txt"), encoding="utf-8") as f:
            documents = [d for d in f.read().split("\n\f\n") if d]
        with open(os.path.join(corpus, split + ".sources"), encoding="utf-8") as f:
            sources = f.read().split()
        if len(sources) != len(documents):
            raise SystemExit(f"tokenizer.py: {corpus}/{split}.sources does not match {split}.txt")
        per_source = collections.Counter()
        for source, ids in zip(sources, processor.encode(documents)):
            per_source[source] += len(ids) + 1
        for source, n in per_source.items():
            counts[source][split] = n
    manifest_path = os.path.join(corpus, "manifest.json")
    with open(manifest_path, encoding="utf-8") as f:
        manifest = json.load(f)
    for entry in manifest["sources"]:
        entry["tokens"] = {s: counts[entry["name"]].get(s, 0) for s in ("train", "valid", "test")}
    manifest["tokenizer"] = os.path.basename(model_path)
    with open(manifest_path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    total = sum(sum(e["tokens"].values()) for e in manifest["sources"])
    print(f"tokenizer: {total} tokens in the corpus")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--sentences", type=int, default=400000,
                        help="lines sampled from the train split (SentencePiece's own seeded sample)")
    args = parser.parse_args()
    if os.path.exists(args.out + ".model"):
        print(f"tokenizer: {args.out}.model exists, kept")
        count_tokens(args.corpus, args.out + ".model")
        return
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    spm.set_random_generator_seed(1234)
    spm.SentencePieceTrainer.train(
        input=os.path.join(args.corpus, "train.txt"), model_prefix=args.out,
        vocab_size=args.vocab, model_type="bpe", byte_fallback=True, split_digits=True,
        add_dummy_prefix=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, character_coverage=0.9995,
        input_sentence_size=args.sentences, shuffle_input_sentence=True,
        max_sentence_length=16384, num_threads=1, minloglevel=1)
    print(f"tokenizer: {args.out}.model ({args.vocab} pieces)")
    count_tokens(args.corpus, args.out + ".model")


if __name__ == "__main__":
    main()
