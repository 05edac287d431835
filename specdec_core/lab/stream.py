"""Training a feature head on a stream of freshly captured sequences (issue 38): each captured
sequence (capture.generate) is trained on once, in length-sorted optimiser steps, then dropped.

    cfg = StreamConfig(loss="rollout", lr=1e-3, weight_decay=0.05, noise=0.05)
    opt = new_optimizer(head, cfg)
    stats = train_on(head, opt, seqs, cfg, step0, positions0, generator)   # one pass over seqs

Regularisation: AdamW weight decay on the matrices (not norms or the output bias), and feature
noise — Gaussian, `noise` × each tap's RMS, added to the head's *input* taps only (the teacher
reads the clean final state), as EAGLE does to make the head robust to its own drafted features.
"Agree" compares with the full target's argmax (captured), not the truncated teacher's.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from .data import make_batch
from .losses import NEEDS_ALPHA, STEPS_OF, loss_fn, rollout, step_terms, teacher_logp


@dataclass
class StreamConfig:
    loss: str = "rollout"
    K: int | None = None               # draft steps of the loss (default: the loss's)
    lr: float = 1e-3
    weight_decay: float = 0.05
    noise: float = 0.05                # feature noise, relative to each tap's RMS
    warmup: int = 100                  # optimiser steps of linear warm-up
    train_batch: int = 8               # sequences per optimiser step
    positions: int = 5_000_000         # the budget: cosine decay of lr to 0.1× over it
    micro: int | None = None           # sequences a forward/backward within a step (None: all of them)

    @property
    def steps_k(self) -> int:
        return self.K or STEPS_OF.get(self.loss, 1)


def new_optimizer(head, cfg: StreamConfig) -> torch.optim.AdamW:
    """AdamW; decay on 2-D weights only (norm gains and the output bias are not shrunk)."""
    params = [(n, p) for n, p in head.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
              {"params": [p for n, p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr)


def lr_at(cfg: StreamConfig, step: int, positions: int) -> float:
    """Warm-up by optimiser steps, then cosine by positions trained (the stream has no epochs)."""
    done = min(1.0, positions / max(1, cfg.positions))
    return cfg.lr * min(1.0, (step + 1) / cfg.warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * done)))


def to_device(batch: dict, device) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def noisy(feats: torch.Tensor, n_taps: int, noise: float, gen: torch.Generator) -> torch.Tensor:
    """feats [B, T, n_taps·H] + noise · rms(tap) · N(0, 1), drawn on feats' device from gen."""
    if noise <= 0:
        return feats
    B, T, D = feats.shape
    taps = feats.view(B, T, n_taps, D // n_taps)
    rms = taps.pow(2).mean(-1, keepdim=True).sqrt()
    eps = torch.randn(taps.shape, generator=gen, device=feats.device, dtype=feats.dtype)
    return (taps + noise * rms * eps).view(B, T, D)


# The losses that are a mean over the valid rows: a step over micro-batches, each weighted by its
# share of the rows, is then the whole batch's step (the chain losses average over other rows).
PER_ROW = ("fkl", "tv", "rollout")


def _objective(head, batch: dict, cfg: StreamConfig, gen: torch.Generator) -> tuple[torch.Tensor, int]:
    """The loss on one (micro-)batch and how many of its first guesses match the full target's argmax."""
    logp = teacher_logp(head, batch)                        # clean teacher [n_valid, N]
    n_taps = len(head.cfg["feature_layers"])
    feats = noisy(batch["feats"], n_taps, cfg.noise, gen)
    full = batch["argmax"][:, 1:][batch["valid"]]
    p = logp.exp()                                          # one teacher for every rollout step
    terms = [step_terms(head, g, logp, batch["valid"], full, p=p, alpha=cfg.loss in NEEDS_ALPHA)
             for g in rollout(head, feats, batch["ids"], cfg.steps_k)]
    return loss_fn(cfg.loss, terms, batch["valid"]), int(terms[0]["match"][batch["valid"]].sum())


def train_step(head, opt, batch: dict | list[dict], cfg: StreamConfig, lr: float, gen: torch.Generator) -> dict:
    """One optimiser step on a batch (make_batch's dict with argmax, on the head's device), or on a
    list of micro-batches that make one: each one's loss weighted by its share of the valid rows, the
    gradients summed — the whole batch's step, with one micro-batch's peak memory.
    Returns {loss, agree (step 1, vs the full target's argmax), positions (valid rows)}."""
    parts = batch if isinstance(batch, list) else [batch]
    if len(parts) > 1 and cfg.loss not in PER_ROW:
        raise ValueError(f"micro-batches need a loss averaged over the valid rows ({PER_ROW}), not {cfg.loss!r}")
    head.train()
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad()
    n_all = sum(int(b["valid"].sum()) for b in parts)
    loss, matches = 0.0, 0
    for b in parts:
        n = int(b["valid"].sum())
        if n == 0:
            continue
        obj, match = _objective(head, b, cfg, gen)
        (obj * (n / n_all)).backward()             # one part: n / n_all is 1.0, the step unchanged
        loss, matches = loss + float(obj.detach()) * n, matches + match
    torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
    opt.step()
    return {"loss": loss / max(1, n_all), "agree": matches / max(1, n_all), "positions": n_all}


def train_on(head, opt, seqs: list[dict], cfg: StreamConfig, step: int, positions: int,
             gen: torch.Generator) -> dict:
    """One pass over seqs in length-sorted batches of cfg.train_batch (little padding).
    Returns {steps, positions, loss, agree (position-weighted means), cpu_s, wall_s}."""
    device = next(head.parameters()).device
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]["ids"]))
    t0, c0 = time.monotonic(), time.process_time()
    out = {"steps": 0, "positions": 0, "loss": 0.0, "agree": 0.0}
    for b in range(0, len(order), cfg.train_batch):
        rows = order[b:b + cfg.train_batch]
        size = cfg.micro or len(rows)       # micro-batches: a CPU's memory holds a GPU's step
        batch = [to_device(make_batch(seqs, rows[i:i + size]), device) for i in range(0, len(rows), size)]
        if not any(bool(x["valid"].any()) for x in batch):
            continue
        r = train_step(head, opt, batch, cfg, lr_at(cfg, step + out["steps"], positions + out["positions"]), gen)
        out["steps"] += 1
        out["positions"] += r["positions"]
        out["loss"] += r["loss"] * r["positions"]
        out["agree"] += r["agree"] * r["positions"]
    n = max(1, out["positions"])
    out["loss"], out["agree"] = out["loss"] / n, out["agree"] / n
    out["wall_s"], out["cpu_s"] = time.monotonic() - t0, time.process_time() - c0
    return out
