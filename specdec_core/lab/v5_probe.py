"""Why the v5 curve flattens (issue 57): heads of other shapes, or at another lr, trained side by side
on what the run already wrote — more passes over its rows, a forward pass a position, no decoding.

    python -m specdec_core.lab v5-probe --out /tmp/probe --device cuda --seconds 300 \
        --head a=specdec_core/lab/runs/v5/a@1e-4 --head deep=specdec_core/lab/runs/v5/a::::2@1e-4

A probe is also a long job: it checkpoints every `ckpt_minutes` (each head and its 8-bit moments,
`checkpoint.py`; state.json last) and the same command resumes it — on a CPU, niced, or on a lent GPU —
taking the same next step as a run that never stopped. `v5-export NAME --run <out>` makes an app
folder of a head it holds.

Every head starts from the same checkpoint (a spec as `train.trainable_head` reads it: wider or
deeper heads start computing exactly what their start computes, the new units silent), takes its own
AdamW (fresh moments, warm-up, cosine to 0.1× over `positions`) and the same rows in the same order
(the run's written rows — those it had when the probe began —, a seeded shuffle an epoch: rows of one
round are not all next to each other). The
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

from . import checkpoint
from .curve import first_guess_hits, hit_rates, paired_gain, selection_set
from .data import FEATURE_LAYERS as LAYERS, select_taps
from .force import force
from .stream import StreamConfig, new_optimizer, train_on
from .train import trainable_head
from .written import written_rows


@dataclass
class ProbeConfig:
    run: str                                   # the v5 run whose written rows (and scoring sets) are read
    out: str                                   # state.json, each head's checkpoint; resumed from
    heads: dict = field(default_factory=dict)  # name -> (trainable_head spec, peak lr); the first is the baseline
    device: str = "cuda"
    positions: int = 4_000_000                 # the cosine's span and the most positions trained
    seconds: float = 300.0                     # the loop's deadline, setup included
    every: int = 500_000                       # positions between points
    rows_per_round: int = 2048
    train_batch: int = 32
    max_tokens: int = 65536
    seed: int = 0
    ckpt_minutes: float = 10.0
    max_rounds: int | None = None              # stop (checkpointed) after this many rounds here
    micro: int | None = None                   # sequences a forward/backward within a step (a CPU's memory)
    score_sets: tuple = ("select", "yardstick")   # () : no points (a test's quick run)


def parse_head(arg: str) -> tuple[str, str, float]:
    """"NAME=SPEC[@LR]" -> (name, spec, lr); lr 1e-4 when not given."""
    if "=" not in arg:
        raise ValueError(f"--head {arg!r}: NAME=SPEC[@LR]")
    name, rest = arg.split("=", 1)
    spec, _, lr = rest.partition("@")
    try:
        return name, spec, float(lr) if lr else 1e-4
    except ValueError:
        raise ValueError(f"--head {arg!r}: the peak lr after @ is a number (e.g. 1e-3)") from None


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


def _epoch_order(n_rows: int, seed: int, epoch: int) -> np.ndarray:
    """The rows' order in one epoch: a shuffle seeded by (seed, epoch)."""
    return np.random.default_rng([seed, epoch]).permutation(n_rows)


def _settings(cfg: ProbeConfig) -> dict:
    """What a resumed probe must share with the one that wrote its checkpoint."""
    # a spec's run folder is <run> wherever the run lies (a lent GPU unpacks it elsewhere)
    return {"heads": {n: {"spec": s.replace(cfg.run.rstrip("/"), "<run>"), "lr": lr} for n, (s, lr) in cfg.heads.items()},
            "positions": cfg.positions, "seed": cfg.seed, "train_batch": cfg.train_batch, "loss": "rollout"}


def probe(cfg: ProbeConfig, log=print) -> dict:
    """The side-by-side passes (module docstring), fresh or resumed from cfg.out, until cfg.positions,
    cfg.seconds or cfg.max_rounds; returns its state (state.json)."""
    from .v3 import load_target
    from .v5 import _checkpoint, _sigterm_ends_run     # a run's checkpoint, with no rows pending
    t_start = time.monotonic()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.device == "cuda":      # as the run: TF32 products in the forcing pass
        torch.backends.cuda.matmul.allow_tf32 = True
    pair = load_target(cfg.device)
    heads = {n: trainable_head(pair, spec, cfg.device) for n, (spec, _) in cfg.heads.items()}
    streams = {n: StreamConfig(lr=lr, train_batch=cfg.train_batch, warmup=50, positions=cfg.positions, micro=cfg.micro)
               for n, (_, lr) in cfg.heads.items()}
    opts = {n: new_optimizer(h, streams[n]) for n, h in heads.items()}
    sets = {name: selection_set(pair, Path(cfg.run), cfg.device, cfg.max_tokens, name) for name in cfg.score_sets}
    rows = written_rows(Path(cfg.run))
    device_name = torch.cuda.get_device_name() if cfg.device == "cuda" else "cpu"
    settings = json.loads(json.dumps(_settings(cfg)))
    if (out / "state.json").is_file():
        state = json.loads((out / "state.json").read_text())
        if state["settings"] != settings:
            raise SystemExit(f"{out} holds a probe with other settings ({state['settings']}): pass another --out")
        for name, head in heads.items():
            checkpoint.load(out / name, head, opts[name])
        rows = rows[:state["rows"]]         # the rows it began with (the run may have written more since)
        log(f"resumed {out}: {state['positions']:,} positions, epoch {state['epoch']}, row {state['cursor']:,}")
    else:
        # "written": the answer positions of the rows it reads (a head's card), "reads": that run (v5-export's memory)
        state = {"settings": settings, "rows": len(rows), "written": int(sum(len(i) - p for i, p in rows)), "reads": cfg.run,
                 "positions": 0, "epoch": 0, "cursor": 0, "round": 0, "steps": {n: 0 for n in heads},
                 "last_point": 0, "curve": [], "devices": []}
        if sets:
            state["curve"].append(point(heads, sets, 0))
    state["devices"].append({"device": device_name, "from_positions": state["positions"], "rows_per_round": cfg.rows_per_round,
                             "micro": cfg.micro})
    log(f"{len(heads)} heads {list(heads)}, {len(rows):,} written rows; setup {time.monotonic() - t_start:.0f} s"
        + (f"; {_line(state['curve'][-1])}" if state["curve"] else ""))
    order = _epoch_order(len(rows), cfg.seed, state["epoch"])
    last_ckpt, loop_s, rounds_here, done_here = time.monotonic(), 0.0, 0, 0
    with _sigterm_ends_run() as asked_to_end:
        while state["positions"] < cfg.positions and not asked_to_end:
            left = cfg.seconds - (time.monotonic() - t_start)
            if rounds_here and left < 1.3 * loop_s / rounds_here + 20:      # one more round and a point would overrun
                break
            if cfg.max_rounds is not None and rounds_here >= cfg.max_rounds:
                break
            t0 = time.monotonic()
            chunk = [rows[i] for i in order[state["cursor"]:state["cursor"] + cfg.rows_per_round]]
            seqs = force(pair.target, chunk, LAYERS, cfg.max_tokens, on_device=cfg.device != "cpu")
            trained = 0
            for name, head in heads.items():
                # one noise stream a round, the same for every head: they differ only in shape and lr
                gen = torch.Generator(device=cfg.device).manual_seed(cfg.seed * 7919 + state["round"])
                res = train_on(head, opts[name], select_taps(seqs, head.cfg["feature_layers"]), streams[name],
                               state["steps"][name], state["positions"], gen)
                state["steps"][name] += res["steps"]
                trained = res["positions"]
            state["positions"] += trained
            state["cursor"] += len(chunk)
            state["round"] += 1
            if state["cursor"] >= len(rows):      # the next epoch: every row again, in a new order
                state["epoch"], state["cursor"] = state["epoch"] + 1, 0
                order = _epoch_order(len(rows), cfg.seed, state["epoch"])
            rounds_here, loop_s, done_here = rounds_here + 1, loop_s + time.monotonic() - t0, done_here + trained
            state["pace"] = round(done_here / max(loop_s, 1e-6))       # positions a second, forcing included
            if sets and state["positions"] - state["last_point"] >= cfg.every:
                state["last_point"] = state["positions"]
                state["curve"].append(point(heads, sets, state["positions"]))
                log(f"{state['positions']:,} positions ({state['pace']}/s): " + _line(state["curve"][-1]))
            if time.monotonic() - last_ckpt >= cfg.ckpt_minutes * 60:
                _checkpoint(out, heads, opts, state, [])
                last_ckpt = time.monotonic()
    if sets and state["curve"][-1]["positions"] != state["positions"]:
        state["curve"].append(point(heads, sets, state["positions"]))
    _checkpoint(out, heads, opts, state, [])
    log(f"stopped at {state['positions']:,} positions (epoch {state['epoch']}), {time.monotonic() - t_start:.0f} s here"
        + (f": {_line(state['curve'][-1])}" if state["curve"] else ""))
    return state


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
