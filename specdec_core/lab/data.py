"""Self-distillation data for a draft: the shared target continuations and the lab's corpus, the
held-out splits by instruction, and teacher forcing (target features + log-normalisers on disk).

Teacher forcing runs the target once over prompt + continuation and stores, for every position t,
its hidden states at the tapped layers (FEATURE_LAYERS, fp16, [n_taps·H]; the last tap is the final
post-norm state f_t) and the log-normaliser of its logits: with the frozen output layer W the
target's full distribution is softmax(W f_t), so the truncated-vocabulary teacher
p(x) = exp(W_x f_t − lse_t) is exact and costs only N·H per position at training time.

Extracted shards live in a folder keyed by a manifest (format version, taps, the input files and
their sizes, the split rule): changed inputs get a new folder and never mix with old shards.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import torch

from ..atomic import write_atomic

ENV_DATA = "SPECDEC_DISTILL_DATA"   # the self-distillation data folder (`--data`)
ENV_CACHE = "SPECDEC_LAB_CACHE"     # extracted shards, checkpoints, results (`--cache`)
ENV_CORPUS = "SPECDEC_CORPUS"       # the corpus step's shards (`--corpus`), read in place
FORMAT_VERSION = 2                  # of extracted shards: 2 = several tapped layers
# hidden_states indices the head reads: two inner layers and the final post-norm state (last:
# the teacher's logits are W·f of the last tap). The verify pass returns them all at no extra cost.
FEATURE_LAYERS = (10, 20, -1)


def data_dir() -> Path:
    """$SPECDEC_DISTILL_DATA, else ../shared/distill-data from the current folder (a checkout
    with the project's shared folder beside it)."""
    return Path(os.environ.get(ENV_DATA) or Path.cwd().parent / "shared" / "distill-data")


def cache_dir() -> Path:
    """$SPECDEC_LAB_CACHE, else lab/ in the project cache (~/.cache/specdec-explainer)."""
    from ..models.embedded import cache_root
    return Path(os.environ.get(ENV_CACHE) or cache_root() / "lab")


def corpus_dir() -> Path:
    """$SPECDEC_CORPUS, else <data_dir>/corpus (../shared/distill-data/corpus): read in place."""
    return Path(os.environ.get(ENV_CORPUS) or data_dir() / "corpus")


def manifest(files: list[Path], **settings) -> dict:
    """What a cache folder was made from: format version, taps, each input file and its size."""
    return {"format": FORMAT_VERSION, "layers": list(FEATURE_LAYERS), **settings,
            "inputs": [{"name": f.name, "bytes": f.stat().st_size} for f in sorted(files)]}


def keyed_dir(stem: str, man: dict) -> Path:
    """<cache>/<stem>_<hash of the manifest>, with manifest.json inside: one folder per input set."""
    key = hashlib.sha1(json.dumps(man, sort_keys=True).encode()).hexdigest()[:10]
    folder = cache_dir() / f"{stem}_{key}"
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "manifest.json").is_file():
        write_atomic(folder / "manifest.json", lambda f: f.write(json.dumps(man, indent=1).encode()))
    return folder


HELD_OUT_FRACTION, SEED = 0.08, 0
# -- data ------------------------------------------------------------------------------------
def load_sequences(folder: Path = None) -> tuple[list[dict], list[str]]:
    """Sequences of the shared data: [{prompt: int64 [P], gen: int64 [G], greedy, instruction}]."""
    folder = Path(folder) if folder else data_dir()
    if not (folder / "selfdistill.npz").is_file():
        raise FileNotFoundError(f"no self-distillation data in {folder}: pass --data DIR or set {ENV_DATA}")
    with np.load(folder / "selfdistill.npz") as z:     # each array read once (NpzFile re-reads on access)
        d = {k: z[k] for k in z.files}
    instructions = json.loads((folder / "instructions.json").read_text())
    po, go = d["prompt_offsets"], d["gen_offsets"]
    seqs = [dict(prompt=d["prompt_ids"][po[i]:po[i + 1]].astype(np.int64),
                 gen=d["gen_ids"][go[i]:go[i + 1]].astype(np.int64), greedy=bool(d["greedy"][i]),
                 instruction=instructions[i]) for i in range(len(po) - 1)]
    return seqs, instructions


def split(seqs: list[dict]) -> tuple[list[int], list[int]]:
    """(train, held-out) sequence indices; the split is by distinct instruction, fixed seed."""
    distinct = sorted({s["instruction"] for s in seqs})
    rng = np.random.default_rng(SEED)
    held = set(rng.permutation(distinct)[: int(len(distinct) * HELD_OUT_FRACTION)].tolist())
    train = [i for i, s in enumerate(seqs) if s["instruction"] not in held]
    test = [i for i, s in enumerate(seqs) if s["instruction"] in held]
    # Train order is shuffled once so any prefix of the extracted shards is a fair subsample.
    return rng.permutation(train).tolist(), test


def split_by_prompt(seqs: list[dict], percent: int = 4) -> tuple[list[int], list[int]]:
    """(train, held-out) indices of corpus sequences: an instruction (its prompt ids) is held out
    when its hash falls in the first `percent` of 100, so every answer to it lands on one side."""
    held = lambda s: int(hashlib.md5(np.asarray(s["prompt"], np.int32).tobytes()).hexdigest(), 16) % 100 < percent
    train = [i for i, s in enumerate(seqs) if not held(s)]
    test = [i for i, s in enumerate(seqs) if held(s)]
    return np.random.default_rng(SEED).permutation(train).tolist(), test


def pending_shards(folder: Path, stem: str, n_shards: int, minutes: float, log=print):
    """(index, path) of the shards <folder>/<stem>_XXXX.npz still to write, until the time budget
    is spent: existing shards are skipped, so an interrupted job resumes where it stopped."""
    t0 = time.time()
    for s in range(n_shards):
        path = folder / f"{stem}_{s:04d}.npz"
        if path.exists():
            continue
        if time.time() - t0 > minutes * 60:
            log(f"time budget reached at shard {s}/{n_shards}")
            return
        yield s, path


# -- teacher forcing -------------------------------------------------------------------------
@torch.no_grad()
def extract(target, seqs: list[dict], idx: list[int], out_dir: Path, shard_size: int = 32,
            batch: int = 8, minutes: float = 1e9, log=print, layers=FEATURE_LAYERS) -> None:
    """Run the target over prompt+gen of seqs[idx] in shards; write out_dir/shard_XXXX.npz with
    ids int32 [n], feats fp16 [n, len(layers)·H] (the tapped hidden states, the last one the final
    post-norm state), lse fp32 [n], offsets [s+1], prompt_len [s]. Existing shards are skipped, so
    an interrupted run resumes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    t0, done_tok = time.time(), 0
    n_shards = math.ceil(len(idx) / shard_size)
    for s, path in pending_shards(out_dir, "shard", n_shards, minutes, log):
        chunk = [seqs[i] for i in idx[s * shard_size:(s + 1) * shard_size]]
        order = sorted(range(len(chunk)), key=lambda j: len(chunk[j]["prompt"]) + len(chunk[j]["gen"]))
        ids, feats, lses = [None] * len(chunk), [None] * len(chunk), [None] * len(chunk)
        for b in range(0, len(order), batch):   # length-sorted batches: little padding
            group = order[b:b + batch]
            rows = [np.concatenate([chunk[j]["prompt"], chunk[j]["gen"]]) for j in group]
            T = max(len(r) for r in rows)
            x = torch.full((len(rows), T), 2, dtype=torch.long)
            mask = torch.zeros(len(rows), T, dtype=torch.long)
            for r, row in enumerate(rows):
                x[r, :len(row)], mask[r, :len(row)] = torch.from_numpy(row), 1
            out = target(x, attention_mask=mask, output_hidden_states=True)
            lse = torch.logsumexp(out.logits.float(), -1)
            h = torch.cat([out.hidden_states[i] for i in layers], -1)
            for r, j in enumerate(group):
                n = len(rows[r])
                ids[j], feats[j], lses[j] = rows[r], h[r, :n].half().numpy(), lse[r, :n].numpy()
            done_tok += int(mask.sum())
        save_npz(path, ids=np.concatenate(ids).astype(np.int32), feats=np.concatenate(feats),
                 lse=np.concatenate(lses), offsets=np.cumsum([0] + [len(i) for i in ids]),
                 prompt_len=np.array([len(c["prompt"]) for c in chunk]))
        el = time.time() - t0
        rate = done_tok / el
        log(f"shard {s + 1}/{n_shards}  {done_tok} tok  {rate:.0f} tok/s  "
            f"ETA {(n_shards - s - 1) * shard_size * 160 / rate / 60:.1f} min")


def save_npz(path: Path, **arrays) -> None:
    """np.savez, atomically: readers never see a half shard."""
    write_atomic(path, lambda f: np.savez(f, **arrays))


def save_ids(path: Path, seqs, **extra) -> None:
    """Token-id sequences (any int arrays or CPU tensors) as one compressed npz, atomically: flat
    uint16 `ids` (the target's 49,152 ids fit) + int64 `offsets` [n+1], + extra per-sequence arrays."""
    flat = np.concatenate([np.asarray(s, dtype=np.uint16) for s in seqs])
    off = np.cumsum([0] + [len(s) for s in seqs]).astype(np.int64)
    write_atomic(path, lambda f: np.savez_compressed(f, ids=flat, offsets=off, **extra))


def load_ids(path: Path) -> tuple[list[np.ndarray], dict]:
    """save_ids' file -> (the int64 sequences, the extra arrays by name); each array read once."""
    with np.load(path) as z:     # NpzFile re-reads (and decompresses) an array on every access
        arrays = {k: z[k] for k in z.files}
    ids, off = arrays.pop("ids").astype(np.int64), arrays.pop("offsets")
    return [ids[off[i]:off[i + 1]] for i in range(len(off) - 1)], arrays


def read_shards(folder: Path, stem: str, max_shards: int = 10**9):
    """Each finished <folder>/<stem>_XXXX.npz in order, as a dict of arrays (read once each)."""
    for path in sorted(p for p in Path(folder).glob(f"{stem}_*.npz") if ".tmp" not in p.name)[:max_shards]:
        with np.load(path) as z:     # NpzFile re-reads an array on every access
            yield {k: z[k] for k in z.files}


def load_shards(shard_dir: Path, max_shards: int = 10**9) -> list[dict]:
    """Shards -> list of sequences {ids int64 [T], feats fp16 [T, taps·H], lse fp32 [T], plen}."""
    seqs = []
    for d in read_shards(shard_dir, "shard", max_shards):
        off = d["offsets"]
        for i in range(len(off) - 1):
            a, b = off[i], off[i + 1]
            seqs.append(dict(ids=torch.from_numpy(d["ids"][a:b].astype(np.int64)),
                             feats=torch.from_numpy(d["feats"][a:b]),
                             lse=torch.from_numpy(d["lse"][a:b]), plen=int(d["prompt_len"][i])))
    return seqs


def select_taps(seqs: list[dict], layers) -> list[dict]:
    """Sequences whose feats hold FEATURE_LAYERS, cut to the taps `layers` (a head reading fewer
    layers, e.g. a one-tap head scored on the same shards); the same list when they match."""
    layers = [int(x) for x in layers]
    if layers == list(FEATURE_LAYERS):
        return seqs
    H = seqs[0]["feats"].shape[1] // len(FEATURE_LAYERS)
    cols = torch.cat([torch.arange(H) + list(FEATURE_LAYERS).index(x) * H for x in layers])
    return [{**s, "feats": s["feats"][:, cols]} for s in seqs]


# -- batches, rollout, losses ----------------------------------------------------------------
def make_batch(seqs: list[dict], rows: list[int]) -> dict:
    """Pad sequences: ids [B, T] int64, feats [B, T, H] fp32, lse [B, T], valid [B, T-1] bool.
    valid[b, t]: row t (input f_t, x_{t+1}) predicts a generated token x_{t+2}, teacher at t+1.
    Sequences with "argmax" (the full target's argmax at each position, int64 [T]) add argmax [B, T]."""
    chosen = [seqs[r] for r in rows]
    T = max(len(s["ids"]) for s in chosen)
    H = chosen[0]["feats"].shape[1]
    dev = chosen[0]["feats"].device     # sequences kept on a GPU (force(..., on_device=True)) batch there
    ids = torch.full((len(chosen), T), 2, dtype=torch.long, device=dev)
    feats, lse = torch.zeros(len(chosen), T, H, device=dev), torch.zeros(len(chosen), T, device=dev)
    valid = torch.zeros(len(chosen), T - 1, dtype=torch.bool, device=dev)
    for b, s in enumerate(chosen):
        n = len(s["ids"])
        ids[b, :n], feats[b, :n], lse[b, :n] = s["ids"], s["feats"].float(), s["lse"]
        valid[b, max(0, s["plen"] - 2):n - 2] = True
    out = dict(ids=ids, feats=feats, lse=lse, valid=valid)
    if all("argmax" in s for s in chosen):
        out["argmax"] = torch.zeros(len(chosen), T, dtype=torch.long, device=dev)
        for b, s in enumerate(chosen):
            out["argmax"][b, :len(s["ids"])] = s["argmax"]
    return out

