"""Training the block drafter (drafters/block_head.py): every anchor's block at once, its terms,
and the three verification-aligned interventions (losses.block_loss), switchable for the ablation.

Row t of a sequence is the anchor [f̃_t ; e(x_{t+1})] at position t (the feature head's row t); its
block's slot j (1..K−1) is the mask input m_j at position t + j, attending to rows ≤ t and to the
block's other slots — the mask drafting uses (block_head.block_mask). Output j of anchor t (j = 0:
the anchor itself) predicts x_{t+2+j}; its teacher is the target at position t + 1 + j.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .losses import chain_expected_length


def block_rollout(head, feats: torch.Tensor, ids: torch.Tensor, K: int) -> list[torch.Tensor]:
    """feats [B, T, n_taps·H], ids [B, T] -> K outputs g_j [B, T-1, H] (j = 0: the anchors; j ≥ 1:
    slot j of every anchor's block), all from one pass per anchor as drafting computes them."""
    B, T1 = ids.shape[0], ids.shape[1] - 1
    m, H = K - 1, head.fc.out_features
    rep, scale = head.nh // head.nkv, 1.0 / math.sqrt(head.hd)
    x = head.layer_in(head.true_feature(feats[:, :-1]), ids[:, 1:])            # [B, T1, H]
    q, k, v = head.qkv(x, torch.arange(T1))
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)           # [B, h, T1, d]
    causal = torch.ones(T1, T1, dtype=torch.bool).tril()
    outs = [head.finish(x, F.scaled_dot_product_attention(q, k, v, attn_mask=causal))]
    if m == 0:
        return outs
    # Slot j of anchor t: input m_j at position t + j (rows ordered anchor-major: t·m + j − 1).
    xs = head.slots[:m][None, None].expand(B, T1, m, H).reshape(B, T1 * m, H)
    pos = (torch.arange(T1)[:, None] + torch.arange(1, m + 1)[None]).reshape(-1)
    qs, ks, vs = head.qkv(xs, pos)
    ks, vs = ks.repeat_interleave(rep, 1), vs.repeat_interleave(rep, 1)       # [B, h, T1·m, d]
    h, d = qs.shape[1], qs.shape[-1]
    qs5 = qs.view(B, h, T1, m, d)
    ctx = (qs @ k.transpose(-1, -2)).view(B, h, T1, m, T1) * scale          # against the anchors' rows
    seen = torch.ones(T1, T1, dtype=torch.bool).tril()                       # anchor t sees rows ≤ t
    ctx = ctx.masked_fill(~seen[None, None, :, None, :], float("-inf"))
    blk = (qs5 @ ks.view(B, h, T1, m, d).transpose(-1, -2)) * scale          # [B, h, T1, m, m] within the block
    probs = torch.softmax(torch.cat([ctx, blk], -1), -1)
    attn = (probs[..., :T1].reshape(B, h, T1 * m, T1) @ v).view(B, h, T1, m, d)
    attn = attn + probs[..., T1:] @ vs.view(B, h, T1, m, d)
    g = head.finish(xs, attn.reshape(B, h, T1 * m, d)).view(B, T1, m, H)
    return outs + [g[:, :, j] for j in range(m)]


def slot_valid(valid: torch.Tensor, j: int) -> torch.Tensor:
    """[B, T1] rows whose anchor and whose slot-j target are both generated tokens (valid rows are
    contiguous, so: valid at t and at t + j)."""
    shifted = torch.zeros_like(valid)
    shifted[:, : valid.shape[1] - j] = valid[:, j:]
    return valid & shifted


def block_terms(head, outs: list[torch.Tensor], batch: dict) -> list[dict]:
    """Per output j: ce = −Σ p log q, alpha = Σ min(p, q), match (argmax agreement), each [B, T1]
    (0 where slot_valid is False), and its mask `valid`. The teacher of output j at anchor t is
    the target at position t + 1 + j: exp(W_x f − lse) on the draft vocabulary."""
    H = head.head_w.shape[1]
    terms = []
    for j, g in enumerate(outs):
        vj = slot_valid(batch["valid"], j)
        T1 = vj.shape[1]
        with torch.no_grad():
            f = batch["feats"][:, 1 + j:, -H:]
            lse = batch["lse"][:, 1 + j:]
            pad = T1 - f.shape[1]
            if pad > 0:
                f, lse = F.pad(f, (0, 0, 0, pad)), F.pad(lse, (0, pad))
            logp = f[vj] @ head.head_w.T - lse[vj][:, None]
        logits = head.logits(g[vj])
        logq = torch.log_softmax(logits, -1)
        p = logp.exp()
        flat = dict(ce=-(p * logq).sum(-1), alpha=torch.minimum(p, logq.exp()).sum(-1),
                    match=(logits.argmax(-1) == logp.argmax(-1)).float())
        row = {key: torch.zeros(vj.shape, dtype=val.dtype).masked_scatter(vj, val) for key, val in flat.items()}
        terms.append({**row, "valid": vj})
    return terms


def chain_view(terms: list[dict], key: str) -> torch.Tensor:
    """[n_anchors, K] values of `key` along each anchor's whole block (anchors whose K targets are
    all generated tokens)."""
    full = terms[-1]["valid"]
    return torch.stack([t[key][full] for t in terms], -1)


INTERVENTIONS = ("positional", "focal", "chain")
ARMS = {"ce": (), "positional": ("positional",), "focal": ("focal",), "chain": ("chain",),
        "all": INTERVENTIONS}
GAMMA = 0.8          # positional weight of output j: GAMMA^j (a late slot only counts if all before it pass)


def block_loss(terms: list[dict], use: tuple = ()) -> torch.Tensor:
    """The block objective. Base: the mean cross-entropy (forward KL to the target) of every output,
    equally weighted; with "positional", output j weighs GAMMA^j. "focal" adds the first-error
    focal term: the cross-entropy at each block's first greedy mismatch, weighted (1 − α) there.
    "chain" adds 1 − E[τ]/K, E[τ] = Σ_j Π_{i≤j} α_i the expected accepted length at T = 1."""
    w = [GAMMA ** j if "positional" in use else 1.0 for j in range(len(terms))]
    mean = lambda x, v: (x * v).sum() / v.sum().clamp_min(1)
    loss = sum(wj * mean(t["ce"], t["valid"].float()) for wj, t in zip(w, terms)) / sum(w)
    if "focal" in use or "chain" in use:
        ce, al, mt = chain_view(terms, "ce"), chain_view(terms, "alpha"), chain_view(terms, "match")
        if len(ce):
            if "focal" in use:
                reach = torch.cat([torch.ones_like(mt[:, :1]), torch.cumprod(mt, -1)[:, :-1]], -1)
                first_error = reach * (1 - mt)
                loss = loss + (first_error * (1 - al.detach()) * ce).sum(-1).mean()
            if "chain" in use:
                loss = loss + (1 - chain_expected_length(al) / len(terms)).mean()
    return loss


@torch.no_grad()
def evaluate_block(head, seqs: list[dict], K: int, keep_blocks: bool = False) -> dict:
    """Held-out, teacher-forced: per output greedy agreement and T=1 α, acceptance by position
    (P(output j agrees | all before it did), greedy), and accepted drafts per round at k = K:
    greedy (the run of agreements) and T = 1 (E[τ] from α). keep_blocks: also "blocks", the
    per-block (match, α) [n_blocks, K] and the sequence each block is from [n_blocks]."""
    from .data import make_batch
    head.eval()
    agree, alpha, mts, als, owner = [[] for _ in range(K)], [[] for _ in range(K)], [], [], []
    for r in range(0, len(seqs), 8):
        b = make_batch(seqs, list(range(r, min(r + 8, len(seqs)))))
        terms = block_terms(head, block_rollout(head, b["feats"], b["ids"], K), b)
        for j, t in enumerate(terms):
            agree[j].append(t["match"][t["valid"]]), alpha[j].append(t["alpha"][t["valid"]])
        mts.append(chain_view(terms, "match")), als.append(chain_view(terms, "alpha"))
        owner.append(torch.repeat_interleave(torch.arange(r, r + len(b["ids"])), terms[-1]["valid"].sum(1)))
    mt, al = torch.cat(mts), torch.cat(als)
    cat = lambda xs: float(torch.cat(xs).mean())
    return dict(agree=[round(cat(a), 4) for a in agree], alpha_t1=[round(cat(a), 4) for a in alpha],
                **block_metrics(mt, al), **({"blocks": (mt, al, torch.cat(owner))} if keep_blocks else {}))


def block_metrics(mt: torch.Tensor, al: torch.Tensor) -> dict:
    """Acceptance by position and accepted drafts per round from per-block greedy matches mt and
    T=1 α's al, both [n_blocks, K] (evaluate_block's figures; a bootstrap resamples their rows)."""
    K = mt.shape[1]
    reach = torch.cumprod(mt, -1)
    by_pos = [float(mt[:, 0].mean())] + [float(reach[:, j].sum() / reach[:, j - 1].sum().clamp_min(1))
                                         for j in range(1, K)]
    return dict(accept_by_position=[round(x, 4) for x in by_pos],
                accepted_greedy=round(float(reach.sum(-1).mean()), 3),
                accepted_t1=round(float(chain_expected_length(al).mean()), 3))
