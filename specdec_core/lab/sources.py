"""Where the lab's training data comes from, shared by every lab command (cli.py, block_run.py):
the sources' sequences and held-out splits, their extracted shard folders (keyed by manifest),
the training sets cut to a head's taps, the draft vocabulary, and the results log.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from . import corpus
from .data import (cache_dir, corpus_dir, data_dir, keyed_dir, load_sequences, load_shards, manifest,
                   select_taps, split, split_by_prompt, SEED)
from .yardstick import frequent_vocab_of

SOURCES = ("gen", "shared")      # "text" too where the Debian text packages are installed


def target_pair():
    from ..models import load_pair
    return load_pair("smollm2-135m", draft="ngram", device="cpu")


def record(row: dict) -> None:
    print(json.dumps(row), flush=True)
    with open(cache_dir() / "results.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


VAL_PER_SOURCE = 96     # held-out sequences per source for tuning (by instruction)


def source_manifest(source: str, pair=None) -> dict:
    """What one source's shards are made from: its input files and their sizes and its split rule
    (read from the file system; only "text" has to build its sequences to describe them)."""
    if source == "shared":
        files = [data_dir() / "selfdistill.npz", data_dir() / "instructions.json"]
        return manifest(files, source=source, split="instruction-8%")
    if source == "gen":
        files = sorted(corpus_dir().glob("gen_*.npz"))
        if not files:
            raise SystemExit(f"no corpus shards (gen_*.npz) in {corpus_dir()}: pass --corpus DIR or run the corpus step")
        return manifest(files, source=source, split="prompt-md5-4%")
    return source_sets(source, pair)[3]


def source_sets(source: str, pair=None) -> tuple[list[dict], list[int], list[int], dict]:
    """(sequences, train indices, held-out indices, manifest) of one source; the held-out side is
    split by instruction. The manifest names the input files and their sizes."""
    if source == "shared":
        seqs, _ = load_sequences()
        return (seqs, *split(seqs), source_manifest(source))
    if source == "gen":
        man = source_manifest(source)
        seqs = corpus.load_corpus(corpus_dir(), "gen")
        return (seqs, *split_by_prompt(seqs), man)
    seqs = corpus.text_sequences(pair or target_pair(), TEXT_PER_SOURCE)
    n_tok = int(sum(len(s["gen"]) for s in seqs))
    return seqs, list(range(len(seqs))), [], manifest([], source=source, sequences=len(seqs), tokens=n_tok)


TEXT_PER_SOURCE = 1500


def shard_dirs(source: str, pair=None) -> tuple[Path, Path]:
    man = source_manifest(source, pair)
    return keyed_dir(f"train_{source}", man), keyed_dir(f"val_{source}", man)


def source_caps(sources: str) -> list[tuple[str, int]]:
    """"gen,shared:34" -> [("gen", no cap), ("shared", 34)]: a shard cap per source, so a recipe names
    exactly the data it used whatever a longer extraction added since."""
    out = []
    for item in sources.split(","):
        name, _, cap = item.partition(":")
        out.append((name, int(cap) if cap else 10**9))
    return out


def train_data(sources: str, max_shards: int, layers: str) -> tuple[list[dict], list[dict]]:
    """(train, held-out) teacher-forced sequences of the sources, feats cut to the head's taps;
    train shuffled across sources."""
    data, held = [], []
    for s, cap in source_caps(sources):
        train_dir, val_dir = shard_dirs(s)
        data += select_taps(load_shards(train_dir, min(max_shards, cap)), layers.split(","))
        held += select_taps(load_shards(val_dir), layers.split(","))
    # One fixed shuffle across sources: batches mix them.
    return [data[i] for i in np.random.default_rng(SEED).permutation(len(data))], held


def draft_vocab(n: int, sources: str) -> torch.Tensor:
    """The n most frequent tokens of the target's outputs in the training sources' train splits."""
    return frequent_vocab_of([s["gen"] for s in target_outputs(sources)], n)


def target_outputs(sources: str = ",".join(SOURCES)) -> list[dict]:
    """The target's own outputs on training instructions: the train splits of the sources that hold
    them (shared, gen; whole splits, shard caps aside), in the order shared, gen."""
    names = {name for name, _ in source_caps(sources)}
    out = []
    for source in [s for s in ("shared", "gen") if s in names]:
        seqs, train_idx, _, _ = source_sets(source)
        out += [seqs[i] for i in train_idx]
    return out
