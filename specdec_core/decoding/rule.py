"""The rejection rule, the only place it is written: which drafts are kept, and what the round's
last token is drawn from. Every round runs accept_tree (speculative.py); the exactness lab
(exactness.py, app/teach/lab.py) runs the same steps vectorised over its trials:

    keeps_draft(u, r_x, q_x, r_mass)   is a draft x ~ q kept: u < (r(x)/Σr)/q(x), r what the node has left
    keep_threshold(r_x, q_x, r_mass)   the number u was tested against, min(1, (r(x)/Σr)/q(x)) (the record)
    guess_masses(tokens, p_x)          the r(x) and Σr each guessed child is tried against, in order
    reject_child(removed, x, r_x)      a rejected guess leaves r: r(x) ← 0
(these three scalar steps are written beside KeepTest in trace/decisions.py, which also derives an
older trace's tests with them on load: the trace never imports the decoder)
    point_masses(tokens, like)         a guess's q, δ_x (prompt lookup's one-hot q is one)
    residual(r, q)                     max(0, r − q): the mass the draft under-proposed
    last_distribution(r, q_rejected)   norm(max(0, r − q)): what the round's last token is drawn from

Why it is exact (a chain): a draft x ~ q is kept with probability min(1, p(x)/q(x)), so token x
arrives by this route with probability min(p(x), q(x)); a rejection happens with probability
1 − Σ min(p, q) = Σ max(0, p − q), and then x is drawn from norm(max(0, p − q)). The two routes add
up to min(p, q) + max(0, p − q) = p(x). Token trees (decoding/tree.py): the same rule at every
node, a guess being a draft with q a point mass on it (proof in accept_tree's docstring).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..trace import decisions as node_steps   # the per-node steps, read at call time (tests swap one)
from ..trace.decisions import DrawnFrom, KeepTest, guess_masses, keep_threshold, reject_child  # noqa: F401 (the rule's steps)


def keeps_draft(u, r_x, q_x, r_mass=1.0):
    """Is a draft x ~ q kept at a node: u < (r(x)/Σr)/q(x), written u·q(x)·Σr < r(x) (no division;
    floats or tensors alike, [...] bool). r: what the node's distribution has left (p less the
    children rejected before x), r_mass its sum Σr. A sampled child: r = p, Σr = 1, so u < p(x)/q(x).
    A guess (q a point mass on x): q(x) = 1, so u < r(x)/Σr."""
    return u * q_x * r_mass < r_x


def point_masses(tokens: list, like: torch.Tensor) -> torch.Tensor:
    """Σ δ_x over `tokens`, shaped and placed like `like` [V]: the q of guesses (a point mass
    each), so that residual(r, δ_x) is r with x removed (r(x) ≤ 1)."""
    q = torch.zeros_like(like)
    if tokens:
        q[torch.tensor(tokens, dtype=torch.long, device=like.device)] = 1.0
    return q


def residual(r: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, r − q) [..., V]: the mass the draft under-proposed (the one place it is written)."""
    return (r - q).clamp_min(0)


def last_distribution(r: torch.Tensor, q_rejected: torch.Tensor) -> torch.Tensor:
    """norm(max(0, r − q)) [V]: what a node's token is drawn from when no child was kept. r [V]: the
    target's p at the node; q_rejected [V]: a rejected sampled child's q, the point masses of the
    rejected guesses, or zeros (no child: the bonus, p itself). No host sync."""
    left = residual(r, q_rejected)
    left_sum = left.sum()
    # All mass removed cannot happen in exact arithmetic (p == q makes a rejection impossible);
    # guard rounding with r.
    return torch.where(left_sum > 0, left / left_sum.clamp_min(1e-30), r)


# ---- a round: the steps above at every node, walking down the tree ---------------------------

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
    tests: list                   # [n] the KeepTest a tried node met (None: not reached)
    keep_at: list                 # [n] what its u was tested against, kept iff u < it (None: not tried, greedy)
    drawn_from: DrawnFrom         # what the last token was drawn from
    flag: Optional[float] = None  # the caller's `flag` tensor, read with the walk's numbers


def accept_tree(parents: list, draft_ids: torch.Tensor, p_target: torch.Tensor, greedy: bool,
                generator: Optional[torch.Generator], q_sampled: Optional[torch.Tensor] = None,
                flag: Optional[torch.Tensor] = None) -> TreeAcceptance:
    """Walk a token tree down from the root: which path is kept, and the round's last token.

    parents [n] (topological, -1: child of the root; a node's children are tried in index order),
    draft_ids [n], p_target [n+1, V] (row 0: the target's p after the root, row i: after node i-1,
    warped). q_sampled [n, V]: given when every node was drawn from its row (a sampled chain: each
    node an only child); None: the children are deterministic guesses. Greedy: at each node the
    child equal to the target's argmax is kept, the last token is the argmax. Sampling: all u are
    drawn with `generator` in one call. Two reads from the device: ids / p(child) / q(child) /
    argmax / u together, then the last token. flag: a one-element tensor of the caller's (the
    decoder's NaN/inf check), read in the first of them rather than on its own: a sync saved.

    Why it is exact. At a node the target's next-token distribution is p; start with r = p. Every
    child x is a draft from some q: a sampled only child x ~ q, or a guess, chosen before and apart
    from the draws below, so q = δ_x, a point mass (prompt lookup's one-hot q is one, at a sampled
    chain node or as a guess). The children are tried in order, each with the chain rule against
    norm(r): x is kept with probability min(1, (r(x)/Σr)/q(x)) (keeps_draft); rejected, r becomes
    max(0, r − q) (residual: the chain rule's max(0, norm(r) − q) up to normalisation, as Σr = 1
    for a sampled child; a guess below) and the next child is tried against that; when no child is
    kept the token is drawn from norm(r) (last_distribution; a leaf: no child, so straight from p,
    the bonus). The chain rule gives a token distributed as its target (module docstring: the two
    routes add up to it), and trying the next child in place of the resample gives, by induction on
    the number of children left, a token distributed as what the resample would have drawn from.
    So the token at the node is distributed as p. For a guess, min(1, (r(x)/Σr)/1) = r(x)/Σr and
    max(0, r − δ_x) is r with x removed, as r(x) ≤ 1: r(x) ← 0 (reject_child; guess_masses keeps
    Σr). An accepted child moves to its own row, the target's p given the path so far, so each
    committed token follows the target's conditional, i.e. the round samples the target.
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
    if flag is not None:
        parts.append(flag.reshape(1).double())
    host = torch.cat(parts + ([u.double()] if u is not None else [])).tolist()
    flag_h = host[4 * n + 1 if sampled else 3 * n + 1] if flag is not None else None
    ids_h, p_child, argmax = [int(x) for x in host[:n]], host[n:2 * n], [int(x) for x in host[2 * n:3 * n + 1]]
    q_child = host[3 * n + 1:4 * n + 1] if sampled else [1.0] * n    # a guess: q a point mass on it
    u_h = host[-n:] if u is not None else [None] * n
    children = {i: [] for i in range(-1, n)}
    for i, parent in enumerate(parents):
        children[parent].append(i)

    # 2. Walk on the host: at each node try its children in order (the chain rule against what the
    #    node has left; greedy: the target's argmax) until one is kept, and move down to it.
    #    Each tried node's test and threshold are recorded as decided: the views read them.
    node, path, decisions = -1, [], ["not reached"] * n
    tests, keep_at = [None] * n, [None] * n
    test = KeepTest.TOP if greedy else KeepTest.SAMPLED if sampled else KeepTest.CHOSEN
    while True:
        kids, kept = children[node], None
        r_x, r_mass, removed = node_steps.guess_masses([ids_h[c] for c in kids], [p_child[c] for c in kids])
        for i, child in enumerate(kids):
            tests[child] = test
            if greedy:
                ok = ids_h[child] == argmax[node + 1]
            else:
                ok = keeps_draft(u_h[child], r_x[i], q_child[child], r_mass[i])
                keep_at[child] = keep_threshold(r_x[i], q_child[child], r_mass[i])
            decisions[child] = "accepted" if ok else "rejected"
            if ok:
                kept = child
                break
        if kept is None:
            break
        path.append(kept)
        node = kept

    # 3. The last token from norm(max(0, p − q)) at the last node, q what its rejected children
    #    were drawn from: a sampled child's q row, the guesses' point masses; none: p (the bonus).
    p_row = p_target[node + 1]
    q_rejected = (q_sampled[kids[0]].to(device) if sampled and kids else point_masses(list(removed), p_row))
    correction_dist = last_distribution(p_row, q_rejected)
    token = correction_dist.argmax() if greedy else torch.multinomial(correction_dist, 1, generator=generator)[0]
    drawn_from = (DrawnFrom.TOP if greedy else DrawnFrom.P if not kids
                  else DrawnFrom.RESIDUAL if sampled else DrawnFrom.REST)
    return TreeAcceptance(path, [ids_h[i] for i in path], correction_dist, int(token),
                          "resample" if kids else "bonus", decisions,
                          [u_h[i] if decisions[i] != "not reached" else None for i in range(n)],
                          tests, keep_at, drawn_from, flag_h)
