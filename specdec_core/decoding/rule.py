"""The rejection rule, the only place it is written: which drafts are kept, and what the round's
last token is drawn from. The round loop (speculative.py) and the exactness experiment
(exactness.py) both call these two functions.

Why it is exact: a draft x ~ q is kept with probability min(1, p(x)/q(x)), so token x arrives by
this route with probability min(p(x), q(x)); a rejection happens with probability
1 − Σ min(p, q) = Σ max(0, p − q), and then x is drawn from norm(max(0, p − q)). The two routes add
up to min(p, q) + max(0, p − q) = p(x).
"""
from __future__ import annotations

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


def correction_distribution(p_target: torch.Tensor, q_draft: torch.Tensor,
                            n_accepted: torch.Tensor) -> torch.Tensor:
    """The distribution of the token that follows the accepted prefix: [V].

    p_target [m+1, V], q_draft [m, V], n_accepted: 0-d tensor. At a rejection (n < m) it is
    norm(max(0, p_n − q_n)); past the last draft q is zero, so the same formula gives p_{m+1}
    (the bonus). Indexing stays on the device: no host sync.
    """
    q_padded = torch.cat([q_draft, q_draft.new_zeros(1, q_draft.shape[-1])])
    row = (p_target - q_padded).clamp_min(0).index_select(0, n_accepted[None])[0]
    row_sum = row.sum()
    # p == q at that position makes a rejection impossible in exact arithmetic; guard rounding.
    return torch.where(row_sum > 0, row / row_sum.clamp_min(1e-30),
                       p_target.index_select(0, n_accepted[None])[0])
