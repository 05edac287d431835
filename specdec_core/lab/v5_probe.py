"""Why the v5 curve flattens (issue 57): heads of other shapes, or at another lr, trained side by side
on what the run already wrote — a second pass over its rows, a forward pass a position, no decoding.

    python -m specdec_core.lab v5-probe --out /tmp/probe --device cuda --seconds 300 \
        --head a=specdec_core/lab/runs/v5/a@1e-4 --head deep=specdec_core/lab/runs/v5/a::::2@1e-4

Every head starts from the same checkpoint (a spec as `train.trainable_head` reads it: wider or
deeper heads start computing exactly what their start computes, the new units silent), takes its own
AdamW (fresh moments, warm-up, cosine to 0.1× over `positions`) and the same rows in the same order
(the run's written rows, a seeded shuffle: rows of one round are not all next to each other). The
first head is the baseline: at every point each other head's first guess on the selection and the
yardstick is compared with it on the same positions (`curve.paired_gain`, a cluster SE by prompt). If
a wider or deeper head pulls ahead, the plateau is the head's capacity; if the same head at a higher
lr does, it is the schedule; if nothing moves, more of this data in this head will not either.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..atomic import write_atomic
from .curve import first_guess_hits, hit_rates, paired_gain, selection_set
from .data import FEATURE_LAYERS as LAYERS, select_taps
from .force import force
from .stream import StreamConfig, new_optimizer, train_on
from .train import trainable_head
from .written import written_rows


@dataclass
class ProbeConfig:
    run: str                                   # the v5 run whose written rows (and scoring sets) are read
    out: str                                   # probe.json and the heads at the end
    heads: dict = field(default_factory=dict)  # name -> (trainable_head spec, peak lr); the first is the baseline
    device: str = "cuda"
    positions: int = 4_000_000                 # the cosine's span and the most positions trained
    seconds: float = 300.0                     # the loop's deadline, setup included
    every: int = 500_000                       # positions between points
    rows_per_round: int = 2048
    train_batch: int = 32
    max_tokens: int = 65536
    seed: int = 0


def parse_head(arg: str) -> tuple[str, str, float]:
    """"NAME=SPEC[@LR]" -> (name, spec, lr); lr 1e-4 when not given."""
    if "=" not in arg:
        raise ValueError(f"--head {arg!r}: NAME=SPEC[@LR]")
    name, rest = arg.split("=", 1)
    spec, _, lr = rest.partition("@")
    return name, spec, float(lr) if lr else 1e-4


def point(heads: dict, sets: dict, positions: int) -> dict:
    """Each head's forced first guess on each scoring set (all, prose, code), and each later head's
    paired gain over the first on the same positions."""
    out = {"positions": positions}
    first = next(iter(heads))
    for name, seqs in sets.items():
        hits = {h: first_guess_hits(head, seqs) for h, head in heads.items()}
        out[name] = {h: hit_rates(hits[h], seqs) for h in heads}
        out[name]["gain"] = {h: paired_gain(hits[h], hits[first]) for h in heads if h != first}
    return out


def probe(cfg: ProbeConfig, log=print) -> dict:
    """The side-by-side pass (module docstring) until cfg.positions or cfg.seconds; returns probe.json's dict."""
    from .v3 import load_target
    from .v5 import _save
    t_start = time.monotonic()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.device == "cuda":      # as the run: TF32 products in the forcing pass
        torch.backends.cuda.matmul.allow_tf32 = True
    pair = load_target(cfg.device)
    heads = {n: trainable_head(pair, spec, cfg.device) for n, (spec, _) in cfg.heads.items()}
    streams = {n: StreamConfig(lr=lr, train_batch=cfg.train_batch, warmup=50, positions=cfg.positions)
               for n, (_, lr) in cfg.heads.items()}
    opts = {n: new_optimizer(h, streams[n]) for n, h in heads.items()}
    sets = {name: selection_set(pair, Path(cfg.run), cfg.device, cfg.max_tokens, name) for name in ("select", "yardstick")}
    rows = written_rows(Path(cfg.run))
    order = np.random.default_rng(cfg.seed).permutation(len(rows))
    result = {"run": cfg.run, "heads": {n: {"spec": s, "lr": lr} for n, (s, lr) in cfg.heads.items()},
              "device": torch.cuda.get_device_name() if cfg.device == "cuda" else "cpu",
              "rows": len(rows), "positions_written": int(sum(len(i) - p for i, p in rows)), "curve": []}
    save = lambda: write_atomic(out / "probe.json", lambda f: f.write(json.dumps(result, indent=1).encode()))
    result["curve"].append(point(heads, sets, 0))
    save()
    log(f"{len(heads)} heads {list(heads)}, {len(rows):,} written rows; setup {time.monotonic() - t_start:.0f} s; "
        + _line(result["curve"][-1]))
    positions, steps, cursor, last, loop_s, rounds = 0, {n: 0 for n in heads}, 0, 0, 0.0, 0
    while positions < cfg.positions and cursor < len(order):
        left = cfg.seconds - (time.monotonic() - t_start)
        if rounds and left < 1.3 * loop_s / rounds + 20:      # one more round and a point would overrun
            break
        t0 = time.monotonic()
        chunk = [rows[i] for i in order[cursor:cursor + cfg.rows_per_round]]
        cursor += len(chunk)
        seqs = force(pair.target, chunk, LAYERS, cfg.max_tokens, on_device=cfg.device != "cpu")
        trained = 0
        for r, (name, head) in enumerate(heads.items()):
            # one noise stream per round, the same for every head: they differ only in shape and lr
            gen = torch.Generator(device=cfg.device).manual_seed(cfg.seed * 7919 + rounds)
            res = train_on(head, opts[name], select_taps(seqs, head.cfg["feature_layers"]), streams[name],
                           steps[name], positions, gen)
            steps[name] += res["steps"]
            trained = res["positions"]
        positions += trained
        rounds, loop_s = rounds + 1, loop_s + time.monotonic() - t0
        if positions - last >= cfg.every:
            last = positions
            result["curve"].append(point(heads, sets, positions))
            result["pace"] = round(positions / loop_s)
            save()
            log(f"{positions:,} positions ({positions / loop_s:.0f}/s): " + _line(result["curve"][-1]))
    if result["curve"][-1]["positions"] != positions:
        result["curve"].append(point(heads, sets, positions))
    result["pace"] = round(positions / max(loop_s, 1e-6))
    save()
    for name, head in heads.items():
        _save(head, out / name, name, {"positions": positions, "written": 0}, streams[name], result["device"])
    log(f"stopped at {positions:,} positions, {time.monotonic() - t_start:.0f} s: " + _line(result["curve"][-1]))
    return result


def _line(p: dict) -> str:
    """A point as one log line: each head's selection and yardstick share, the gains over the first."""
    parts = []
    for h in p["select"]:
        if h == "gain":
            continue
        g = p["select"]["gain"].get(h), p["yardstick"]["gain"].get(h)
        parts.append(f"{h} {p['select'][h]['all']:.3f}/{p['yardstick'][h]['all']:.3f}"
                     + (f" (gain {g[0]['gain']:+.4f}±{g[0]['se']:.4f} / {g[1]['gain']:+.4f}±{g[1]['se']:.4f})" if g[0] else ""))
    return "selection/yardstick " + ", ".join(parts)
