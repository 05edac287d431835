"""The rejection rule, the only place it is written: which drafts are kept, and what the round's
last token is drawn from. The round loop (speculative.py) and the exactness experiment
(exactness.py) both call the chain's two functions.

Why it is exact: a draft x ~ q is kept with probability min(1, p(x)/q(x)), so token x arrives by
this route with probability min(p(x), q(x)); a rejection happens with probability
1 − Σ min(p, q) = Σ max(0, p − q), and then x is drawn from norm(max(0, p − q)). The two routes add
up to min(p, q) + max(0, p − q) = p(x).

Token trees (decoding/tree.py) are verified by accept_tree, the same rule with q a point mass on
each child, tried one after another (proof in its docstring).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


def accept_drafts(p_x: torch.Tensor, q_x: torch.Tensor, u: Optional[torch.Tensor]) -> torch.Tensor:
    """Which drafts pass, each on its own: [m] bool.

    p_x, q_x [m]: target and draft probability of each drafted token (after the same warps);
    u [m]: uniform draws, or None for greedy (kept iff the token is the target's argmax, p_x = 1).
    The round keeps the longest all-True prefix."""
    if u is None:
        return p_x >= 1.0
    return u < p_x / q_x.clamp_min(1e-30)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, p − q) [..., V]: the mass the draft under-proposed, which a rejected sampled draft's
    replacement is drawn from once normalised (the one place it is written)."""
    return (p - q).clamp_min(0)


def correction_distribution(p_target: torch.Tensor, q_draft: torch.Tensor,
                            n_accepted: torch.Tensor) -> torch.Tensor:
    """The distribution of the token that follows the accepted prefix: [V].

    p_target [m+1, V], q_draft [m, V], n_accepted: 0-d tensor. At a rejection (n < m) it is
    norm(max(0, p_n − q_n)); past the last draft q is zero, so the same formula gives p_{m+1}
    (the bonus). Indexing stays on the device: no host sync.
    """
    q_padded = torch.cat([q_draft, q_draft.new_zeros(1, q_draft.shape[-1])])
    row = residual(p_target, q_padded).index_select(0, n_accepted[None])[0]
    row_sum = row.sum()
    # p == q at that position makes a rejection impossible in exact arithmetic; guard rounding.
    return torch.where(row_sum > 0, row / row_sum.clamp_min(1e-30),
                       p_target.index_select(0, n_accepted[None])[0])


# ---- trees ------------------------------------------------------------------------------------

@dataclass
class TreeAcceptance:
    """What accept_tree decided for one round."""
    path: list                    # accepted node indices, root's child first
    path_ids: list                # their token ids
    correction_dist: torch.Tensor  # [V] what the round's last token was drawn from
    correction_id: int
    kind: str                     # "resample" (a child of the last node was rejected) or "bonus"
    decisions: list               # [n] per node: "accepted", "rejected" or "not reached"
    u: list                       # [n] the uniform draw a node was tried with (None: not tried, greedy)


def keeps_guess(u, r_x, r_mass):
    """Is a guessed child x kept? u < r(x)/Σr, written u·Σr < r(x) (floats or tensors alike): r_x
    its target probability at the node, r_mass what the node's distribution has left after the
    children rejected before it (Σr)."""
    return u * r_mass < r_x


def reject_child(removed: dict, token: int, r_x: float) -> None:
    """A rejected child leaves its node's distribution: r(x) ← 0, its mass leaves Σr."""
    removed[token] = r_x


def accept_tree(parents: list, draft_ids: torch.Tensor, p_target: torch.Tensor, greedy: bool,
                generator: Optional[torch.Generator], q_sampled: Optional[torch.Tensor] = None) -> TreeAcceptance:
    """Walk a token tree down from the root: which path is kept, and the round's last token.

    parents [n] (topological, -1: child of the root; a node's children are tried in index order),
    draft_ids [n], p_target [n+1, V] (row 0: the target's p after the root, row i: after node i-1,
    warped). q_sampled [n, V]: given when every node was drawn from its row (a sampled chain: each
    node an only child); None: the children are deterministic guesses. Greedy: at each node the
    child equal to the target's argmax is kept, the last token is the argmax. Sampling: all u are
    drawn with `generator` in one call. Two reads from the device: ids / p(child) / q(child) /
    argmax / u together, then the last token.

    Why it is exact. At a node the target's next-token distribution is p; start with r = p.
    Deterministic children x_1, x_2, .. are tried in order, each chosen before and apart from the
    draws below: x is accepted with probability r(x)/Σr, else r(x) ← 0; when no child is accepted
    the token is drawn from norm(r) (a leaf: no child, so straight from p, the bonus). By induction
    on the number of children the token at this node is distributed as norm(r) = p: with one trial,
    P(x_1) = p(x_1), and otherwise (probability 1 − p(x_1)) the rest is the same procedure on
    norm(p without x_1), which gives any y ≠ x_1 with probability (1 − p(x_1))·p(y)/(1 − p(x_1)) =
    p(y). A sampled only child x ~ q is the chain rule: kept with probability min(1, p(x)/q(x)),
    else the token is drawn from norm(max(0, p − q)) (module docstring: the two routes add up to p).
    An accepted child moves to its own row, the target's p given the path so far, so each committed
    token follows the target's conditional, i.e. the round samples the target. The deterministic
    rule is the chain rule with q a point mass on x (min(1, r(x)/1) and norm(max(0, r − δ_x)) =
    norm(r with x removed)).
    """
    n, device = len(parents), p_target.device
    rows = torch.tensor([parent + 1 for parent in parents], dtype=torch.long, device=device)
    ids = draft_ids.to(device)
    # 1. Everything the walk reads, to the host in one transfer: ids, p(child) at its parent's row,
    #    q(child) when sampled, the argmax of every row, one u per node (drawn in one call, used
    #    only if the node is tried).
    u = None if greedy or n == 0 else torch.rand(n, generator=generator, device=device)
    sampled = q_sampled is not None and not greedy and n > 0
    parts = [ids.double(), p_target[rows, ids].double(), p_target.argmax(-1).double()]
    if sampled:
        parts.append(q_sampled.to(device).gather(-1, ids[:, None]).squeeze(-1).double())
    host = torch.cat(parts + ([u.double()] if u is not None else [])).tolist()
    ids_h, p_child, argmax = [int(x) for x in host[:n]], host[n:2 * n], [int(x) for x in host[2 * n:3 * n + 1]]
    q_child = host[3 * n + 1:4 * n + 1] if sampled else None
    u_h = host[-n:] if u is not None else [None] * n
    children = {i: [] for i in range(-1, n)}
    for i, parent in enumerate(parents):
        children[parent].append(i)

    # 2. Walk on the host: try each node's children in order until one is accepted.
    node, path, decisions = -1, [], ["not reached"] * n
    while True:
        removed, kept, residual_of = {}, None, None
        for child in children[node]:
            x = ids_h[child]
            if greedy:
                ok = x == argmax[node + 1]
            elif sampled:                                          # u < p(x)/q(x)
                ok = u_h[child] * q_child[child] < p_child[child]
            else:
                r_x = 0.0 if x in removed else p_child[child]     # a repeated token went with its first copy
                ok = keeps_guess(u_h[child], r_x, 1.0 - sum(removed.values()))
            decisions[child] = "accepted" if ok else "rejected"
            if ok:
                kept = child
                break
            if sampled:
                residual_of = child
            else:
                reject_child(removed, x, 0.0 if greedy else r_x)
        if kept is None:
            break
        path.append(kept)
        node = kept

    # 3. The last token from norm(r) at the last node: its row with the rejected children removed
    #    (a rejected sampled child: norm(max(0, p − q))).
    p_row = p_target[node + 1]
    if residual_of is not None:
        r = residual(p_row, q_sampled[residual_of].to(device))
    else:
        r = p_row.clone()
        if removed:
            r[torch.tensor(list(removed), dtype=torch.long, device=device)] = 0.0
    r_sum = r.sum()
    # All mass removed cannot happen in exact arithmetic; guard rounding with p.
    correction_dist = torch.where(r_sum > 0, r / r_sum.clamp_min(1e-30), p_row)
    token = correction_dist.argmax() if greedy else torch.multinomial(correction_dist, 1, generator=generator)[0]
    return TreeAcceptance(path, [ids_h[i] for i in path], correction_dist, int(token),
                          "resample" if children[node] else "bonus", decisions,
                          [u_h[i] if decisions[i] != "not reached" else None for i in range(n)])
