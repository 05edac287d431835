"""Training-time drafting and the losses of the distillation lab (shapes in each docstring).

rollout() runs K draft steps over every position at once with the mask drafting sees at inference;
step_terms() gives per-row ce / α / greedy match; loss_fn() turns them into one objective:
fkl (forward KL), tv (1 − Σ min(p, q)), rollout (positionally weighted multi-step KL), focal
(first-error focal), chain (differentiable E[τ] = Σ_j Π_{i≤j} α_i).
"""
from __future__ import annotations

import math

import torch


def _shift(x: torch.Tensor, m: int, dim: int) -> torch.Tensor:
    """x shifted right by m along dim (x[t-m] at t), zeros in front."""
    if m == 0:
        return x
    pad = torch.zeros_like(x.narrow(dim, 0, m))
    return torch.cat([pad, x.narrow(dim, 0, x.shape[dim] - m)], dim)


def rollout(head, feats: torch.Tensor, ids: torch.Tensor, K: int) -> list[torch.Tensor]:
    """Training-time test: K draft steps over every position at once, outputs g [B, T-1, H] each;
    feats [B, T, n_taps·H] the target's tapped states (fused by the head), ids [B, T].

    Step j's row t is what drafting computes for its j-th token when the last TRUE entry is
    t-j+1: input [g_{j-1}[t-1] ; e(x_{t+1})], attending to step-1 keys at s <= t-j+1 and to step-i
    keys at t-j+i (i = 2..j) — exactly the draft's KV cache at inference (the HASS/EAGLE-3 mask).
    Every step's row t predicts x_{t+2} (teacher position t+1).
    """
    T1 = ids.shape[1] - 1
    pos = torch.arange(T1, device=ids.device)
    rep, scale = head.nh // head.nkv, 1.0 / math.sqrt(head.hd)
    layers = head.layers()
    feat, out = head.true_feature(feats[:, :-1]), []
    keys, vals = [[] for _ in layers], [[] for _ in layers]      # per layer, per step
    for j in range(1, K + 1):
        x = head.layer_in(feat, ids[:, 1:])
        allowed = torch.ones(T1, T1, dtype=torch.bool, device=ids.device).tril(-(j - 1))
        for li, L in enumerate(layers):     # every layer attends with the same mask, to its own keys
            q, k, v = head.qkv(x, pos, L)
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            keys[li].append(k), vals[li].append(v)
            ks, vs = keys[li], vals[li]
            main = (q @ ks[0].transpose(-1, -2)) * scale                     # [B, h, T1, T1]
            main = main.masked_fill(~allowed, float("-inf"))
            diag = [(q * _shift(ks[i - 1], j - i, 2)).sum(-1, keepdim=True) * scale for i in range(2, j + 1)]
            probs = torch.softmax(torch.cat([main] + diag, -1), -1)
            attn = probs[..., :T1] @ vs[0]
            for n, i in enumerate(range(2, j + 1)):
                attn = attn + probs[..., T1 + n:T1 + n + 1] * _shift(vs[i - 1], j - i, 2)
            x = head.finish(x, attn, L)
        out.append(x)
        feat = _shift(x, 1, 1)          # next step's row t reads this step's g at t-1
    return out


def step_terms(head, g: torch.Tensor, logp: torch.Tensor, valid: torch.Tensor, target_argmax=None, *,
               p: torch.Tensor | None = None, alpha: bool = True) -> dict:
    """Per-row quantities of one draft step, [B, T1] each (0 off `valid`). g [B, T1, H] draft
    outputs; logp [n_valid, N] the teacher's log-probs on the N draft tokens at the valid rows
    (not renormalised: mass outside N is lost to the draft). Logits are made for valid rows only
    (the output layer dominates the cost). ce = -Σ p log q (forward KL up to a constant),
    alpha = Σ min(p, q) (T=1 acceptance), match = argmax agreement (greedy acceptance): with the full
    target's argmax when given (target_argmax [n_valid] target ids; the truncated teacher's argmax
    reads high where the target's token lies outside the draft vocabulary), else the truncated one's.
    p: logp.exp() when the caller has it (every rollout step reads the same teacher); alpha=False
    leaves α out (an [n_valid, N] exp and minimum a step that the KL losses never read)."""
    logits = head.logits(g[valid])
    logq = torch.log_softmax(logits, -1)
    p = logp.exp() if p is None else p
    flat = dict(ce=-(p * logq).sum(-1),
                match=(logits.argmax(-1) == logp.argmax(-1)).float() if target_argmax is None
                else (head.vocab_ids[logits.argmax(-1)] == target_argmax).float())
    if alpha:
        flat["alpha"] = torch.minimum(p, logq.exp()).sum(-1)
    out = {}
    for k, v in flat.items():
        out[k] = torch.zeros(valid.shape, dtype=v.dtype, device=v.device).masked_scatter(valid, v)
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
NEEDS_ALPHA = ("tv", "focal", "chain")      # the losses that read α; fkl and rollout read ce only
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


def teacher_logp(head, batch: dict) -> torch.Tensor:
    """Exact teacher log-probs on the draft vocabulary for the valid rows t (position t+1):
    softmax(W f)[x] = exp(W_x f − lse), f the last tap (the final post-norm state). [n_valid, N]."""
    v, H = batch["valid"], head.head_w.shape[1]
    with torch.no_grad():
        return batch["feats"][:, 1:, -H:][v] @ head.head_w.T - batch["lse"][:, 1:][v][:, None]

