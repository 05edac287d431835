"""Training a draft for a target by self-distillation: train, evaluate, ablate, CLI.

    python -m specdec_core.lab extract --minutes 30            # teacher-force the target (resumes)
    python -m specdec_core.lab train --loss fkl --steps 1500 --out specdec_core/data/draft
    python -m specdec_core.lab ablate --init-from fkl --steps 60   # every loss, same data/steps/seed
    python -m specdec_core.lab prompts --out specdec_core/data/templated_heldout_prompts.json   # for specdec_core.bench

Data (distill_data.py): the target's own continuations of varied instructions
(../shared/distill-data, made with `generate(..., output_logits=True)`) and the target's features
from teacher forcing; a held-out split of *instructions* is never trained on. Losses and the
training-time rollout: distill_losses.py. The draft itself: distilled.py. End-to-end numbers come
from `python -m specdec_core.bench --draft distilled --prompts specdec_core/data/templated_heldout_prompts.json`.
Threads: DISTILL_THREADS (default: all cores).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from pathlib import Path

import numpy as np
import torch

from .data import (ENV_CACHE, ENV_DATA, SEED, cache_dir, extract, frequent_vocab, load_sequences, load_shards,
                   make_batch, split)
from .losses import (LOSSES, STEPS_OF, _along_chain, chain_expected_length, loss_fn, rollout, step_terms,
                     teacher_logp, tv_loss)

__all__ = ["train", "evaluate", "new_head", "rollout", "step_terms", "loss_fn", "tv_loss",
           "chain_expected_length", "LOSSES"]


# -- training and offline evaluation ----------------------------------------------------------
def new_head(target, vocab: torch.Tensor, init_layer: int):
    from ..drafters.feature_head import FeatureHead, target_cfg
    head = FeatureHead(target_cfg(target), vocab)
    head.init_from_target(target, init_layer)
    return head.attach(target.get_input_embeddings().weight, target.get_output_embeddings().weight)


def train(head, seqs: list[dict], *, loss: str, steps: int, ckpt: Path, batch: int = 8,
          lr: float = 1e-3, K: int | None = None, log=print) -> None:
    """AdamW, linear warmup + cosine decay, fixed seed; checkpoint every 50 steps, resumes."""
    K = K or STEPS_OF[loss]
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = lambda s: min(1.0, (s + 1) / 50) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / steps)))
    start = 0
    if ckpt.exists():
        st = torch.load(ckpt, weights_only=True)      # tensors and numbers only: no pickled code
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
        logp = teacher_logp(head, b)
        terms = [step_terms(head, g, logp, b["valid"]) for g in rollout(head, b["feats"], b["ids"], K)]
        obj = loss_fn(loss, terms, b["valid"])
        opt.zero_grad()
        obj.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        tokens += int(b["valid"].sum())
        m = b["valid"].float()
        for key, val in [("loss", obj.item()), ("agree", float((terms[0]["match"] * m).sum() / m.sum())),
                         ("alpha", float((terms[0]["alpha"].detach() * m).sum() / m.sum()))]:
            run[key] = 0.95 * run.get(key, val) + 0.05 * val
        if (s + 1) % 10 == 0 or s + 1 == steps:
            el = time.time() - t0
            done = (s + 1 - start) / (steps - start)
            bar = "#" * int(20 * (s + 1) / steps)
            log(f"[{bar:<20}] {s + 1}/{steps} {tokens / el:.0f} tok/s ETA {el / done - el:.0f}s "
                + " ".join(f"{k} {v:.3f}" for k, v in run.items()))
        if (s + 1) % 50 == 0 or s + 1 == steps:
            torch.save({"head": {k: v for k, v in head.state_dict().items()}, "opt": opt.state_dict(),
                        "step": s + 1}, str(ckpt) + ".tmp")
            os.replace(str(ckpt) + ".tmp", ckpt)
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
        terms = [step_terms(head, g, logp, b["valid"]) for g in rollout(head, b["feats"], b["ids"], K)]
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


# -- CLI -------------------------------------------------------------------------------------
def _target():
    from ..models import load_pair
    return load_pair("smollm2-135m", draft="ngram", device="cpu").target


def _vocab(n: int) -> torch.Tensor:
    seqs, _ = load_sequences()
    return frequent_vocab(seqs, split(seqs)[0], n)


def _record(row: dict) -> None:
    print(json.dumps(row), flush=True)
    with open(cache_dir() / "results.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")


def _train_one(a, target, vocab, data, held, loss: str, name: str, init_from: str | None):
    torch.manual_seed(SEED)
    head = new_head(target, vocab, a.init_layer)
    if init_from:   # curriculum: continue from another run's weights (fresh optimizer)
        head.load_state_dict(torch.load(cache_dir() / f"ckpt_{init_from}.pt", weights_only=True)["head"])
    train(head, data, loss=loss, steps=a.steps, ckpt=cache_dir() / f"ckpt_{name}.pt", batch=a.batch, lr=a.lr,
          K=a.K)
    res = evaluate(head, held)
    _record({"name": name, "loss": loss, "init_from": init_from, "steps": a.steps, "batch": a.batch,
             "lr": a.lr, "train_seqs": len(data), **res})
    return head, res


def cmd_train(a) -> None:
    from ..drafters.feature_head import save_head
    target, vocab = _target(), _vocab(a.vocab)
    data, held = load_shards(cache_dir() / "train", a.shards), load_shards(cache_dir() / "heldout")
    print(f"{len(data)} train sequences, {sum(len(d['ids']) for d in data)} positions")
    head, res = _train_one(a, target, vocab, data, held, a.loss, a.name or a.loss, a.init_from)
    if a.out:
        save_head(head, Path(a.out), {"loss": a.loss, "steps": a.steps, "batch": a.batch, "lr": a.lr,
                                      "init_from": a.init_from, "train_sequences": len(data),
                                      "train_positions": int(sum(len(d["ids"]) for d in data)),
                                      "init_layer": a.init_layer, "heldout_offline": res})


def cmd_ablate(a) -> None:
    """Every loss from the same start (fresh, or --init-from's weights), same data order, steps, seed."""
    target, vocab = _target(), _vocab(a.vocab)
    data, held = load_shards(cache_dir() / "train", a.shards), load_shards(cache_dir() / "heldout")
    rows = []
    for loss in a.losses.split(","):
        name = f"ablate_{loss}_{a.steps}" + (f"_from_{a.init_from}" if a.init_from else "")
        rows.append({"loss": loss, **_train_one(a, target, vocab, data, held, loss, name, a.init_from)[1]})
    print("\n| loss | greedy agreement step 1..4 | α (T=1) step 1..4 | τ greedy (k=4) | τ T=1 (k=4) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['loss']} | {' / '.join(f'{x:.3f}' for x in r['agree'])} | "
              f"{' / '.join(f'{x:.3f}' for x in r['alpha_t1'])} | {r['tau_greedy']:.3f} | {r['tau_t1']:.3f} |")


def cmd_prompts(a) -> None:
    """Held-out instructions (never trained on) as a prompt file for `python -m specdec_core.bench`."""
    seqs, _ = load_sequences()
    held = sorted({seqs[i]["instruction"] for i in split(seqs)[1]})
    pick = np.random.default_rng(1).permutation(held)[: a.n]
    Path(a.out).write_text(json.dumps({"prompts": [{"name": f"heldout{i}", "text": t}
                                                   for i, t in enumerate(pick)]}, indent=1) + "\n")
    print(f"wrote {len(pick)} held-out prompts to {a.out}")


def cmd_extract(a) -> None:
    seqs, _ = load_sequences()
    train_idx, test_idx = split(seqs)
    target = _target()
    held = [i for i in test_idx if seqs[i]["greedy"]][: a.heldout]
    extract(target, seqs, held, cache_dir() / "heldout", minutes=a.minutes)
    extract(target, seqs, train_idx, cache_dir() / "train", minutes=a.minutes)


def run_name(text: str) -> str:
    """A run name becomes a file name in the lab cache: letters, digits, '.', '-', '_' only."""
    if not re.fullmatch(r"[\w.-]+", text) or text.startswith("."):
        raise argparse.ArgumentTypeError(f"run names are letters, digits, '.', '-', '_': got {text!r}")
    return text


def main(argv=None) -> None:
    torch.set_num_threads(int(os.environ.get("DISTILL_THREADS", str(os.cpu_count() or 1))))
    p = argparse.ArgumentParser(prog="python -m specdec_core.lab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, help=f"self-distillation data folder (default: ${ENV_DATA} or ../shared/distill-data)")
    p.add_argument("--cache", default=None, help=f"shards, checkpoints, results (default: ${ENV_CACHE} or ~/.cache/specdec-explainer/lab)")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract", help="teacher-force the target over train (+ held-out) sequences")
    e.add_argument("--minutes", type=float, default=20.0)
    e.add_argument("--heldout", type=int, default=48)
    for name, helptext in [("train", "train a feature-head draft on the extracted shards"),
                           ("ablate", "train one head per loss, same data/steps/seed; a table")]:
        t = sub.add_parser(name, help=helptext)
        if name == "train":
            t.add_argument("--loss", choices=LOSSES, default="fkl")
            t.add_argument("--name", default=None, type=run_name, help="checkpoint/result name (default: the loss)")
            t.add_argument("--out", default=None, help="save the trained head here (e.g. specdec_core/data/draft)")
        else:
            t.add_argument("--losses", default=",".join(LOSSES))
        t.add_argument("--steps", type=int, default=1000)
        t.add_argument("--batch", type=int, default=8)
        t.add_argument("--lr", type=float, default=1e-3)
        t.add_argument("--K", type=int, default=None, help="rollout steps (default: per loss)")
        t.add_argument("--vocab", type=int, default=8192)
        t.add_argument("--init-layer", type=int, default=29)
        t.add_argument("--shards", type=int, default=10**9)
        t.add_argument("--init-from", default=None, type=run_name, help="start from the weights of run NAME")
    pr = sub.add_parser("prompts", help="write held-out instructions as a bench prompt file")
    pr.add_argument("--n", type=int, default=8)
    pr.add_argument("--out", default="specdec_core/data/templated_heldout_prompts.json")
    a = p.parse_args(argv)
    # The folders travel in the environment: one visible channel for every command below.
    for value, env in ((a.data, ENV_DATA), (a.cache, ENV_CACHE)):
        if value:
            os.environ[env] = str(Path(value).resolve())
    cache_dir().mkdir(parents=True, exist_ok=True)
    {"extract": cmd_extract, "train": cmd_train, "ablate": cmd_ablate, "prompts": cmd_prompts}[a.cmd](a)
