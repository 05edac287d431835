"""Draft v5 (issue 57): the target *writes* its answers to tens of thousands of user turns in large
batches on a lent GPU, and the head trains on each batch as soon as it is written — on-distribution
text (the target's own phrasing, as the decoder meets it) at GPU speed, seen once.

    python -m specdec_core.lab v5-asks --n 60000 --file .gpu/v5-asks.npz                  # here, CPU
    python -m specdec_core.lab v5-run --asks .gpu/v5-asks.npz --out DIR --device cuda     # the lease
    python -m specdec_core.lab v5-score --out DIR                                         # here, CPU

One round: the next `write_batch` asks (length-bucketed) are answered by a bf16 copy of the target
(greedy and the bench's sampling, T 0.7 / top-p 0.9, alternately; `capture.generate`); the fp32
target then teacher-forces what it wrote (`force.force`: labels are its full distribution) and every
head (`HEADS`) takes one pass over it (`stream.train_on`). Before a head trains on a round it has never
seen, its agreement with the target there is a held-out measure: the run logs it as its learning
curve. The cosine schedule runs over the positions the run projects it will reach by its deadline.
Everything written is kept (`written_*.npz`: token ids, prompt lengths, sampler) for the phrase
memory and for later runs on CPU; heads at the curve's milestones are saved for `v5-score`.
"""
from __future__ import annotations

import copy
import gzip
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .capture import generate
from .data import select_taps
from .force import force
from .stream import StreamConfig, new_optimizer, train_on

LAYERS = (10, 20, -1)                       # the taps forced; each head reads its own subset
MILESTONES = (500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000)
SAMPLERS = ((0.0, 1.0), (0.7, 0.9))          # (temperature, top-p): greedy, the bench's sampling
# a: the shipped head as it is; b: the same start with three taps and v4's measured 16k vocabulary
HEADS = {"a": "specdec_core/data/draft", "b": "specdec_core/data/draft:specdec_core/lab/runs/v4/vocab16k.npy:10/20/-1"}


@dataclass
class V5Config:
    asks: str
    out: str
    device: str = "cuda"
    heads: dict = field(default_factory=lambda: dict(HEADS))
    write_batch: int = 2048
    max_new: int = 320
    max_prompt: int = 384
    max_tokens: int = 65536                  # padded tokens per forcing pass
    seconds: float = 480.0                   # the loop's deadline, from the start of run()
    stream: StreamConfig = field(default_factory=lambda: StreamConfig(lr=5e-4, train_batch=32, warmup=50))
    seed: int = 0


def save_asks(asks: list[dict], ids: list[list[int]], path: Path) -> None:
    """Asks and their chat-templated prompt ids -> an npz (flat uint16 ids + offsets; tasks) and
    the asks themselves in <path>.json.gz."""
    flat = np.concatenate([np.asarray(x, np.uint16) for x in ids])
    off = np.cumsum([0] + [len(x) for x in ids]).astype(np.int64)
    np.savez_compressed(path, ids=flat, offsets=off, task=np.array([a["task"] for a in asks]))
    # The texts stay beside it (not needed where the asks are answered)
    path.with_suffix(".json.gz").write_bytes(gzip.compress(json.dumps(asks).encode()))


def load_asks(path: str) -> tuple[list[np.ndarray], list[str]]:
    z = np.load(path)
    off = z["offsets"]
    return [z["ids"][off[i]:off[i + 1]].astype(np.int64) for i in range(len(off) - 1)], list(z["task"])


def trainable_head(pair, spec: str, device):
    """A head to train from spec "FOLDER[:VOCAB.npy[:TAPS]]": FOLDER a head folder (weights.safetensors +
    config.json) or a run's checkpoint (head.safetensors + state.json); VOCAB.npy another vocabulary
    (target ids; the output bias carried over by token id, the lowest for new tokens); TAPS the
    hidden states it reads, '/'-separated (e.g. 10/20/-1; new taps start as a pass-through of the
    final state, as `init_from_target` makes them). fp32, on device."""
    from safetensors.torch import load as st_load
    from .train import new_head
    folder, vocab_file, taps = (spec.split(":") + [None, None])[:3]
    folder = Path(folder)
    if (folder / "weights.safetensors").is_file():
        st = st_load((folder / "weights.safetensors").read_bytes())
        layers = json.loads((folder / "config.json").read_text())["cfg"].get("feature_layers", [-1])
    else:
        st = st_load((folder / "head.safetensors").read_bytes())
        layers = json.loads((folder / "state.json").read_text())["settings"]["layers"]
    layers = [int(x) for x in taps.split("/")] if taps else list(layers)
    vocab = torch.from_numpy(np.load(vocab_file).astype(np.int64)) if vocab_file else st["vocab_ids"]
    head = new_head(pair.target, vocab.to(pair.target.get_input_embeddings().weight.device), 29, layers)
    mine = head.state_dict()       # what fits this head's shapes (new taps keep their pass-through start)
    head.load_state_dict({k: v.float() for k, v in st.items() if k in mine and k not in ("vocab_ids", "bias")
                          and mine[k].shape == v.shape}, strict=False)
    old = dict(zip(st["vocab_ids"].tolist(), st["bias"].float().tolist()))
    with torch.no_grad():
        head.bias.copy_(torch.tensor([old.get(int(t), min(old.values())) for t in vocab.tolist()]))
    return head.to(device)


def _bucketed(n_asks: int, lengths: np.ndarray, batch: int, rng) -> list[np.ndarray]:
    """Batches of ask indices in a seeded order, sorted by prompt length within windows of 8 batches
    (little left padding, yet every batch a mix of tasks)."""
    order, out = rng.permutation(n_asks), []
    for w in range(0, n_asks, 8 * batch):
        win = order[w:w + 8 * batch]
        win = win[np.argsort(lengths[win], kind="stable")]
        out += [win[b:b + batch] for b in range(0, len(win), batch)]
    return [out[i] for i in rng.permutation(len(out))]


def save_written(rows: list[dict], path: Path) -> None:
    ids = np.concatenate([r["ids"].numpy().astype(np.uint16) for r in rows])
    off = np.cumsum([0] + [len(r["ids"]) for r in rows]).astype(np.int64)
    np.savez_compressed(path, ids=ids, offsets=off, plen=np.array([r["plen"] for r in rows], np.int32),
                        greedy=np.array([r["greedy"] for r in rows]), ask=np.array([r["ask"] for r in rows], np.int32))


def _save(head, folder: Path, name: str, rec: dict, stream: StreamConfig) -> None:
    """A head folder the app loads (`distilled:<folder>`), its card saying where it stands."""
    from ..drafters.feature_head import save_head
    save_head(head, folder, {"version": 5, "feature_layers": head.cfg["feature_layers"], "loss": stream.loss, "run": "v5",
                             "head": name, "positions": rec["positions"], "written": rec["written"], "device": rec["device"]})


def run(cfg: V5Config, log=print) -> dict:
    """The write-and-train loop until cfg.seconds; returns the run's record (also out/run.json)."""
    from .v3 import load_target
    t_start = time.monotonic()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.device == "cuda":      # TF32 products in the forcing pass: labels within ~1e-3 of fp32
        torch.backends.cuda.matmul.allow_tf32 = True
    pair = load_target(cfg.device)
    # A bf16 copy writes on a GPU (half the KV cache to copy each step); the CPU writes with the target itself.
    writer = copy.deepcopy(pair.target).to(torch.bfloat16).eval() if cfg.device == "cuda" else pair.target
    prompts, tasks = load_asks(cfg.asks)
    keep = [i for i, p in enumerate(prompts) if len(p) <= cfg.max_prompt]
    lengths = np.array([len(p) for p in prompts])
    rng = np.random.default_rng(cfg.seed)
    batches = [b[np.isin(b, keep)] for b in _bucketed(len(prompts), lengths, cfg.write_batch, rng)]
    heads = {name: trainable_head(pair, spec, cfg.device) for name, spec in cfg.heads.items()}
    opts = {name: new_optimizer(h, cfg.stream) for name, h in heads.items()}
    rec = {"config": {k: (v if not isinstance(v, StreamConfig) else v.__dict__) for k, v in cfg.__dict__.items()},
           "rounds": [], "written": 0, "positions": 0, "write_s": 0.0, "train_s": 0.0, "milestones": [],
           "device": torch.cuda.get_device_name() if cfg.device == "cuda" else "cpu", "steps": {n: 0 for n in heads}}
    written, shard, stream = [], 0, cfg.stream
    log(f"{len(keep)} asks of {len(prompts)} (prompt ≤ {cfg.max_prompt} tokens), heads {list(heads)}, "
        f"setup {time.monotonic() - t_start:.0f} s")
    for r, batch in enumerate(batches):
        left = cfg.seconds - (time.monotonic() - t_start)
        if r and left < 1.3 * (rec["write_s"] + rec["train_s"]) / r:      # one more round would overrun
            break
        t0 = time.monotonic()
        temperature, top_p = SAMPLERS[r % len(SAMPLERS)]
        rows = generate(writer, [prompts[i].tolist() for i in batch], cfg.max_new, temperature=temperature,
                        top_p=top_p, seed=cfg.seed * 1_000_003 + r, capture=False)
        for row, i in zip(rows, batch):
            row["ask"] = int(i)
        t1 = time.monotonic()
        seqs = force(pair.target, [(row["ids"].numpy(), row["plen"]) for row in rows], LAYERS, cfg.max_tokens)
        n_new = sum(len(row["ids"]) - row["plen"] for row in rows)
        # The schedule's length: the positions this pace reaches by the deadline (re-estimated each round).
        pace = (rec["positions"] + n_new) / max(1e-6, rec["write_s"] + rec["train_s"] + (t1 - t0))
        stream.positions = int(max(rec["positions"] + n_new, rec["positions"] + pace * max(0.0, left - (t1 - t0))))
        stats = {}
        for name, head in heads.items():
            gen = torch.Generator(device=cfg.device).manual_seed(cfg.seed * 7919 + r)
            res = train_on(head, opts[name], select_taps(seqs, head.cfg["feature_layers"]), stream,
                           rec["steps"][name], rec["positions"], gen)
            rec["steps"][name] += res["steps"]
            stats[name] = {"agree": round(res["agree"], 4), "loss": round(res["loss"], 4)}
            trained = res["positions"]
        written += rows
        rec["written"] += n_new
        rec["positions"] += trained
        rec["write_s"] += t1 - t0
        rec["train_s"] += time.monotonic() - t1
        rec["rounds"].append({"round": r, "greedy": temperature == 0, "answers": len(rows), "written": n_new,
                              "positions": rec["positions"], "t": round(time.monotonic() - t_start, 1), **stats})
        log(f"round {r}: {len(rows)} answers, {n_new} tokens written ({n_new / (t1 - t0):.0f}/s), positions "
            f"{rec['positions']:,} (trained {trained / max(1e-6, time.monotonic() - t1):.0f}/s); "
            + ", ".join(f"{n} agree {s['agree']:.3f}" for n, s in stats.items()) + f"; schedule {stream.positions:,}")
        for m in MILESTONES:
            if m <= rec["positions"] and m not in rec["milestones"]:
                rec["milestones"].append(m)
                for name, head in heads.items():
                    _save(head, out / f"{name}-{m}", name, rec, stream)
        if sum(len(w["ids"]) for w in written) > 6_000_000:        # a shard per ~12 MB of ids
            save_written(written, out / f"written_{shard}.npz")
            written, shard = [], shard + 1
    if written:
        save_written(written, out / f"written_{shard}.npz")
    for name, head in heads.items():
        _save(head, out / f"{name}-final", name, rec, stream)
    rec["total_s"] = round(time.monotonic() - t_start, 1)
    (out / "run.json").write_text(json.dumps(rec, indent=1))
    log(f"done: {rec['written']:,} tokens written in {rec['write_s']:.0f} s, {rec['positions']:,} positions trained in "
        f"{rec['train_s']:.0f} s, {len(rec['rounds'])} rounds, {rec['total_s']:.0f} s in all")
    return rec
