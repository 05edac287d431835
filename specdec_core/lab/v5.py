"""Draft v5 (issue 57): the target *writes* its answers to tens of thousands of user turns in
batches, and the heads train on each batch as soon as it is written — on-distribution text (the
target's own phrasing, as the decoder meets it), seen once; large batches on a lent GPU, small ones
on a CPU, one resumable run across both.

    python -m specdec_core.lab v5-asks -n 60000 --file specdec_core/lab/runs/v5/asks.npz      # once
    python -m specdec_core.lab v5-run [--device cuda --write-batch 2048 --seconds 500]         # resumes
    python -m specdec_core.lab v5-score                                                        # CPU

One round: the next `write_batch` asks of the run's seeded order are answered by the target (a bf16
copy on a GPU; greedy and the bench's sampling, T 0.7 / top-p 0.9, by turns; `capture.generate`);
the fp32 target teacher-forces what it wrote (`force.force`: the label is its full distribution) and
every head (`HEADS`) takes one pass over it (`stream.train_on`). A head's agreement with the target on
a round it has not yet trained on is a held-out measure: the log's learning curve. A checkpoint every
`ckpt_minutes` (each head and its 8-bit moments, `checkpoint.py`; the rows written since the last one
as a `written_NNN.npz` shard of token ids; state.json last) lets any machine go on where another
stopped. Heads at the curve's milestones go to <out>/milestones (kept where the run ran) for v5-score.
With `replay` R > 0, each round also reads R× its new positions again from what the run wrote, oldest
first (`written.replay_rows`; forced by the writer, a forward pass a position): more training an hour
than the target writes. The lr's cosine follows the positions *written*; the peak lr may change on resume.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..atomic import write_atomic
from . import checkpoint
from .capture import generate, make_writer
from .curve import curve_point, selection_set
from .data import FEATURE_LAYERS as LAYERS, load_ids, save_ids, select_taps
from .force import force
from .stream import StreamConfig, new_optimizer, train_on
from .train import load_start, trainable_head
from .written import replay_rows, save_written

MILESTONES = (100_000, 250_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000)
SAMPLERS = ((0.0, 1.0), (0.7, 0.9))          # (temperature, top-p): greedy, the bench's sampling
# a: the shipped head as it is (what would ship). b (three taps, 16k vocabulary), c (twice the MLP
# units) and d (a second decoder layer) trained beside it for a while and left no better than it
# (docs/lab/draft-v5.md; their curves stay in state.json). A fresh run starts from the shipped head.
HEADS = {"a": "specdec_core/data/draft"}


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
    budget: int = 10_000_000                 # positions the cosine schedule spans (0: what this pace reaches by the deadline)
    ckpt_minutes: float = 10.0
    max_rounds: int | None = None            # stop (checkpointed) after this many rounds here
    score_sets: tuple = ("select", "yardstick")   # the learning curve's sets (() : none, a test's quick run)
    stream: StreamConfig = field(default_factory=lambda: StreamConfig(lr=3e-4, train_batch=8, warmup=50))
    seed: int = 0
    writer: str = "auto"                     # the CPU's writer: fp32, bf16 (matrices) or auto (bf16 where the CPU has bf16 math)
    replay: float = 0.0                      # written positions read again a round, per position written (written.py)


def save_asks(asks: list[dict], ids: list[list[int]], path: Path) -> None:
    """Asks and their chat-templated prompt ids -> an npz (data.save_ids, + tasks) and the asks
    themselves in <path>.json.gz."""
    save_ids(path, ids, task=np.array([a["task"] for a in asks]))
    # The texts stay beside it (not needed where the asks are answered)
    path.with_suffix(".json.gz").write_bytes(gzip.compress(json.dumps(asks).encode()))


def load_asks(path: str) -> tuple[list[np.ndarray], list[str]]:
    prompts, arrays = load_ids(Path(path))
    return prompts, list(arrays["task"])


def _save(head, folder: Path, name: str, state: dict, stream: StreamConfig, device: str) -> None:
    """A head folder the app loads (`distilled:<folder>`), its card saying where it stands."""
    from ..drafters.feature_head import save_head
    save_head(head, folder, {"version": 5, "feature_layers": head.cfg["feature_layers"], "loss": stream.loss, "run": "v5",
                             "head": name, "positions": state["positions"], "written": state["written"], "device": device})


def _ask_order(prompts: list[np.ndarray], max_prompt: int, seed: int) -> np.ndarray:
    """Every usable ask (prompt ≤ max_prompt tokens) in one seeded order: a round takes the next
    ones from the run's cursor, so any batch size on any machine continues the same stream."""
    order = np.random.default_rng(seed).permutation(len(prompts))
    return order[[len(prompts[i]) <= max_prompt for i in order]]


def _settings(cfg: V5Config, heads: dict) -> dict:
    """What a resumed run must share with the one that wrote the checkpoint — not the batch sizes, the
    device or where the start heads lie; the peak lr is kept but may change (`devices` say from where)."""
    digest = hashlib.md5(Path(cfg.asks).read_bytes()).hexdigest()
    return {"asks": digest, "seed": cfg.seed, "max_new": cfg.max_new, "max_prompt": cfg.max_prompt,
            "budget": cfg.budget, **{k: getattr(cfg.stream, k) for k in ("loss", "lr", "warmup", "noise", "weight_decay")},
            "heads": {n: {"taps": h.cfg["feature_layers"], "vocab": len(h.vocab_ids), "width": h.cfg["intermediate_size"],
                          **({"depth": len(h.layers())} if len(h.layers()) > 1 else {})}
                      for n, h in heads.items()}}


def _resumable(saved: dict, settings: dict, width: int) -> bool:
    """A checkpoint's settings allow this run: all but the heads equal, and a head in both the same
    head (taps, vocabulary, MLP width; a checkpoint from before widths were kept has the target's).
    Heads may join or leave a run."""
    rest = lambda d: {k: v for k, v in d.items() if k not in ("heads", "lr")}
    if rest(saved) != rest(settings):
        return False
    return all({"width": width, **saved["heads"][n]} == h for n, h in settings["heads"].items() if n in saved["heads"])


def _train_heads(heads: dict, opts: dict, seqs: list[dict], stream: StreamConfig, state: dict, device: str, seed: int) -> dict:
    """One pass of every head over seqs (stream.train_on; each head's noise drawn from `seed`), the
    lr where the run stands (state's positions and each head's steps, which advance). {head: train_on's stats}."""
    out = {}
    for name, head in heads.items():
        gen = torch.Generator(device=device).manual_seed(seed)
        out[name] = train_on(head, opts[name], select_taps(seqs, head.cfg["feature_layers"]), stream,
                             state["steps"][name], state["positions"], gen)
        state["steps"][name] += out[name]["steps"]
    return out


@contextmanager
def _sigterm_ends_run():
    """Yields a list that SIGTERM appends to (the run ends after its round); the process's own
    handler is back afterwards, however the run ends. Off the main thread (no signals there): a list never appended to."""
    asked: list = []
    if threading.current_thread() is not threading.main_thread():
        yield asked
        return
    before = signal.signal(signal.SIGTERM, lambda *_: asked.append(True))
    try:
        yield asked
    finally:
        signal.signal(signal.SIGTERM, before)


def _checkpoint(out: Path, heads: dict, opts: dict, state: dict, pending: list[dict]) -> list[dict]:
    """Each head and its moments (checkpoint.save), the rows written since the last one as a new
    shard, then state.json (written last: a run killed mid-save resumes from the previous one)."""
    for name, head in heads.items():
        checkpoint.save(out / name, head, opts[name], {"head": name, "positions": state["positions"],
                                                        "settings": {"layers": head.cfg["feature_layers"]}}, [])
    if pending:
        save_written(pending, out / f"written_{state['shards']:03d}.npz")
        state["shards"] += 1
    write_atomic(out / "state.json", lambda f: f.write(json.dumps(state, indent=1).encode()))
    return []


def run(cfg: V5Config, log=print) -> dict:
    """The write-and-train loop, fresh or resumed from cfg.out, until cfg.seconds; returns its state."""
    from .v3 import load_target
    t_start = time.monotonic()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.device == "cuda":      # TF32 products in the forcing pass: labels within ~1e-3 of fp32
        torch.backends.cuda.matmul.allow_tf32 = True
    pair = load_target(cfg.device)
    try:
        writer, writer_name = make_writer(pair.target, cfg.device, cfg.writer)
    except ValueError as e:     # --writer bf16 where the CPU cannot: a message, not a traceback
        raise SystemExit(str(e)) from None
    # A CPU writer keeps the labels as it writes (no forcing pass); a GPU's bf16 copy's rows are forced.
    own_labels = cfg.device != "cuda"
    prompts, _ = load_asks(cfg.asks)
    order = _ask_order(prompts, cfg.max_prompt, cfg.seed)
    # A resumed run's heads come from its own checkpoint (their vocabulary and taps), wherever it started.
    heads = {name: trainable_head(pair, str(out / name) if (out / name / "state.json").is_file() else spec, cfg.device)
             for name, spec in cfg.heads.items()}
    opts = {name: new_optimizer(h, cfg.stream) for name, h in heads.items()}
    settings, stream = _settings(cfg, heads), cfg.stream
    if (out / "state.json").is_file():
        state = json.loads((out / "state.json").read_text())
        if not _resumable(state["settings"], json.loads(json.dumps(settings)), pair.target.config.intermediate_size):
            raise SystemExit(f"{out} holds a run with other settings ({state['settings']}): pass another --out")
        joining = [n for n in heads if n not in state["settings"]["heads"]]
        for name, head in heads.items():
            if name not in joining:
                checkpoint.load(out / name, head, opts[name])
        for name in joining:
            # A head joining a run starts where the run's first head stands (its spec's vocabulary, taps
            # and width around it), with fresh moments: from here on the two differ only in what the spec changed.
            first = heads[next(n for n in heads if n not in joining)]
            load_start(heads[name], first.state_dict())
            state["steps"][name] = 0
            state.setdefault("joined", {})[name] = state["positions"]
        left = [n for n in state["settings"]["heads"] if n not in heads]
        state["settings"] = settings
        log(f"resumed {out}: {state['positions']:,} positions, {state['cursor']:,} asks answered"
            + (f"; {', '.join(joining)} joined" if joining else "") + (f"; {', '.join(left)} left" if left else ""))
    else:
        state = {"settings": settings, "cursor": 0, "round": 0, "positions": 0, "written": 0, "write_s": 0.0,
                 "train_s": 0.0, "shards": 0, "steps": {n: 0 for n in heads}, "milestones": [], "rounds": [],
                 "devices": []}
    sets = {name: selection_set(pair, out, cfg.device, cfg.max_tokens, name) for name in cfg.score_sets}
    if not state["rounds"] and "select" in sets:       # the curve's first point: the start heads
        state["curve"] = [curve_point(heads, sets, 0)]
        log("selection, teacher-forced, at 0: " + ", ".join(f"{n} {state['curve'][0][n]['all']:.3f}" for n in heads))
    new = [n for n, at in state.get("joined", {}).items() if at == state["positions"] and n in heads]
    if new and state.get("curve") and state["curve"][-1]["positions"] == state["positions"]:
        # a joining head's first point, beside the others' at the same positions
        point = curve_point({n: heads[n] for n in new}, sets, state["positions"])
        last = state["curve"][-1]
        for key, value in point.items():
            if key in sets:             # another scoring set's numbers: {head: ...}
                last.setdefault(key, {}).update(value)
            elif key != "positions":    # a head's selection numbers
                last[key] = value
        log("joined at " + f"{state['positions']:,}: " + ", ".join(f"{n} {state['curve'][-1][n]['all']:.3f}" for n in new))
    device_name = torch.cuda.get_device_name() if cfg.device == "cuda" else "cpu"
    state["devices"].append({"device": device_name, "from_positions": state["positions"], "write_batch": cfg.write_batch,
                             "train_batch": stream.train_batch, "writer": writer_name, "lr": stream.lr, "replay": cfg.replay})
    log(f"{len(order):,} asks (prompt ≤ {cfg.max_prompt} tokens), {len(order) - state['cursor']:,} left; heads "
        f"{list(heads)}; writer {writer_name}; setup {time.monotonic() - t_start:.0f} s")
    pending, last_ckpt, rounds_here, loop_s = [], time.monotonic(), 0, 0.0
    # SIGTERM (a session ending, `kill`) ends the run after the round in progress, checkpointed.
    with _sigterm_ends_run() as asked_to_end:
        while state["cursor"] < len(order):
            left = cfg.seconds - (time.monotonic() - t_start)
            if asked_to_end:
                log("SIGTERM: ending after the round in progress")
                break
            if left <= 0 or (rounds_here and left < 1.3 * loop_s / rounds_here):     # one more round would overrun
                break
            if cfg.max_rounds is not None and rounds_here >= cfg.max_rounds:
                break
            t0 = time.monotonic()
            batch = order[state["cursor"]: state["cursor"] + cfg.write_batch]
            batch = batch[np.argsort([len(prompts[i]) for i in batch], kind="stable")]     # by length, as every round so far
            temperature, top_p = SAMPLERS[state["round"] % len(SAMPLERS)]
            rows = generate(writer, [prompts[i].tolist() for i in batch], cfg.max_new, temperature=temperature,
                            top_p=top_p, seed=cfg.seed * 1_000_003 + state["round"], capture=own_labels,
                            layers=LAYERS, chunk=8 if cfg.device == "cpu" else 128)   # a GPU prefills more at a time
            for row, i in zip(rows, batch):
                row["ask"] = int(i)
            t1 = time.monotonic()
            seqs = rows if own_labels else force(pair.target, [(row["ids"].numpy(), row["plen"]) for row in rows], LAYERS,
                                             cfg.max_tokens, on_device=True)
            n_new = sum(len(row["ids"]) - row["plen"] for row in rows)
            if cfg.budget:
                stream.positions = cfg.budget
            else:    # the positions this pace reaches by the deadline (re-estimated each round)
                pace = (state["positions"] + n_new) / max(1e-6, loop_s + (t1 - t0))
                stream.positions = int(state["positions"] + max(n_new, pace * max(0.0, left - (t1 - t0))))
            res = _train_heads(heads, opts, seqs, stream, state, cfg.device, cfg.seed * 7919 + state["round"])
            stats = {n: {"agree": round(r["agree"], 4), "loss": round(r["loss"], 4)} for n, r in res.items()}
            trained = next(iter(res.values()))["positions"]
            pending += [{k: row[k] for k in ("ids", "plen", "greedy", "ask")} for row in rows]   # ids only: not the labels
            state["positions"] += trained
            again_n = 0
            if cfg.replay > 0:     # written rows again, oldest first: a forward pass a position, not a decode
                old, state["replay_cursor"] = replay_rows(out, pending, state.get("replay_cursor", 0), int(cfg.replay * n_new))
                again = force(writer if own_labels else pair.target, old, LAYERS, cfg.max_tokens, on_device=not own_labels)
                res = _train_heads(heads, opts, again, stream, state, cfg.device, cfg.seed * 7919 + state["round"] + 1_000_003)
                for name, r in res.items():
                    stats[name]["again"] = round(r["agree"], 4)
                again_n = next(iter(res.values()))["positions"]
                state["replayed"] = state.get("replayed", 0) + again_n
            t2 = time.monotonic()
            state.update(cursor=state["cursor"] + len(batch), round=state["round"] + 1, written=state["written"] + n_new,
                         write_s=state["write_s"] + t1 - t0, train_s=state["train_s"] + t2 - t1)
            state["rounds"].append({"round": state["round"] - 1, "greedy": temperature == 0, "answers": len(rows), "written": n_new,
                                    "positions": state["positions"], "device": device_name, "writer": writer_name, **stats})
            rounds_here, loop_s = rounds_here + 1, loop_s + t2 - t0
            # The learning curve: the selection answers, teacher-forced (not counted in the loop's pace)
            if "select" in sets:
                state.setdefault("curve", []).append(curve_point(heads, sets, state["positions"]))
                if state.get("replayed"):
                    state["curve"][-1]["replayed"] = state["replayed"]
            log(f"round {state['round'] - 1}: {len(rows)} answers, {n_new} tokens written ({n_new / (t1 - t0):.0f}/s), positions "
                f"{state['positions']:,} (+ {state.get('replayed', 0):,} replayed; trained {(trained + again_n) / max(1e-6, t2 - t1):.0f}/s); "
                + ", ".join(f"{n} agree {s['agree']:.3f}" + (f", selection {state['curve'][-1][n]['all']:.3f}" if "select" in sets else "")
                            for n, s in stats.items()))
            for m in MILESTONES:
                if m <= state["positions"] and m not in state["milestones"]:
                    state["milestones"].append(m)
                    for name, head in heads.items():
                        _save(head, out / "milestones" / f"{name}-{m}", name, state, stream, device_name)
            if time.monotonic() - last_ckpt >= cfg.ckpt_minutes * 60:
                pending, last_ckpt = _checkpoint(out, heads, opts, state, pending), time.monotonic()
    _checkpoint(out, heads, opts, state, pending)
    for name, head in heads.items():
        _save(head, out / "milestones" / f"{name}-last", name, state, stream, device_name)
    log(f"stopped: {state['written']:,} tokens written in {state['write_s']:.0f} s, {state['positions']:,} positions "
        f"trained in {state['train_s']:.0f} s (all sessions), {state['round']} rounds; {time.monotonic() - t_start:.0f} s here")
    return state
