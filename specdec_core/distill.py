"""Training a draft for a target by self-distillation: data, teacher-forced features, losses, training.

    python -m specdec_core.distill extract --minutes 20       # target features of train sequences
    python -m specdec_core.distill train --loss chain --steps 3000 --out assets/draft
    python -m specdec_core.distill ablate --steps 300         # same data/steps/seed for every loss
    python -m specdec_core.distill eval --draft assets/draft  # α / speedup on held-out instructions

Data: the target's own continuations of varied instructions (../shared/distill-data, made with
`generate(..., output_logits=True)`); a held-out split of *instructions* is never trained on.
Teacher forcing runs the target once over prompt + continuation and stores, for every position t,
its last hidden state f_t (fp16, [H]) and the log-normaliser of its logits: with the frozen output
layer W the target's full distribution is softmax(W f_t), so the truncated-vocabulary teacher
p(x) = exp(W_x f_t − lse_t) is exact and costs only N·H per position at training time.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

DATA = Path(__file__).resolve().parents[2] / "shared" / "distill-data"
CACHE = Path(__file__).resolve().parents[1] / ".cache" / "distill"
HELD_OUT_FRACTION, SEED = 0.08, 0


# -- data ------------------------------------------------------------------------------------
def load_sequences(data_dir: Path = DATA) -> tuple[list[dict], list[str]]:
    """Sequences of the shared data: [{prompt: int64 [P], gen: int64 [G], greedy, instruction}]."""
    d = np.load(data_dir / "selfdistill.npz")
    instructions = json.loads((data_dir / "instructions.json").read_text())
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


def frequent_vocab(seqs: list[dict], idx: list[int], n: int) -> torch.Tensor:
    """The n most frequent tokens of the target's outputs on the train split: int64 [n], sorted.
    EOS is always kept (the draft must be able to propose the end)."""
    counts = np.bincount(np.concatenate([seqs[i]["gen"] for i in idx]), minlength=1)
    counts = np.pad(counts, (0, max(0, 3 - len(counts))))
    counts[2] = counts.max() + 1  # <|im_end|>
    return torch.from_numpy(np.sort(np.argsort(-counts, kind="stable")[:n]))


# -- teacher forcing -------------------------------------------------------------------------
@torch.no_grad()
def extract(target, seqs: list[dict], idx: list[int], out_dir: Path, shard_size: int = 32,
            batch: int = 8, minutes: float = 1e9, log=print) -> None:
    """Run the target over prompt+gen of seqs[idx] in shards; write out_dir/shard_XXXX.npz with
    ids int32 [n], feats fp16 [n, H] (last hidden state, post-norm), lse fp32 [n], offsets [s+1],
    prompt_len [s]. Existing shards are skipped, so an interrupted run resumes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    t0, done_tok = time.time(), 0
    n_shards = math.ceil(len(idx) / shard_size)
    for s in range(n_shards):
        path = out_dir / f"shard_{s:04d}.npz"
        if path.exists():
            continue
        if time.time() - t0 > minutes * 60:
            log(f"time budget reached after {s} shards")
            return
        chunk = [seqs[i] for i in idx[s * shard_size:(s + 1) * shard_size]]
        order = sorted(range(len(chunk)), key=lambda j: len(chunk[j]["prompt"]) + len(chunk[j]["gen"]))
        ids, feats, lses, plen = [None] * len(chunk), [None] * len(chunk), [None] * len(chunk), []
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
            h = out.hidden_states[-1]
            for r, j in enumerate(group):
                n = len(rows[r])
                ids[j], feats[j], lses[j] = rows[r], h[r, :n].half().numpy(), lse[r, :n].numpy()
            done_tok += int(mask.sum())
        np.savez(str(path) + ".tmp.npz", ids=np.concatenate(ids).astype(np.int32),
                 feats=np.concatenate(feats), lse=np.concatenate(lses),
                 offsets=np.cumsum([0] + [len(i) for i in ids]),
                 prompt_len=np.array([len(c["prompt"]) for c in chunk]))
        os.replace(str(path) + ".tmp.npz", path)
        el = time.time() - t0
        rate = done_tok / el
        log(f"shard {s + 1}/{n_shards}  {done_tok} tok  {rate:.0f} tok/s  "
            f"ETA {(n_shards - s - 1) * shard_size * 160 / rate / 60:.1f} min")


def load_shards(shard_dir: Path, max_shards: int = 10**9) -> list[dict]:
    """Shards -> list of sequences {ids int64 [T], feats fp16 [T, H], lse fp32 [T], plen}."""
    seqs = []
    for path in sorted(shard_dir.glob("shard_*.npz"))[:max_shards]:
        with np.load(path) as z:     # read each array once (NpzFile re-reads on every access)
            d = {k: z[k] for k in z.files}
        off = d["offsets"]
        for i in range(len(off) - 1):
            a, b = off[i], off[i + 1]
            seqs.append(dict(ids=torch.from_numpy(d["ids"][a:b].astype(np.int64)),
                             feats=torch.from_numpy(d["feats"][a:b]),
                             lse=torch.from_numpy(d["lse"][a:b]), plen=int(d["prompt_len"][i])))
    return seqs


# -- batches, rollout, losses ----------------------------------------------------------------
def make_batch(seqs: list[dict], rows: list[int]) -> dict:
    """Pad sequences: ids [B, T] int64, feats [B, T, H] fp32, lse [B, T], valid [B, T-1] bool.
    valid[b, t]: row t (input f_t, x_{t+1}) predicts a generated token x_{t+2}, teacher at t+1."""
    chosen = [seqs[r] for r in rows]
    T = max(len(s["ids"]) for s in chosen)
    H = chosen[0]["feats"].shape[1]
    ids = torch.full((len(chosen), T), 2, dtype=torch.long)
    feats, lse = torch.zeros(len(chosen), T, H), torch.zeros(len(chosen), T)
    valid = torch.zeros(len(chosen), T - 1, dtype=torch.bool)
    for b, s in enumerate(chosen):
        n = len(s["ids"])
        ids[b, :n], feats[b, :n], lse[b, :n] = s["ids"], s["feats"].float(), s["lse"]
        valid[b, max(0, s["plen"] - 2):n - 2] = True
    return dict(ids=ids, feats=feats, lse=lse, valid=valid)


def _shift(x: torch.Tensor, m: int, dim: int) -> torch.Tensor:
    """x shifted right by m along dim (x[t-m] at t), zeros in front."""
    if m == 0:
        return x
    pad = torch.zeros_like(x.narrow(dim, 0, m))
    return torch.cat([pad, x.narrow(dim, 0, x.shape[dim] - m)], dim)


def rollout(head, feats: torch.Tensor, ids: torch.Tensor, K: int) -> list[torch.Tensor]:
    """Training-time test: K draft steps over every position at once, outputs g [B, T-1, H] each.

    Step j's row t is what drafting computes for its j-th token when the last TRUE entry is
    t-j+1: input [g_{j-1}[t-1] ; e(x_{t+1})], attending to step-1 keys at s <= t-j+1 and to step-i
    keys at t-j+i (i = 2..j) — exactly the draft's KV cache at inference (the HASS/EAGLE-3 mask).
    Every step's row t predicts x_{t+2} (teacher position t+1).
    """
    T1 = ids.shape[1] - 1
    pos = torch.arange(T1)
    rep, scale = head.nh // head.nkv, 1.0 / math.sqrt(head.hd)
    feat, out, keys, vals = feats[:, :-1], [], [], []
    for j in range(1, K + 1):
        x = head.layer_in(feat, ids[:, 1:])
        q, k, v = head.qkv(x, pos)
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        keys.append(k), vals.append(v)
        main = (q @ keys[0].transpose(-1, -2)) * scale                     # [B, h, T1, T1]
        allowed = torch.ones(T1, T1, dtype=torch.bool).tril(-(j - 1))
        main = main.masked_fill(~allowed, float("-inf"))
        diag = [(q * _shift(keys[i - 1], j - i, 2)).sum(-1, keepdim=True) * scale for i in range(2, j + 1)]
        probs = torch.softmax(torch.cat([main] + diag, -1), -1)
        attn = probs[..., :T1] @ vals[0]
        for n, i in enumerate(range(2, j + 1)):
            attn = attn + probs[..., T1 + n:T1 + n + 1] * _shift(vals[i - 1], j - i, 2)
        g = head.finish(x, attn)
        out.append(g)
        feat = _shift(g, 1, 1)          # next step's row t reads this step's g at t-1
    return out


def step_terms(head, g: torch.Tensor, logp: torch.Tensor, valid: torch.Tensor) -> dict:
    """Per-row quantities of one draft step, [B, T1] each (0 off `valid`). g [B, T1, H] draft
    outputs; logp [n_valid, N] the teacher's log-probs on the N draft tokens at the valid rows
    (not renormalised: mass outside N is lost to the draft). Logits are made for valid rows only
    (the output layer dominates the cost). ce = -Σ p log q (forward KL up to a constant),
    alpha = Σ min(p, q) (T=1 acceptance), match = argmax agreement (greedy acceptance)."""
    logits = head.logits(g[valid])
    logq = torch.log_softmax(logits, -1)
    p = logp.exp()
    flat = dict(ce=-(p * logq).sum(-1), alpha=torch.minimum(p, logq.exp()).sum(-1),
                match=(logits.argmax(-1) == logp.argmax(-1)).float())
    out = {}
    for k, v in flat.items():
        out[k] = torch.zeros(valid.shape, dtype=v.dtype).masked_scatter(valid, v)
    return out


def tv_loss(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """1 − Σ min(p, q) over the last axis: [..., V] -> [...]."""
    return 1 - torch.minimum(p, q).sum(-1)


def chain_expected_length(alphas: torch.Tensor) -> torch.Tensor:
    """E[τ] = Σ_j Π_{i≤j} α_i accepted drafts for per-step acceptances alphas [..., K] -> [...]."""
    return torch.cumprod(alphas, -1).sum(-1)


def _along_chain(x: torch.Tensor, j: int, K: int) -> torch.Tensor:
    """Row values [B, T1] of step j, re-indexed by anchor a (row a+j-1), cut to T1-K+1 anchors."""
    return x[:, j - 1: x.shape[1] - K + j]


LOSSES = ("fkl", "tv", "rollout", "focal", "chain")
STEPS_OF = {"fkl": 1, "tv": 1, "rollout": 3, "focal": 3, "chain": 3}


def loss_fn(name: str, terms: list[dict], valid: torch.Tensor, gamma: float = 0.8) -> torch.Tensor:
    """The training objective from per-step terms (list over steps of dicts of [B, T1])."""
    m = valid.float()
    mean = lambda x, w=m: (x * w).sum() / w.sum().clamp_min(1)
    if name == "fkl":
        return mean(terms[0]["ce"])
    if name == "tv":
        return mean(1 - terms[0]["alpha"])
    K = len(terms)
    if name == "rollout":   # token positional weighting: step j weighs gamma^(j-1)
        w = [gamma ** j for j in range(K)]
        return sum(wj * mean(t["ce"]) for wj, t in zip(w, terms)) / sum(w)
    # Chain view: anchor a's j-th draft is row a+j-1 of step j; valid when its last row is.
    mk = _along_chain(m, 1, K) * _along_chain(m, K, K)     # valid rows are contiguous
    ce = torch.stack([_along_chain(t["ce"], j + 1, K) for j, t in enumerate(terms)], -1)
    al = torch.stack([_along_chain(t["alpha"], j + 1, K) for j, t in enumerate(terms)], -1)
    if name == "chain":     # maximise E[τ]; normalised to [0, 1]
        return mean(1 - chain_expected_length(al) / K, mk)
    if name == "focal":     # first-error focal: up to the first greedy mismatch, (1-α)-weighted
        mt = torch.stack([_along_chain(t["match"], j + 1, K) for j, t in enumerate(terms)], -1)
        reach = torch.cat([torch.ones_like(mt[..., :1]), torch.cumprod(mt, -1)[..., :-1]], -1)
        w = reach * (1 - al.detach()) ** 1.0
        return mean((w * ce).sum(-1), mk)
    raise ValueError(f"unknown loss {name!r}: one of {LOSSES}")


# -- training and offline evaluation ----------------------------------------------------------
def new_head(target, vocab: torch.Tensor, init_layer: int):
    from .distilled import FeatureHead, target_cfg
    head = FeatureHead(target_cfg(target), vocab)
    head.init_from_target(target, init_layer)
    return head.attach(target.get_input_embeddings().weight, target.get_output_embeddings().weight)


def teacher_logp(head, batch: dict) -> torch.Tensor:
    """Exact teacher log-probs on the draft vocabulary for the valid rows t (position t+1):
    softmax(W f)[x] = exp(W_x f − lse). [n_valid, N]."""
    v = batch["valid"]
    with torch.no_grad():
        return batch["feats"][:, 1:][v] @ head.head_w.T - batch["lse"][:, 1:][v][:, None]


def train(head, seqs: list[dict], *, loss: str, steps: int, ckpt: Path, batch: int = 8,
          lr: float = 1e-3, K: int | None = None, log=print) -> None:
    """AdamW, linear warmup + cosine decay, fixed seed; checkpoint every 50 steps, resumes."""
    K = K or STEPS_OF[loss]
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = lambda s: min(1.0, (s + 1) / 50) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / steps)))
    start = 0
    if ckpt.exists():
        st = torch.load(ckpt, weights_only=False)
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
    from .models import load_pair
    return load_pair("smollm2-135m", draft="ngram", device="cpu").target


def _vocab(n: int) -> torch.Tensor:
    seqs, _ = load_sequences()
    return frequent_vocab(seqs, split(seqs)[0], n)


def cmd_train(a) -> None:
    from .distilled import save_head
    target, vocab = _target(), _vocab(a.vocab)
    data = load_shards(CACHE / "train", a.shards)
    print(f"{len(data)} train sequences, {sum(len(d['ids']) for d in data)} positions")
    torch.manual_seed(SEED)
    head = new_head(target, vocab, a.init_layer)
    if a.init_from:   # curriculum: continue from another run's weights (fresh optimizer)
        head.load_state_dict(torch.load(CACHE / f"ckpt_{a.init_from}.pt", weights_only=False)["head"])
    ckpt = CACHE / f"ckpt_{a.name or a.loss}.pt"
    train(head, data, loss=a.loss, steps=a.steps, ckpt=ckpt, batch=a.batch, lr=a.lr, K=a.K)
    res = evaluate(head, load_shards(CACHE / "heldout"))
    print(json.dumps({"name": a.name or a.loss, "loss": a.loss, "steps": a.steps, **res}))
    with open(CACHE / "results.jsonl", "a") as f:
        f.write(json.dumps({"name": a.name or a.loss, "loss": a.loss, "steps": a.steps, "batch": a.batch,
                            "train_seqs": len(data), **res}) + "\n")
    if a.out:
        save_head(head, Path(a.out), {"loss": a.loss, "steps": a.steps, "batch": a.batch,
                                      "train_sequences": len(data), "init_layer": a.init_layer,
                                      "heldout_offline": res})


def cmd_bench(a) -> None:
    """End-to-end on held-out instructions: plain vs speculative (distilled head, and n-gram),
    interleaved per prompt in one run so machine load hits both alike."""
    from . import autoregressive_generate, speculative_generate
    from .distilled import load_head, FeatureDrafter
    from .models import ModelPair, load_pair
    base = load_pair("smollm2-135m", draft="ngram", device="cpu")
    head = load_head(base.target, Path(a.draft))
    pair = ModelPair.from_models(base.target, lambda p: FeatureDrafter(head, p.vocab_size), base.tokenizer)
    seqs, _ = load_sequences()
    held = sorted({seqs[i]["instruction"] for i in split(seqs)[1]})
    prompts = [base.encode_prompt(t) for t in np.random.default_rng(1).permutation(held)[: a.prompts]]
    settings = [dict(temperature=0.0)] + ([dict(temperature=0.7, top_p=0.9)] if a.sampled else [])
    ks = [int(k) if k != "auto" else k for k in a.k.split(",")]
    rows = []
    for st in settings:
        agg = {}
        for n, ids in enumerate(prompts):
            runs = [("plain", None)] + [(f"k={k}", k) for k in ks] + [("ngram k=3", "ngram")]
            for name, k in runs:
                kw = dict(max_new_tokens=a.max_new, seed=n, **st)
                if k is None:
                    tr = autoregressive_generate(pair, ids, **kw)
                elif k == "ngram":
                    tr = speculative_generate(base, ids, k=3, **kw)
                else:
                    tr = speculative_generate(pair, ids, k=k, **kw)
                agg.setdefault(name, []).append(tr)
        plain = agg["plain"]
        step_s = sum(t.stats["step_s"] for t in plain) / len(plain)
        tps = lambda trs: sum(t.stats["new_tokens"] for t in trs) / sum(t.stats["wall_s"] for t in trs)
        for name, trs in agg.items():
            mean = lambda key: (lambda v: sum(v) / len(v) if v else None)(
                [t.stats[key] for t in trs if t.stats.get(key) is not None])
            dstep = mean("draft_step_s")
            rows.append(dict(setting=st, run=name, tokens_per_s=round(tps(trs), 2),
                             speedup=round(tps(trs) / tps(plain), 3), alpha=mean("alpha"),
                             acceptance_rate=mean("acceptance_rate"),
                             mean_committed_per_round=mean("mean_committed_per_round"),
                             c=round(dstep / step_s, 4) if dstep else None))
            print(json.dumps(rows[-1]), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


def cmd_extract(a) -> None:
    seqs, _ = load_sequences()
    train, test = split(seqs)
    target = _target()
    held = [i for i in test if seqs[i]["greedy"]][: a.heldout]
    extract(target, seqs, held, CACHE / "heldout", minutes=a.minutes)
    extract(target, seqs, train, CACHE / "train", minutes=a.minutes)


def main(argv=None) -> None:
    torch.set_num_threads(int(os.environ.get("DISTILL_THREADS", "1")))  # leave a core free
    torch.manual_seed(SEED)
    p = argparse.ArgumentParser(prog="python -m specdec_core.distill", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract", help="teacher-force the target over train (+ held-out) sequences")
    e.add_argument("--minutes", type=float, default=20.0)
    e.add_argument("--heldout", type=int, default=48)
    t = sub.add_parser("train", help="train a feature-head draft on the extracted shards")
    t.add_argument("--loss", choices=LOSSES, default="rollout")
    t.add_argument("--steps", type=int, default=1000)
    t.add_argument("--batch", type=int, default=8)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--K", type=int, default=None, help="rollout steps (default: per loss)")
    t.add_argument("--vocab", type=int, default=8192)
    t.add_argument("--init-layer", type=int, default=29)
    t.add_argument("--shards", type=int, default=10**9)
    t.add_argument("--init-from", default=None, help="start from the weights of run NAME")
    t.add_argument("--name", default=None, help="checkpoint/result name (default: the loss)")
    t.add_argument("--out", default=None, help="save the trained head here (e.g. assets/draft)")
    b = sub.add_parser("bench", help="end-to-end speedup on held-out instructions (real target)")
    b.add_argument("--draft", default="assets/draft")
    b.add_argument("--prompts", type=int, default=6)
    b.add_argument("--max-new", type=int, default=64)
    b.add_argument("--k", default="2,3,4")
    b.add_argument("--sampled", action="store_true", help="also T=0.7, top-p 0.9")
    b.add_argument("--json", default=None)
    a = p.parse_args(argv)
    {"extract": cmd_extract, "train": cmd_train, "bench": cmd_bench}[a.cmd](a)


if __name__ == "__main__":
    main()
