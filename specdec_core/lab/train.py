"""Training a feature-head draft by self-distillation: new_head, trainable_head (a start from a
spec), train (checkpoints, resumes), evaluate (offline, on teacher-forced features). Data: data.py
and corpus.py; losses and the training-time rollout: losses.py; the head itself:
drafters/feature_head.py; commands: cli.py.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from ..atomic import write_atomic
from .data import SEED, make_batch
from .losses import (LOSSES, STEPS_OF, _along_chain, chain_expected_length, loss_fn, rollout, step_terms,
                     teacher_logp, tv_loss)

__all__ = ["train", "evaluate", "new_head", "load_start", "trainable_head", "rollout", "step_terms", "loss_fn", "tv_loss",
           "chain_expected_length", "LOSSES"]


# -- training and offline evaluation ----------------------------------------------------------
def new_head(target, vocab: torch.Tensor, init_layer: int, feature_layers=(-1,), width: int | None = None,
             depth: int = 1):
    """A head for `target` over `vocab` [N], its layer copied from target layer init_layer, reading
    the target's hidden states at feature_layers (hidden_states indices, the last one -1); `width`:
    its MLP's units (None: the target's; wider, the extra units start silent); `depth`: its decoder
    layers (the ones after the first start as pass-throughs: their output matrices zero)."""
    from ..drafters.feature_head import FeatureHead, target_cfg
    cfg = target_cfg(target)
    head = FeatureHead({**cfg, "feature_layers": list(feature_layers),
                        "intermediate_size": width or cfg["intermediate_size"],
                        **({"depth": depth} if depth > 1 else {})}, vocab)
    head.init_from_target(target, init_layer)
    return head.attach(target.get_input_embeddings().weight, target.get_output_embeddings().weight)


def load_start(head, state: dict) -> None:
    """Start `head` from another head's saved state (safetensors dict): every float tensor they share
    (strict=False: taps the other head lacked keep their pass-through start; a narrower MLP fills the
    first units of a wider one), the output bias carried over by token id (the other head's lowest
    for a token it did not have)."""
    own = head.state_dict()
    same = {k: v.float() for k, v in state.items()
            if k not in ("bias", "vocab_ids") and v.is_floating_point() and own.get(k, v).shape == v.shape}
    head.load_state_dict(same, strict=False)
    with torch.no_grad():   # a narrower MLP's units fill the first ones of a wider head (the rest keep their start)
        for k, v in state.items():
            if k in own and k not in same and k != "bias" and v.is_floating_point():
                if any(a > b for a, b in zip(v.shape, own[k].shape)) or v.dim() != own[k].dim():
                    raise ValueError(f"{k}: a saved {tuple(v.shape)} does not fit this head's {tuple(own[k].shape)}")
                own[k][tuple(slice(0, n) for n in v.shape)].copy_(v.float())
    old = dict(zip(state["vocab_ids"].tolist(), state["bias"].float().tolist()))
    with torch.no_grad():
        head.bias.copy_(torch.tensor([old.get(int(t), min(old.values())) for t in head.vocab_ids.tolist()]))


def trainable_head(pair, spec: str, device):
    """A head to train from spec "FOLDER[:VOCAB.npy[:TAPS[:WIDTH[:DEPTH]]]]": FOLDER a head folder (weights.safetensors +
    config.json) or a run's checkpoint (head.safetensors + state.json); VOCAB.npy another vocabulary
    (target ids; the output bias carried over by token id, the lowest for new tokens); TAPS the
    hidden states it reads, '/'-separated (e.g. 10/20/-1; new taps start as a pass-through of the
    final state, as `init_from_target` makes them); WIDTH its MLP's units (wider than the start's:
    the new ones start silent); DEPTH its decoder layers (more than the start's: the new ones start
    as pass-throughs, so the head computes what its start does). Empty fields keep the start's. fp32, on device."""
    from safetensors.torch import load as st_load
    folder, vocab_file, taps, width, depth = [f or None for f in (spec.split(":") + [None] * 4)[:5]]
    folder = Path(folder)
    if (folder / "weights.safetensors").is_file():
        st = st_load((folder / "weights.safetensors").read_bytes())
        layers = json.loads((folder / "config.json").read_text())["cfg"].get("feature_layers", [-1])
    else:
        st = st_load((folder / "head.safetensors").read_bytes())
        layers = json.loads((folder / "state.json").read_text())["settings"]["layers"]
    layers = [int(x) for x in taps.split("/")] if taps else list(layers)
    vocab = torch.from_numpy(np.load(vocab_file).astype(np.int64)) if vocab_file else st["vocab_ids"]
    width = int(width) if width else st["gate.weight"].shape[0]
    saved_depth = 1 + len({k.split(".")[1] for k in st if k.startswith("extra.")})
    depth = int(depth) if depth else saved_depth
    if depth < saved_depth:
        raise ValueError(f"{folder} holds a head of {saved_depth} layers: it cannot start one of {depth}")
    head = new_head(pair.target, vocab.to(pair.target.get_input_embeddings().weight.device), 29, layers, width, depth)
    load_start(head, st)
    return head.to(device)


def head_objective(loss: str, K: int):
    """The feature head's objective: (head, batch) -> (loss, first step's terms, valid rows)."""
    def objective(head, b):
        logp = teacher_logp(head, b)
        terms = [step_terms(head, g, logp, b["valid"]) for g in rollout(head, b["feats"], b["ids"], K)]
        return loss_fn(loss, terms, b["valid"]), terms[0], b["valid"]
    return objective


def train(head, seqs: list[dict], *, loss: str, steps: int, ckpt: Path, batch: int = 8,
          lr: float = 1e-3, K: int | None = None, settings: dict | None = None, log=print,
          objective=None) -> None:
    """AdamW, linear warmup + cosine decay, fixed seed; checkpoint every 50 steps, resumes — only a
    checkpoint made with the same settings (these arguments + `settings`: data manifests, vocabulary,
    taps, start weights); another one is refused, never silently continued. objective(head, batch)
    -> (loss, first output's terms, valid rows): default the feature head's `loss` over K steps."""
    K = K or STEPS_OF.get(loss, 1)
    objective = objective or head_objective(loss, K)
    settings = {"loss": loss, "steps": steps, "batch": batch, "lr": lr, "K": K, "n_seqs": len(seqs),
                **(settings or {})}
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = lambda s: min(1.0, (s + 1) / 50) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / steps)))
    start = 0
    if ckpt.exists():
        st = torch.load(ckpt, weights_only=True)      # tensors and numbers only: no pickled code
        if st.get("settings") != json.loads(json.dumps(settings)):
            raise SystemExit(f"{ckpt} was made with other settings ({st.get('settings')}, now {settings}): "
                             "pass another --name, or delete it to start over")
        head.load_state_dict(st["head"], strict=False)
        opt.load_state_dict(st["opt"])
        start = st["step"]
        log(f"resumed {ckpt} at step {start}")
    rng = np.random.default_rng(SEED)
    order = [rng.integers(0, len(seqs), batch) for _ in range(steps)]   # same data for every loss
    t0, tokens, run = time.time(), 0, {}
    head.train()
    for s in range(start, steps):
        b = make_batch(seqs, order[s].tolist())
        for g in opt.param_groups:
            g["lr"] = lr * sched(s)
        obj, first, valid = objective(head, b)
        opt.zero_grad()
        obj.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        tokens += int(valid.sum())
        m = valid.float()
        for key, val in [("loss", obj.item()), ("agree", float((first["match"] * m).sum() / m.sum())),
                         ("alpha", float((first["alpha"].detach() * m).sum() / m.sum()))]:
            run[key] = 0.95 * run.get(key, val) + 0.05 * val
        if (s + 1) % 10 == 0 or s + 1 == steps:
            el = time.time() - t0
            done = (s + 1 - start) / (steps - start)
            bar = "#" * int(20 * (s + 1) / steps)
            log(f"[{bar:<20}] {s + 1}/{steps} {tokens / el:.0f} tok/s ETA {el / done - el:.0f}s "
                + " ".join(f"{k} {v:.3f}" for k, v in run.items()))
        if (s + 1) % 50 == 0 or s + 1 == steps:
            state = {"head": dict(head.state_dict()), "opt": opt.state_dict(), "step": s + 1, "settings": settings}
            write_atomic(ckpt, lambda f: torch.save(state, f))
    head.eval()


@torch.no_grad()
def evaluate(head, seqs: list[dict], K: int = 4) -> dict:
    """Held-out offline metrics from a K-step rollout on teacher-forced features: per-step greedy
    agreement and T=1 α, and the expected tokens per round at k=K (1 + Σ_j Π_{i≤j}, anchors)."""
    head.eval()
    agree, alpha, tau_g, tau_s = [[] for _ in range(K)], [[] for _ in range(K)], [], []
    for r in range(0, len(seqs), 8):
        b = make_batch(seqs, list(range(r, min(r + 8, len(seqs)))))
        logp = teacher_logp(head, b)
        # "agree" against the full target's argmax where the sequences carry it (the truncated
        # teacher's argmax reads high: it never falls outside the draft vocabulary).
        full = b["argmax"][:, 1:][b["valid"]] if "argmax" in b else None
        terms = [step_terms(head, g, logp, b["valid"], full) for g in rollout(head, b["feats"], b["ids"], K)]
        v = b["valid"]
        for j, t in enumerate(terms):
            agree[j].append(t["match"][v]), alpha[j].append(t["alpha"][v])
        mk = _along_chain(v, 1, K) & _along_chain(v, K, K)
        mt = torch.stack([_along_chain(t["match"], j + 1, K) for j, t in enumerate(terms)], -1)
        al = torch.stack([_along_chain(t["alpha"], j + 1, K) for j, t in enumerate(terms)], -1)
        tau_g.append(1 + chain_expected_length(mt)[mk]), tau_s.append(1 + chain_expected_length(al)[mk])
    cat = lambda xs: float(torch.cat(xs).mean())
    return dict(agree=[round(cat(a), 4) for a in agree], alpha_t1=[round(cat(a), 4) for a in alpha],
                tau_greedy=round(cat(tau_g), 3), tau_t1=round(cat(tau_s), 3))
